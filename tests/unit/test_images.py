"""Image records (#62): made inline or by reference, admitted by the weight uris' rule, read back hash-checked; the
shapes taskset; the tiny VLM's prompt layout and the trainer's checks. No broker (tests/system/test_vision.py runs
them through it)."""

from __future__ import annotations

import dataclasses
import hashlib
import io

import pytest

from rftbus.ground.config import Config
from rftbus.ground.images import ImageRefusal, from_data_uri, image_bytes, image_of, images_refusal, refusal
from rftbus.ground.images.refs import data_uri
from rftbus.ground.schemas import Image, Task
from rftbus.ground.tasksets import get_taskset


def _png(side: int = 8, colour: tuple[int, int, int] = (200, 10, 10), noise: bool = False) -> bytes:
    from PIL import Image as PIL

    im = PIL.new("RGB", (side, side), colour)
    if noise:  # incompressible: a PNG of about side * side * 3 bytes
        im = PIL.frombytes("RGB", (side, side), hashlib.shake_256(b"x").digest(side * side * 3))
    buf = io.BytesIO()
    im.save(buf, format="PNG")
    return buf.getvalue()


@pytest.fixture
def cfg(tmp_path) -> Config:
    return Config(state_dir=tmp_path, images={"max_inline_bytes": 1000, "max_bytes": 200_000, "max_pixels": 512 * 512})


def test_a_small_image_travels_inline_and_a_big_one_by_reference_into_the_store(cfg):
    small = image_of(_png(), cfg)
    assert small.data is not None and small.uri is None and (small.width, small.height) == (8, 8)
    assert image_bytes(small, cfg) == _png()
    data = _png(64, noise=True)
    big = image_of(data, cfg)
    assert big.data is None and big.uri and big.uri.startswith("file://") and big.uri.endswith(f"{big.sha256}.png")
    assert str(cfg.state_dir) in big.uri and image_bytes(big, cfg) == data and big.size == len(data)
    assert image_of(data, cfg) == big  # the same bytes, the same reference: written once


def test_bad_images_are_refused_with_a_reason_naming_what_is_wrong(cfg):
    with pytest.raises(ImageRefusal) as e:
        image_of(b"\0" * 300_000, cfg)
    assert e.value.reason == "image_too_large" and "images.max_bytes" in str(e.value)
    with pytest.raises(ImageRefusal) as e:
        image_of(b"not an image at all", cfg)
    assert e.value.reason == "image_refused" and "not an image" in str(e.value)
    with pytest.raises(ImageRefusal) as e:  # a small file that decodes to a huge bitmap
        image_of(_png(600), cfg)
    assert e.value.reason == "image_too_large" and "max_pixels" in str(e.value)
    good = image_of(_png(), cfg)
    forged = dataclasses.replace(good, sha256=hashlib.sha256(b"other").hexdigest())
    with pytest.raises(ImageRefusal) as e:
        image_bytes(forged, cfg)
    assert e.value.reason == "image_refused" and "sha256" in str(e.value)
    inline_big = dataclasses.replace(good, data=good.data + b"\0" * 2000, size=len(good.data) + 2000)
    assert refusal(inline_big, cfg).reason == "image_too_large"
    elsewhere = Image(media_type="image/png", sha256=good.sha256, size=good.size, uri="file:///etc/passwd")
    bad = refusal(elsewhere, cfg)
    assert bad.reason == "image_refused" and "not the image store's" in bad.detail
    both = dataclasses.replace(good, uri="file:///x")
    assert "exactly one of data and uri" in refusal(both, cfg).detail
    assert images_refusal([good] * 9, cfg).reason == "too_many_images"


def test_a_referenced_file_of_another_size_or_content_is_refused(cfg):
    big = image_of(_png(64, noise=True), cfg)
    path = big.uri.removeprefix("file://")
    with open(path, "ab") as f:
        f.write(b"more")
    assert "bytes, the record says" in refusal(big, cfg).detail
    with open(path, "wb") as f:  # the recorded size, other bytes
        f.write(b"\0" * big.size)
    with pytest.raises(ImageRefusal, match="sha256"):
        image_bytes(big, cfg)


def test_serve_takes_base64_data_uris_only(cfg):
    img = from_data_uri(data_uri(_png(), "image/png"), cfg)
    assert img.data == _png()
    for url, words in (("https://example.com/cat.png", "data: URI"), ("data:image/png,abc", "base64"),
                       ("data:image/png;base64,@@@", "not valid base64")):
        with pytest.raises(ImageRefusal, match=words):
            from_data_uri(url, cfg)


def test_shapes_tasks_are_distinct_pictures_with_a_held_out_split_and_an_exact_reward():
    ts = get_taskset("shapes")
    train, held = list(ts.tasks("train", 300)), list(ts.tasks("eval", 60))
    assert len({t.task_id for t in train}) == 300 and not {t.task_id for t in train} & {t.task_id for t in held}
    assert {t.prompt for t in train} == {"colour?", "count?"}
    t = train[0]
    assert len(t.images) == 1 and t.images[0].data[:8] == b"\x89PNG\r\n\x1a\n"
    assert t.images[0].sha256 == hashlib.sha256(t.images[0].data).hexdigest()
    assert ts.score(f"{t.answer}.", t.answer)["reward"] == 1.0 and ts.score("nope", t.answer)["reward"] == 0.0
    counts = [int(x.answer) for x in train if x.prompt == "count?"]
    assert set(counts) == {1, 2, 3}
    with pytest.raises(ValueError, match="questions"):
        get_taskset("shapes", questions=["size"])


