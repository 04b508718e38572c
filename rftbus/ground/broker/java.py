"""Finding a JDK that can run the broker (Kafka 4.x needs Java 17 or newer)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from rftbus.ground.errors import RftbusError

MIN_JAVA = 17


class JavaError(RftbusError):
    """No usable JDK; the message says what was found and what to do."""


@dataclass(frozen=True)
class Java:
    path: str
    major: int
    version: str


def parse_java_version(text: str) -> tuple[int, str]:
    """Major version from `java -version` output: '17.0.15' -> 17, legacy '1.8.0_292' -> 8."""
    m = re.search(r'version "([^"]+)"', text)
    if not m:
        raise JavaError(f"could not read a version from `java -version`: {text.strip()[:200]!r}")
    version = m.group(1)
    parts = re.split(r"[._\-+]", version)
    try:
        major = int(parts[1]) if parts[0] == "1" and len(parts) > 1 else int(parts[0])
    except ValueError:
        raise JavaError(f"could not read a version from `java -version`: {version!r}") from None
    return major, version


def find_java() -> Java:
    """JAVA_HOME/bin/java if set, else `java` on PATH; raises JavaError unless it is 17+."""
    home = os.environ.get("JAVA_HOME")
    candidate = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not candidate or not Path(candidate).exists():
        where = f"JAVA_HOME={home} has no bin/java" if home else "no `java` on PATH"
        raise JavaError(
            f"the embedded Kafka broker needs a JDK {MIN_JAVA}+ but {where}; "
            "install one (e.g. `apt-get install openjdk-17-jre-headless`) or point JAVA_HOME at it, "
            "or use an existing cluster via kafka.bootstrap_servers"
        )
    try:
        out = subprocess.run([candidate, "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise JavaError(f"{candidate} -version failed: {e}") from None
    major, version = parse_java_version(out.stderr + out.stdout)
    if major < MIN_JAVA:
        raise JavaError(
            f"the embedded Kafka broker needs Java {MIN_JAVA}+ but {candidate} is Java {version}; "
            "install a newer JDK or set JAVA_HOME to one"
        )
    return Java(candidate, major, version)
