"""The studio's logic without a browser: scopes per page and call, the grade's validation, the charts and the
path of an experience assembled from analytics rows. The browser and the real run: test_studio_browser.py."""

from __future__ import annotations

from fastapi.testclient import TestClient
from pydantic import SecretStr

from rftbus.ground.config import load_config
from rftbus.consumers.studio import charts, dashboard, data
from rftbus.consumers.studio.app import create_studio
from rftbus.ground.grades.request import FeedbackRequest
from rftbus.ground.schemas import Feedback

GRADER, READER = "grader-token-1", "reader-token-1"


class Recorded:
    """Takes grades as serve's path would (a logic test: Kafka's side is in the browser test)."""

    def __init__(self):
        self.got: list[FeedbackRequest] = []

    async def publish(self, req: FeedbackRequest) -> Feedback:
        self.got.append(req)
        return req.to_record()

    def close(self) -> None:
        pass


def _client(tmp_path, **serve):
    cfg = load_config(overrides={"state_dir": str(tmp_path), "serve": {
        "feedback_tokens": [GRADER], "read_tokens": [READER], "inference_tokens": ["inf"], **serve}}, environ={})
    pub = Recorded()
    return _mounted(cfg, pub), pub


def _mounted(cfg, pub) -> TestClient:
    """Under /studio, as serve and `rftbus studio` mount it."""
    from fastapi import FastAPI

    app = FastAPI()
    app.mount("/studio", create_studio(cfg, pub))
    return TestClient(app, base_url="http://testserver/studio/")


def test_a_grader_token_grades_but_cannot_read_the_run(tmp_path):
    c, pub = _client(tmp_path)
    g = {"Authorization": f"Bearer {GRADER}"}
    for path in ("dashboard", "fragments/dashboard", "experience?id=x"):
        r = c.get(path, headers=g)
        assert r.status_code == 403 and "not allowed the read scope" in r.text, path
        assert "<html" in r.text  # a page that says why, not a bare error
    r = c.post("api/sql", headers=g, json={"sql": "SELECT 1"})
    assert r.status_code == 403 and r.json()["error"]["code"] == "wrong_scope"
    # and a reader cannot grade
    r = c.post("api/feedback", headers={"Authorization": f"Bearer {READER}"}, json={"experience_id": "e1",
                                                                                     "thumbs": "up"})
    assert r.status_code == 403 and not pub.got
    # no token at all: told to sign in
    r = c.get("queue")
    assert r.status_code == 401 and "Sign in" in r.text
    # the grader's own grade goes through, stamped with who graded it
    r = c.post("api/feedback", headers=g, json={"experience_id": "e1", "thumbs": "up"})
    assert r.status_code == 202, r.text
    assert pub.got[0].annotator.startswith("studio:grader#") and r.json()["kind"] == "thumbs"


def test_a_malformed_grade_is_a_message_naming_the_field(tmp_path):
    c, pub = _client(tmp_path)
    g = {"Authorization": f"Bearer {GRADER}"}
    cases = [({"experience_id": "e1", "correction": ""}, "correction"),
             ({"experience_id": "e1", "thumbs": "up", "rating": 3}, "exactly one of"),
             ({"experience_id": "e 1", "thumbs": "up"}, "experience_id"),
             ({"experience_id": "e1", "rating": 9}, "outside streams.rating_scale")]
    for body, words in cases[:3]:
        r = c.post("api/feedback", headers=g, json=body)
        assert r.status_code == 400 and words in r.json()["error"]["message"], (body, r.text)
    r = c.post("api/feedback", headers={**g, "Content-Type": "text/plain"}, content=b"thumbs=up")
    assert r.status_code == 400 and "JSON" in r.json()["error"]["message"]
    assert not pub.got


def test_login_sets_the_cookie_and_refuses_an_unknown_token(tmp_path):
    c, _ = _client(tmp_path)
    r = c.post("api/login", json={"token": "nope", "name": "Ann"})
    assert r.status_code == 401 and "not one of serve's tokens" in r.json()["error"]["message"]
    r = c.post("api/login", json={"token": GRADER, "name": "Ann <b>"})
    assert r.status_code == 200 and r.json()["scopes"] == ["feedback"]
    cookie = r.headers.get_list("set-cookie")
    assert any("HttpOnly" in x and "SameSite=strict" in x and x.startswith("rftbus_studio=") for x in cookie)
    page = c.get("queue")  # the cookie now signs the page in
    assert page.status_code == 200 and "studio:Ann b#" in page.text
    assert c.get("dashboard").status_code == 403


