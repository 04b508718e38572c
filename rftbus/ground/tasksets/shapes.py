"""Shapes on a picture (#62): a synthetic visual taskset drawn with Pillow, for vision-language models.

Each task is a small PNG (inline in the Task record) with one to three shapes, and a question about it: `colour?`
(the colour of the shape: red, green, blue or yellow), `shape?` (circle, square or triangle) or `count?` (how many
shapes, 1-3, all of one colour and kind). The answer is one word, rewarded on an exact match (the response's first
word, case and punctuation aside). A text-only model cannot do better than guessing the commonest answer; the
tiny VLM learns colour and count from pixels (`make demo-vision`, the default questions). `shape?` is harder: the
tiny VLM's 8-pixel patches learned it no better than chance in 400 steps of supervised training (colour 1.00,
shape 0.17-0.27 held out), so it is there for larger vision towers, not in the default.
"""

from __future__ import annotations

import hashlib
import io
import random
import re

from rftbus.ground.schemas import Image
from rftbus.ground.tasksets.base import BuiltinTaskset

COLOURS = {"red": (220, 30, 30), "green": (30, 170, 50), "blue": (40, 60, 220), "yellow": (235, 200, 20)}
KINDS = ("circle", "square", "triangle")
QUESTIONS = {"colour": "colour?", "shape": "shape?", "count": "count?"}
_WORD = re.compile(r"[a-z0-9]+")


def inline_png(data: bytes, width: int, height: int) -> Image:
    """An Image record carrying a PNG's bytes inline (the task intake applies the run's size bounds)."""
    return Image(media_type="image/png", sha256=hashlib.sha256(data).hexdigest(), size=len(data), data=data,
                 width=width, height=height)


def draw(scene: list[tuple[str, str, int, int, int]], side: int) -> bytes:
    """A PNG of `scene`: (colour, kind, x, y, size) per shape on a light grey canvas of `side` pixels."""
    from PIL import Image as PIL, ImageDraw

    im = PIL.new("RGB", (side, side), (235, 235, 235))
    d = ImageDraw.Draw(im)
    for colour, kind, x, y, s in scene:
        fill = COLOURS[colour]
        if kind == "circle":
            d.ellipse((x, y, x + s, y + s), fill=fill)
        elif kind == "square":
            d.rectangle((x, y, x + s, y + s), fill=fill)
        else:
            d.polygon([(x + s / 2, y), (x, y + s), (x + s, y + s)], fill=fill)
    buf = io.BytesIO()
    im.save(buf, format="PNG", optimize=True)
    return buf.getvalue()


class Shapes(BuiltinTaskset):
    name = "shapes"

    def __init__(self, questions: list[str] | tuple[str, ...] = ("colour", "count"), side: int = 32,
                 max_count: int = 3):
        bad = [q for q in questions if q not in QUESTIONS]
        if bad or not questions:
            raise ValueError(f"shapes questions must be some of {', '.join(QUESTIONS)}, not {bad or 'none'}")
        if side < 16 or not 1 <= max_count <= 3:
            raise ValueError("shapes needs side >= 16 and 1 <= max_count <= 3")
        self.questions, self.side, self.max_count = tuple(questions), side, max_count

    def scene(self, rng: random.Random, question: str) -> list[tuple[str, str, int, int, int]]:
        colour, kind = rng.choice(list(COLOURS)), rng.choice(KINDS)
        n = rng.randint(1, self.max_count) if question == "count" else 1
        cells = self.side // 2 if n > 1 else self.side  # several shapes: one per quadrant, never overlapping
        spots = rng.sample([(0, 0), (1, 0), (0, 1), (1, 1)], n) if n > 1 else [(0, 0)]
        out = []
        for cx, cy in spots:
            s = rng.randint(max(5, cells // 3), max(6, cells - 4))
            x = cx * cells + rng.randint(1, max(1, cells - s - 1))
            y = cy * cells + rng.randint(1, max(1, cells - s - 1))
            out.append((colour, kind, x, y, s))
        return out

    def problem(self, rng: random.Random) -> tuple[str, str, dict[str, str]]:
        question = rng.choice(self.questions)
        scene = self.scene(rng, question)
        colour, kind = scene[0][0], scene[0][1]
        answer = {"colour": colour, "shape": kind, "count": str(len(scene))}[question]
        spec = ";".join(",".join(map(str, s)) for s in scene)
        return QUESTIONS[question], answer, {"question": question, "scene": spec, "side": str(self.side)}

    def score(self, response: str, answer: str) -> dict[str, float]:
        words = _WORD.findall(response.lower())
        exact = 1.0 if words and words[0] == answer else 0.0
        return {"reward": exact, "exact": exact, "bare": 1.0 if response.strip().lower() == answer else 0.0}

    def key_of(self, prompt: str, meta: dict[str, str]) -> str:
        """A picture with its question: the same question about another picture is another problem."""
        return f"{prompt}|{meta['scene']}"

    def images_of(self, meta: dict[str, str]) -> list[Image]:
        scene = [(c, k, int(x), int(y), int(s)) for c, k, x, y, s in (p.split(",") for p in meta["scene"].split(";"))]
        return [inline_png(draw(scene, self.side), self.side, self.side)]
