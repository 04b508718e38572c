"""`rftbus bench studio`: how long the studio's pages take to load in a real browser (headless Debian
chromium through chromium-driver), against a running studio, and screenshots of each page.

The figure is the browser's own: navigation start to the load event (everything drawn, the dashboard's
panels included: they are rendered by the server in the page), each page loaded `--runs` times with the
dashboard's cache expired in between (studio.cache_s, so each load runs its queries).
"""

from __future__ import annotations

import json
import shutil
import statistics
import time
from pathlib import Path
from typing import Any

import typer

from rftbus.ground.errors import RftbusError
from rftbus.ground.figures import shrink_png

PAGES = {"queue": "/queue", "dashboard": "/dashboard", "experience": "/experience"}


def chrome(width: int = 1400, height: int = 1000):
    """Headless chromium through chromedriver (Debian's `chromium` and `chromium-driver`)."""
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        raise RftbusError("selenium is needed to drive the browser: pip install selenium (the test extra has it)") from None
    binary = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    driver = shutil.which("chromedriver")
    if not binary or not driver:
        raise RftbusError("a browser is needed: install Debian's `chromium` and `chromium-driver` "
                          "(scripts/system_deps.sh does, run by `make install`)")
    opts = webdriver.ChromeOptions()
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                f"--window-size={width},{height}"):
        opts.add_argument(arg)
    opts.binary_location = binary
    return webdriver.Chrome(options=opts, service=Service(driver))


def load_ms(d) -> float:
    """Navigation start to the end of the load event of the page the browser has open."""
    return float(d.execute_script(
        "const t = performance.getEntriesByType('navigation')[0]; return t.loadEventEnd - t.startTime;"))


def measure(url: str, runs: int, experience: str | None, shots: Path | None, pause_s: float,
            token: str | None = None) -> dict[str, Any]:
    d = chrome(1400, 1300)  # the dashboard's three rows of panels in one screenshot
    out: dict[str, Any] = {"url": url, "runs": runs, "pages": {}}
    try:
        if token:
            d.get(url + "/login")
            d.find_element("id", "login-token").send_keys(token)
            d.find_element("id", "login-submit").click()
            time.sleep(1)
        for name, path in PAGES.items():
            full = url + path + (f"?id={experience}" if name == "experience" and experience else "")
            times = []
            for _ in range(runs):
                time.sleep(pause_s)  # past the dashboard's cache: each load runs its queries
                d.get(full)
                times.append(load_ms(d))
            out["pages"][name] = {"p50_ms": round(statistics.median(times), 1), "max_ms": round(max(times), 1),
                                  "loads_ms": [round(t, 1) for t in times]}
            if shots is not None:
                shots.mkdir(parents=True, exist_ok=True)
                time.sleep(1.5)  # the queue fills by script after the load
                (shots / f"studio-{name}.png").write_bytes(shrink_png(d.get_screenshot_as_png()))
    finally:
        d.quit()
    return out


def bench_studio(
    url: str = typer.Option("http://127.0.0.1:8100/studio", "--url", help="a running studio"),
    runs: int = typer.Option(5, "--runs", min=1, help="loads per page"),
    experience: str = typer.Option(None, "--experience", help="an id for the experience browser's page"),
    screenshots: Path = typer.Option(None, "--screenshots", help="write studio-<page>.png here"),
    token: str = typer.Option(None, "--token", help="sign in with this token first (feedback or read)"),
    pause_s: float = typer.Option(2.5, "--pause", help="seconds between loads (over studio.cache_s)"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Page load times of the studio in headless chromium (target: the dashboard under 1 s)."""
    res = measure(url.rstrip("/"), runs, experience, screenshots, pause_s, token)
    if as_json:
        typer.echo(json.dumps(res, indent=2))
        return
    for name, p in res["pages"].items():
        typer.echo(f"{name:<11} load p50 {p['p50_ms']:>7.1f} ms  max {p['max_ms']:>7.1f} ms  ({runs} loads)")