def test_open_scopes_on_loopback_need_no_token(tmp_path):
    cfg = load_config(overrides={"state_dir": str(tmp_path)}, environ={})
    c = _mounted(cfg, Recorded())
    r = c.get("", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"].endswith("/studio/queue")


def test_open_read_scope_on_a_public_address_is_refused():
    import pytest

    from rftbus.ground.web.auth import OpenScopeRefused, Scope, TokenAuth

    auth = TokenAuth([SecretStr("i")], [SecretStr("f")], [])
    auth.check_exposure("0.0.0.0", False, {Scope.inference, Scope.feedback})  # read not served: fine
    with pytest.raises(OpenScopeRefused, match="read scope"):
        auth.check_exposure("0.0.0.0", False, {Scope.inference, Scope.feedback, Scope.read})


def test_charts_draw_what_they_are_given():
    svg = charts.line_chart({"a": [(0, 0.1), (1, 0.5)], "b": [(0, 0.2)]}, "t", "x", "y", (0, 1))
    assert svg.count("<polyline") == 1 and svg.count("<circle") == 3 and "</i>b</span>" in svg
    assert "no data yet" in charts.line_chart({}, "t", "x", "y")
    bars = charts.bar_chart([(0, 10), (1, 4)], "t", "x", "y")
    assert bars.count("<rect") == 3  # the frame and two bars
    assert charts._ticks(0, 1) == [0, 0.2, 0.4, 0.6, 0.8, 1.0]
    # a reason absent from a bucket is a zero there, not a line drawn across
    got = dashboard._by([{"r": "a", "b": 0, "n": 5}, {"r": "a", "b": 3, "n": 1}, {"r": "z", "b": 1, "n": 2}],
                        "r", "b", "n")
    assert got["a"] == [(0, 5.0), (1, 0.0), (2, 0.0), (3, 1.0)] and got["z"][1] == (1, 2.0)
    assert dashboard.bucket_ms(15 * 60_000) == 20_000 and dashboard.bucket_ms(0) == 10_000


def test_the_feedback_delay_panel_counts_answers_past_eta():
    cfg = load_config(overrides={"rl": {"max_staleness": 2}}, environ={})
    rows = [{"delay_versions": 0, "n": 5, "p50_s": 2.0, "max_s": 4.0},
            {"delay_versions": 3, "n": 2, "p50_s": 20.0, "max_s": 25.0},
            {"delay_versions": 12, "n": 4, "p50_s": 90.0, "max_s": 130.0}]
    p = dashboard.feedback_delay_panel(rows, cfg)
    assert p.key == "feedback_delay" and p.html.count("<rect") == 4  # the frame and three bars
    assert p.note.startswith("11 graded answers; p50 3 versions late, slowest grade 130 s; 6 past η = 2"), p.note
    assert "no graded" in dashboard.feedback_delay_panel([], cfg).note


def test_the_path_of_an_experience_from_its_rows():
    raw = {"topic": "raw", "experience_id": "e1", "group_id": "g1", "task_id": "t1", "reward": 1.0,
           "kafka_ms": 1, "version": 3}
    cur = {**raw, "topic": "curated_priority", "advantage": 0.5, "kafka_ms": 2}
    other = {**raw, "experience_id": "e2", "reward": 0.0}
    p = data.Path("g1", [cur, raw, other],
                  rejections=[{"experience_id": None, "group_id": "g1", "experience_ids": ["e2"], "reason": "stale"}],
                  trained=[{"experience_id": "e1", "step": 7, "version": 6, "staleness": 1, "ms": 3}],
                  feedback=[{"experience_id": "e2", "preferred_id": None, "rejected_id": None, "kind": "thumbs"}],
                  weights=[{"version": 6, "step": 6}, {"version": 7, "step": 7}, {"version": 8, "step": 8}],
                  task=None)
    e = {x["experience_id"]: x for x in p.experiences()}
    assert e["e1"]["topic"] == "raw" and [x["topic"] for x in e["e1"]["lanes"]] == ["curated_priority"]
    assert e["e1"]["served_in"]["version"] == 7 and not e["e1"]["rejections"]
    assert [r["reason"] for r in e["e2"]["rejections"]] == ["stale"] and e["e2"]["feedback"][0]["kind"] == "thumbs"
    assert data.first_version_after([{"version": 1, "step": 1}], 5) is None
    assert data.array(["a'b", "c"]) == "['a\\'b','c']"


def test_the_standalone_studio_refuses_a_large_body_unread(tmp_path):
    from rftbus.consumers.studio.app import standalone

    cfg = load_config(overrides={"state_dir": str(tmp_path), "serve": {"read_tokens": [READER],
                                                                        "max_body_bytes": 4096}}, environ={})
    c = TestClient(standalone(cfg))
    r = c.post("/studio/api/sql", headers={"Authorization": f"Bearer {READER}"}, content=b"x" * 100_000)
    assert r.status_code == 413 and "max_body_bytes" in r.json()["error"]["message"], r.text
