"""`rftbus serve` in front of a vision-language model (#62), through real HTTP and the real broker: an OpenAI-style
`image_url` part (a base64 data URI) is answered from the picture, and the live record carries the image by reference
into the store (sha256 and size), its prompt holding the image's tokens; a URL to fetch, broken base64 or an image
over the bound is a 400 naming why, and nothing is recorded for it. The studio then shows the picture beside the
answers to grade: its queue says the group has one, and its image route reads the bytes back from the record on
Kafka (analytics keeps the hash, not the bytes), hash-checked."""

from __future__ import annotations

import hashlib

from rftbus.ground.images import image_bytes
from rftbus.ground.images.refs import data_uri
from rftbus.ground.tasksets import get_taskset
from tests.integration.test_serve import FB, client, recorded, serving


def test_a_vlm_serve_answers_image_parts_and_records_them_by_reference(broker, tmp_path):
    task = next(t for t in get_taskset("shapes").tasks("train", 20) if t.prompt == "colour?")
    png = task.images[0].data
    part = {"type": "image_url", "image_url": {"url": data_uri(png, "image/png")}}
    with serving(tmp_path, broker, **{"model.name": "tiny-vlm", "model.tiny.vision": {},
                                      "images.max_bytes": 2000, "serve.read_tokens": ["reader-1"]}) as (cfg, server):
        with client(server) as c:
            r = c.post("/v1/chat/completions", json={"n": 2, "messages": [
                {"role": "user", "content": [part, {"type": "text", "text": "colour?"}]}]})
            assert r.status_code == 200, r.text
            ids = r.json()["rftbus"]["experience_ids"]
            refused = {
                "https://example.com/a.png": "data: URI",
                "data:image/png;base64,@@@@": "not valid base64",
                data_uri(b"\0" * 2500, "image/png"): "images.max_bytes",
            }
            for url, words in refused.items():
                bad = c.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": [
                    {"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": "colour?"}]}]})
                assert bad.status_code == 400 and words in bad.text, (url[:40], bad.status_code, bad.text)
        got = recorded(cfg, ids)
        e = got[ids[0]]
        [img] = e.group.images
        assert img.data is None and img.uri and img.sha256 == hashlib.sha256(png).hexdigest() and img.size == len(png)
        assert image_bytes(img, cfg) == png  # the bytes in the store, admitted by the store's rule
        assert e.prompt_ids.count(49) == 16 and e.group_size == 2  # (49: the tiny VLM's <image> token)
        assert got[ids[1]].group.group_id == e.group.group_id
        _studio_shows_the_picture(cfg, e.group.group_id, png)


def _studio_shows_the_picture(cfg, group_id: str, png: bytes) -> None:
    import time

    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from rftbus.consumers.analytics.backends import open_backend
    from rftbus.consumers.analytics.rows import Position, to_rows
    from rftbus.consumers.studio.app import create_studio
    from rftbus.ground.kafka.read import read_to_end
    from rftbus.ground.schemas import make_codec

    codec = make_codec(None)
    writer = open_backend(cfg, writable=True)  # the analytics sink's rows of the raw topic, at their positions
    try:
        for m in read_to_end(cfg, cfg.topics.raw.name, timeout_s=10):
            pos = Position("raw", m.topic(), m.partition(), m.offset(), int(time.time() * 1000))
            for table, row in to_rows(codec.deserializer(), pos, m.value()):
                writer.insert(table, [row])
    finally:
        writer.close()
    app = FastAPI()
    app.mount("/studio", create_studio(cfg, None))
    c = TestClient(app, base_url="http://testserver/studio/")
    reader = {"Authorization": f"Bearer {FB}"}  # (the feedback token: a grader sees the queue's pictures)
    q = c.get("api/queue", headers=reader)
    assert q.status_code == 200, q.text
    [g] = [g for g in q.json()["groups"] if g["group_id"] == group_id]
    assert g["images"] == 1
    r = c.get(f"api/image/{group_id}/0", headers=reader)
    assert r.status_code == 200 and r.content == png and r.headers["content-type"] == "image/png"
    assert c.get(f"api/image/{group_id}/1", headers=reader).status_code == 404
    assert c.get(f"api/image/{group_id}/0", headers={"Authorization": "Bearer reader-1"}).content == png
    assert c.get(f"api/image/{group_id}/0").status_code == 401  # no token, no picture
    page = c.get(f"experience?id={group_id}", headers={"Authorization": "Bearer reader-1"})
    assert page.status_code == 200 and f"api/image/{group_id}/0" in page.text  # the picture on the experience page
