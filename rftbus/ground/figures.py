"""Every plot rftbus writes goes through `save_png`: a matplotlib figure as a palette PNG (64 colours, no dither),
half the bytes of matplotlib's truecolour file and the same to the eye, so plots kept beside results in docs/ stay
small. (Pillow: matplotlib's own dependency.)"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

COLORS = 64


def shrink_png(data: bytes, colors: int = COLORS) -> bytes:
    """A PNG's image as a palette PNG of `colors` colours (a screenshot or a plot; transparency flattened on white)."""
    from PIL import Image

    im: Image.Image = Image.open(io.BytesIO(data))
    if im.mode in ("RGBA", "LA", "P"):
        rgba = im.convert("RGBA")
        im = Image.new("RGB", rgba.size, "white")
        im.paste(rgba, mask=rgba.getchannel("A"))
    q = im.convert("RGB").quantize(colors=colors, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    out = io.BytesIO()
    q.save(out, "PNG", optimize=True)
    return out.getvalue()


def save_png(fig: Any, path: Path | str, dpi: float | None = None, **savefig: Any) -> Path:
    """`fig.savefig` to `path` as a small palette PNG; returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", **({"dpi": dpi} if dpi else {}), **savefig)
    path.write_bytes(shrink_png(buf.getvalue()))
    return path
