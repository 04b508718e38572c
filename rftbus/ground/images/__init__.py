"""Images in prompts (#62): made into Image records (inline or by reference), admitted, read back verified.

The explorer generates from a task's images and the trainer recomputes the prompt's pixel values from the group's
copies of the same records, so both read the same bytes: `image_bytes` checks the sha256 and size every time.
"""

from rftbus.ground.images.refs import (ImageRefusal, data_uri, from_data_uri, image_bytes, image_of, images_refusal,
                                       pil_image, pil_images, refusal, verified_refusal)

__all__ = ["ImageRefusal", "data_uri", "from_data_uri", "image_bytes", "image_of", "images_refusal", "pil_image",
           "pil_images", "refusal", "verified_refusal"]
