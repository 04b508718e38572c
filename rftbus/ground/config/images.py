"""The `images:` config section: how big an image may be and where big ones are kept (pydantic only)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class ImagesConfig(BaseModel):
    """Images in tasks and experience groups (rftbus/ground/images/): inline up to a bound, else by reference."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    max_inline_bytes: int = Field(65_536, ge=0, description="an image up to this size travels inline in the record; "
                                  "a bigger one is written to the artifact store and the record carries its uri")
    max_bytes: int = Field(4 * 1024 * 1024, ge=1, description="the largest image accepted at all (inline or by "
                           "reference); a bigger one is rejected with the reason image_too_large")
    max_images: int = Field(8, ge=1, description="images one prompt may show; more are rejected (too_many_images)")
    max_pixels: int = Field(4096 * 4096, ge=1, description="width x height an image may decode to: a small file "
                            "that expands to a huge bitmap (a decompression bomb) is rejected (image_too_large)")
    store_url: str | None = Field(None, description="where images too big to travel inline are kept (a folder or "
                                  "any fsspec URL); default: the weight store's images/ folder")
