"""Image records: made from bytes, admitted, and read back with their hash checked.

An image up to `images.max_inline_bytes` travels inside the record; a bigger one (up to `images.max_bytes`) is
written once to the artifact store as `<store>/images/<sha256>.<ext>` and the record carries that uri. A uri is
believed by the weight uris' rule: it must be exactly where the store keeps that sha256 (never `http://` or
`file:///etc`), a regular file of the recorded size, and its bytes must hash to the recorded sha256 when read.
Pillow opens the bytes only after those checks, with a pixel bound (a small file that decodes to a huge bitmap
is refused), so a forged record can neither point a reader elsewhere nor make it decode something unbounded.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import fsspec

from rftbus.ground.errors import RftbusError
from rftbus.ground.schemas import Image
from rftbus.ground.weights.store_transport import file_refusal, store_uri, store_url, write_whole

if TYPE_CHECKING:
    from rftbus.ground.config import Config

MEDIA = {"PNG": "image/png", "JPEG": "image/jpeg", "GIF": "image/gif", "WEBP": "image/webp", "BMP": "image/bmp"}
EXT = {v: k.lower() for k, v in MEDIA.items()}


class ImageRefusal(RftbusError):
    """An image that is not accepted; `reason` is the rejection reason (image_too_large, image_refused,
    too_many_images), the message says what was wrong."""

    def __init__(self, reason: str, detail: str):
        super().__init__(detail)
        self.reason, self.detail = reason, detail


@dataclass(frozen=True)
class _Probe:
    media_type: str
    width: int
    height: int


def _store_url(cfg: Config) -> str:
    if cfg.images.store_url:
        return cfg.images.store_url
    return f"{store_url(cfg).rstrip('/')}/images"


def image_uri(cfg: Config, sha256: str, media_type: str) -> str:
    """Where the store keeps the image with this hash (the one spelling: writers use it, readers compare with it)."""
    return store_uri(_store_url(cfg), f"{sha256}.{EXT.get(media_type, 'bin')}")


def _probe(data: bytes, cfg: Config) -> _Probe:
    """The format and size Pillow reads from the header, within the pixel bound; ImageRefusal otherwise."""
    from PIL import Image as PIL, UnidentifiedImageError

    try:
        with PIL.open(io.BytesIO(data)) as im:
            fmt, (w, h) = im.format, im.size
    except (UnidentifiedImageError, OSError, ValueError) as e:
        raise ImageRefusal("image_refused", f"the bytes are not an image Pillow reads ({type(e).__name__})") from None
    if fmt not in MEDIA:
        raise ImageRefusal("image_refused", f"image format {fmt} is not one of {', '.join(MEDIA)}")
    if w * h > cfg.images.max_pixels:
        raise ImageRefusal("image_too_large", f"a {w}x{h} image is over images.max_pixels={cfg.images.max_pixels}")
    return _Probe(MEDIA[fmt], w, h)


def image_of(data: bytes, cfg: Config, by_reference: bool = False) -> Image:
    """The record of an image's bytes: inline when small enough (and not `by_reference`), else written to the store
    (once per hash)."""
    if len(data) > cfg.images.max_bytes:
        raise ImageRefusal("image_too_large", f"an image of {len(data)} bytes is over images.max_bytes="
                                              f"{cfg.images.max_bytes}")
    p = _probe(data, cfg)
    sha = hashlib.sha256(data).hexdigest()
    if len(data) <= cfg.images.max_inline_bytes and not by_reference:
        return Image(media_type=p.media_type, sha256=sha, size=len(data), data=data, width=p.width, height=p.height)
    uri = image_uri(cfg, sha, p.media_type)
    fs, path = fsspec.core.url_to_fs(uri)
    if not fs.exists(path):  # (written once per hash, whole or absent: a reader never sees half an image)
        write_whole(uri, data)
    return Image(media_type=p.media_type, sha256=sha, size=len(data), uri=uri, width=p.width, height=p.height)


def refusal(img: Image, cfg: Config, look: bool = True) -> ImageRefusal | None:
    """Why `img` is not admitted (checked before its bytes are used), or None. `look`: also check that a referenced
    file is there, a regular file of the recorded size."""
    if img.size < 0 or img.size > cfg.images.max_bytes:
        return ImageRefusal("image_too_large", f"an image of {img.size} bytes is over images.max_bytes="
                                               f"{cfg.images.max_bytes}")
    if (img.data is None) == (img.uri is None):
        return ImageRefusal("image_refused", "an image record carries exactly one of data and uri")
    if img.data is not None:
        if len(img.data) > cfg.images.max_inline_bytes:
            return ImageRefusal("image_too_large", f"{len(img.data)} bytes inline, over images.max_inline_bytes="
                                                   f"{cfg.images.max_inline_bytes} (bigger images travel by uri)")
        if len(img.data) != img.size:
            return ImageRefusal("image_refused", f"{len(img.data)} bytes inline, the record says {img.size}")
        return None
    want = image_uri(cfg, img.sha256, img.media_type)
    if img.uri != want:
        return ImageRefusal("image_refused", f"uri {str(img.uri)[:200]!r} is not the image store's for sha256 "
                                             f"{img.sha256[:16]}... ({want})")
    if not look:
        return None
    bad = file_refusal(want, img.size)
    return ImageRefusal("image_refused", bad) if bad is not None else None


def images_refusal(images: list[Image], cfg: Config, look: bool = True) -> ImageRefusal | None:
    """The first refusal among a record's images (their number included), or None."""
    if len(images) > cfg.images.max_images:
        return ImageRefusal("too_many_images", f"{len(images)} images, over images.max_images={cfg.images.max_images}")
    for k, img in enumerate(images):
        bad = refusal(img, cfg, look)
        if bad is not None:
            return ImageRefusal(bad.reason, f"image {k}: {bad.detail}")
    return None