def test_the_tiny_vlm_prompt_holds_one_image_token_per_image_feature(tmp_path):
    from rftbus.ground.models.loading import load_policy, load_tokenizer
    from rftbus.ground.prompting import run_prompt_format
    from rftbus.trainer.checks import Limits, check_record
    from rftbus.trainer.batch_source import Polled

    cfg = Config(state_dir=tmp_path, model={"tiny": {"vision": {}}})
    tok = load_tokenizer(cfg.model)
    fmt = run_prompt_format(tok, cfg)
    task = next(get_taskset("shapes").tasks("train", 1))
    ids = fmt.of_task(task)
    assert ids.count(fmt.vision.token_id) == fmt.vision.token_count(task.images) == 16
    assert fmt.decode([i for i in ids if i != fmt.vision.token_id]) == task.prompt
    text_only = run_prompt_format(tok, Config(state_dir=tmp_path))
    with pytest.raises(Exception, match="reads text only"):
        text_only.of_task(task)
    lm = load_policy(cfg.model, tok)
    assert type(lm).__name__ == "LlavaForConditionalGeneration"
    # The trainer refuses a group whose prompt does not hold its images' tokens, or whose image is forged.
    from rftbus.producers.experience import expert_group

    g = expert_group(task, task.answer, fmt, "test")
    limits = Limits(vocab=len(tok), context=64, images=fmt.vision.problem)
    assert check_record(Polled(group=g, lane="expert", topic="t", partition=0, offset=0), limits).train == [0]
    short = dataclasses.replace(g, prompt_ids=g.prompt_ids[1:])
    [rej] = check_record(Polled(group=short, lane="expert", topic="t", partition=0, offset=0), limits).rejects
    assert rej.reason == "image_tokens_mismatch" and "15 image tokens" in rej.detail
    forged = dataclasses.replace(g, images=[dataclasses.replace(task.images[0], sha256="0" * 64)])
    assert check_record(Polled(group=forged, lane="expert", topic="t", partition=0, offset=0), limits).rejects[0].reason == "image_refused"
    assert check_record(Polled(group=g, lane="expert", topic="t", partition=0, offset=0), Limits(vocab=len(tok), context=64)).rejects[0].reason == \
        "images_unsupported"
    # An answer that holds the image token would make the forward miscount images (seen in make demo-vision): the
    # engines never sample it, and the trainer rejects a record whose answer has one.
    from rftbus.producers.engines.transformers import TransformersEngine

    assert TransformersEngine(cfg, tok, lm, fmt).suppress == [fmt.vision.token_id]
    sneaky = dataclasses.replace(g, samples=[dataclasses.replace(
        g.samples[0], response_ids=[fmt.vision.token_id, *g.samples[0].response_ids],
        logprobs=[0.0, *g.samples[0].logprobs], loss_mask=[True, *g.samples[0].loss_mask])])
    with_token = dataclasses.replace(limits, image_token=fmt.vision.token_id)
    [rej] = check_record(Polled(group=sneaky, lane="expert", topic="t", partition=0, offset=0), with_token).rejects
    assert rej.reason == "image_token_in_response"
    assert isinstance(task, Task)


def test_a_trl_style_reward_receives_the_task_images_as_pil_images(tmp_path):
    from rftbus.ground.models.loading import load_tokenizer
    from rftbus.ground.prompting import vision_for
    from rftbus.ground.rewards.base import Response, RewardSet

    cfg = Config(state_dir=tmp_path, model={"tiny": {"vision": {}}})
    vision = vision_for(cfg, load_tokenizer(cfg.model))
    task = next(t for t in get_taskset("shapes").tasks("train", 50) if t.prompt == "colour?")

    def looks(prompts, completions, images, **columns):  # a vision reward: is the answered colour in the picture?
        from rftbus.ground.tasksets.shapes import COLOURS

        return [1.0 if c in COLOURS and COLOURS[c] in {px for px in imgs[0].getdata()} else 0.0
                for c, imgs in zip(completions, images)]

    scored = RewardSet([("looks", 1.0, looks)], images=vision.pil).score_group(
        task, [Response(task.answer), Response("purple"), Response(next(c for c in ("red", "blue") if c != task.answer))])
    assert [s.reward for s in scored][:2] == [1.0, 0.0] and scored[2].reward == 0.0


def test_tail_shows_an_image_by_its_metadata_not_its_bytes():
    from rftbus.apps.cli.tail_cmd import _jsonable, _short

    task = next(get_taskset("shapes").tasks("train", 1))
    [shown] = _jsonable(_short(task.to_avro()))["images"]
    assert shown["data"] == f"<{task.images[0].size} bytes>" and shown["sha256"] == task.images[0].sha256
    assert shown["media_type"] == "image/png" and shown["width"] == 32