def verified_refusal(images: list[Image], cfg: Config, read_references: bool = True) -> ImageRefusal | None:
    """The first refusal of a record's images once their bytes are hashed (`images_refusal`, then `image_bytes`):
    every image's, or with `read_references` False only the inline ones' (a referenced file is looked at, not read:
    the streams leave its bytes to the trainer). Each file is looked at once."""
    bad = images_refusal(images, cfg, look=not read_references)
    if bad is not None:
        return bad
    for k, img in enumerate(images):
        if read_references or img.data is not None:
            try:
                image_bytes(img, cfg)
            except ImageRefusal as e:
                return ImageRefusal(e.reason, f"image {k}: {e.detail}")
    return None


def image_bytes(img: Image, cfg: Config) -> bytes:
    """The image's bytes, admitted and hash-checked (ImageRefusal otherwise): what every reader uses."""
    bad = refusal(img, cfg)
    if bad is not None:
        raise bad
    if img.data is not None:
        data = img.data
    else:
        fs, path = fsspec.core.url_to_fs(str(img.uri))
        with fs.open(path, "rb") as f:
            data = f.read(img.size + 1)
    if len(data) != img.size or hashlib.sha256(data).hexdigest() != img.sha256:
        raise ImageRefusal("image_refused", f"the bytes do not hash to the recorded sha256 {img.sha256[:16]}...")
    return data


def pil_image(img: Image, cfg: Config) -> Any:
    """The image as an RGB PIL image (read and verified as `image_bytes`; decoded within images.max_pixels)."""
    from PIL import Image as PIL

    data = image_bytes(img, cfg)
    _probe(data, cfg)
    with PIL.open(io.BytesIO(data)) as im:
        return im.convert("RGB")


def pil_images(images: list[Image], cfg: Config) -> list[Any]:
    """A record's images as PIL images, in order: what a reward that looks at the image receives."""
    return [pil_image(i, cfg) for i in images]


def data_uri(data: bytes, media_type: str) -> str:
    return f"data:{media_type};base64,{base64.b64encode(data).decode()}"


def from_data_uri(url: str, cfg: Config, by_reference: bool = False) -> Image:
    """An OpenAI-style `image_url` (a base64 data URI) as an Image record; ImageRefusal naming what is wrong for
    any other URL (serve never fetches a URL a request names)."""
    if not url.startswith("data:"):
        raise ImageRefusal("image_refused", "image_url must be a data: URI (base64); serve fetches no URLs")
    head, _, payload = url.partition(",")
    if not head.endswith(";base64"):
        raise ImageRefusal("image_refused", "image_url data URI must be base64 (data:image/png;base64,...)")
    if len(payload) > (cfg.images.max_bytes * 4) // 3 + 4:
        raise ImageRefusal("image_too_large", f"the image is over images.max_bytes={cfg.images.max_bytes}")
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise ImageRefusal("image_refused", "image_url data URI is not valid base64") from None
    return image_of(data, cfg, by_reference)
