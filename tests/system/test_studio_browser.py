"""The studio in a real browser (headless chromium via chromium-driver) during a short real `rftbus run`
(broker, explorer, streams, trainer, analytics sink, serve with the studio mounted, the studio alone):
a grader signs in, grades by clicking and by keys, a malformed grade gets a message on the page, the grades
are on rft.feedback stamped with who graded; a grader's token cannot open the dashboard or SQL; a reader
sees the dashboard's panels and the path of an experience from raw record to trained step and served version."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import uuid

import httpx
import pytest
from conftest import REPO, stop_run
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from rftbus.apps.bench.processes import read_all
from rftbus.apps.bench.studio import chrome, load_ms
from confluent_kafka import Producer

from rftbus.ground.schemas import GateDecision, make_codec
from test_run import _env
from serve_helpers import free_port

DECODE = make_codec(None).deserializer()
GRADER, READER, INF = ("g-" + uuid.uuid4().hex, "r-" + uuid.uuid4().hex, "i-" + uuid.uuid4().hex)

pytestmark = pytest.mark.skipif(not (shutil.which("chromium") and shutil.which("chromedriver")),
                                reason="needs Debian's chromium and chromium-driver (scripts/system_deps.sh)")


def _until(what: str, pred, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while True:
        try:
            got = pred()
        except (httpx.HTTPError, OSError):
            got = None
        if got:
            return got
        assert time.monotonic() < deadline, what
        time.sleep(0.5)


def _card(d, experience_id: str):
    return d.find_element(By.CSS_SELECTOR, f'.sample[data-experience="{experience_id}"]').find_element(
        By.XPATH, "./ancestor::article")


def _state(d, experience_id: str, words: str, timeout: float = 30.0) -> str:
    card = _card(d, experience_id)
    WebDriverWait(d, timeout).until(lambda _: words in card.find_element(By.CLASS_NAME, "state").text)
    return card.find_element(By.CLASS_NAME, "state").text


def test_studio_in_a_browser_during_a_real_run(broker, tmp_path):
    tag = uuid.uuid4().hex[:6]
    serve_port, studio_port = free_port(), free_port()
    env = {**_env(broker, tag), "RFTBUS_RUN__ANALYTICS": "true", "RFTBUS_RUN__SERVE": "true",
           "RFTBUS_RUN__STUDIO": "true", "RFTBUS_RUN__EXPERT_EPOCHS": "1", "RFTBUS_RUN__TASK_PASSES": "1",
           "RFTBUS_RUN__EVAL_EVERY_VERSIONS": "20", "RFTBUS_ANALYTICS__GROUP_ID": f"e2e{tag}-analytics",
           "RFTBUS_SERVE__PORT": str(serve_port), "RFTBUS_STUDIO__PORT": str(studio_port),
           "RFTBUS_SERVE__FEEDBACK_TOKENS": GRADER, "RFTBUS_SERVE__READ_TOKENS": READER,
           "RFTBUS_SERVE__INFERENCE_TOKENS": INF, "RFTBUS_STREAMS__FEEDBACK_TTL_S": "600"}
    full_env = {**{k: v for k, v in os.environ.items() if not k.startswith("RFTBUS_")}, **env}
    state = tmp_path / "state"
    run = subprocess.Popen([sys.executable, "-m", "rftbus", "--state-dir", str(state), "run",
                            str(REPO / "configs" / "toy.yaml"), "--minutes", "4"], env=full_env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO)
    studio, serve = f"http://127.0.0.1:{studio_port}/studio", f"http://127.0.0.1:{serve_port}"
    d = None
    try:
        _until("the studio did not start", lambda: httpx.get(f"http://127.0.0.1:{studio_port}/healthz").is_success, 150)
        _until("serve did not start", lambda: httpx.get(serve + "/healthz").is_success, 150)
        # live answers to grade: two alone, one pair
        auth = {"Authorization": f"Bearer {INF}"}
        ids = []
        for prompt, n in (("12+30=", 1), ("41+7=", 1), ("23+23=", 2)):
            r = httpx.post(serve + "/v1/completions", headers=auth, timeout=60,
                           json={"prompt": prompt, "max_tokens": 4, "n": n})
            assert r.status_code == 200, r.text
            ids.append(r.headers["X-Rftbus-Experience-Id"].split(","))
        (one,), (two,), (pa, pb) = ids
        # a promotion gate's rollback of another trainer's version, as `rftbus gate` writes it
        gate = Producer({"bootstrap.servers": broker.bootstrap_servers})
        gate.produce(f"e2e{tag}.rft.decisions", key=b"tiny", value=make_codec(None).serializer(GateDecision)(
            GateDecision(decision_id="tiny:hot:v3:rollback", model="tiny", decision="rollback", version=3, serving=2,
                         gate="gate", reason="worse than the serving version by more than the margin", lineage="hot",
                         evidence={"n_serving": 30, "n_candidate": 30, "mean_serving": 0.6, "mean_candidate": 0.1,
                                   "z": -5.1, "z_crit": 2.3}), None))
        assert gate.flush(30) == 0

        d = chrome()
        d.get(studio + "/login")
        d.find_element(By.ID, "login-name").send_keys("Ann")
        d.find_element(By.ID, "login-token").send_keys(GRADER)
        d.find_element(By.ID, "login-submit").click()
        WebDriverWait(d, 20).until(lambda _: d.current_url.endswith("/studio/queue"))
        # the queue shows them once analytics has them (the page refreshes itself)
        WebDriverWait(d, 90).until(lambda _: all(d.find_elements(By.CSS_SELECTOR, f'.sample[data-experience="{e}"]')
                                                 for e in (one, two, pa, pb)))
        assert load_ms(d) < 5000

        # by clicking
        _card(d, one).find_element(By.CSS_SELECTOR, f'.sample[data-experience="{one}"] .up').click()
        assert "acknowledged by Kafka" in _state(d, one, "acknowledged")
        # a malformed grade (an empty correction): a message on the page, nothing sent, the card still there
        card = _card(d, two)
        card.find_element(By.CSS_SELECTOR, "details.correct summary").click()
        card.find_element(By.CLASS_NAME, "send-correction").click()
        msg = _state(d, two, "not accepted")
        assert "correction" in msg and "at least 1 character" in msg, msg
        # by keys: select the card, `d` is thumbs down; the pair: `b` prefers B
        card.click()
        ActionChains(d).send_keys("d").perform()
        _state(d, two, "acknowledged")
        _card(d, pa).click()
        ActionChains(d).send_keys("b").perform()
        _state(d, pa, "acknowledged")
        WebDriverWait(d, 10).until(lambda _: len(d.find_elements(By.CSS_SELECTOR, "#mine li")) >= 3)

        # the grades are on rft.feedback, each once, stamped with the grader
        fb_topic = f"e2e{tag}.rft.feedback"
        got = _until("the grades are not on rft.feedback", lambda: (lambda fbs: fbs if len(fbs) >= 3 else None)(
            [f for f in read_all(broker, fb_topic, decode=DECODE, idle_s=0.3)]), 30)
        by = {f.experience_id: f for f in got}
        assert len(got) == 3 and by[one].thumbs_up is True and by[two].thumbs_up is False
        assert by[pb].preferred_id == pb and by[pb].rejected_id == pa
        assert all(f.annotator.startswith("studio:Ann#") for f in got)

        # a grader's token cannot open the dashboard, the experience browser or SQL
        d.get(studio + "/dashboard")
        assert "not allowed the read scope" in d.find_element(By.ID, "error-message").text
        g = {"Authorization": f"Bearer {GRADER}"}
        assert httpx.post(studio + "/api/sql", headers=g, json={"sql": "SELECT 1"}).status_code == 403
        assert httpx.get(studio + "/fragments/dashboard", headers=g).status_code == 403
        # serve mounts the same studio: a grader's token reads the queue there, not SQL
        assert httpx.get(serve + "/studio/api/queue", headers=g).status_code == 200
        assert httpx.post(serve + "/studio/api/sql", headers=g, json={"sql": "SELECT 1"}).status_code == 403

        # a reader: the dashboard's panels, with the run's evals and trained experiences
        d.get(studio + "/login")
        d.find_element(By.ID, "login-token").send_keys(READER)
        d.find_element(By.ID, "login-submit").click()
        WebDriverWait(d, 20).until(lambda _: d.current_url.endswith("/studio/dashboard"))
        # the path of a trained explorer experience, looked up by typing its id
        q = {"sql": "SELECT experience_id FROM rftbus.trained WHERE experience_id IN (SELECT experience_id FROM "
                    "rftbus.experiences WHERE topic = 'raw') ORDER BY step LIMIT 1"}
        trained = _until("nothing trained yet", lambda: httpx.post(studio + "/api/sql", json=q, timeout=30,
                                                                   headers={"Authorization": f"Bearer {READER}"}).json()["rows"], 120)

        def drawn() -> bool:  # (the dashboard is cached for studio.cache_s: reload until the trained steps show)
            d.refresh()
            return bool(d.find_elements(By.CSS_SELECTOR, "#panel-staleness svg rect[fill]"))
        _until("the dashboard never drew the trained staleness", drawn, 60)
        panels = d.find_elements(By.CSS_SELECTOR, "#panels figure.panel")
        assert {p.get_attribute("id") for p in panels} >= {"panel-eval", "panel-live_reward", "panel-reward_version",
                                                          "panel-staleness", "panel-rejections", "panel-throughput",
                                                          "panel-gate", "panel-lag", "panel-feedback_delay"}
        assert d.find_elements(By.CSS_SELECTOR, "#panel-eval svg circle"), "no eval point drawn"
        assert d.find_elements(By.CSS_SELECTOR, "#panel-staleness svg rect[fill]"), "no trained staleness drawn"
        assert "e2e" + tag in d.find_element(By.ID, "panel-lag").text  # the run's consumer groups
        said = d.find_element(By.ID, "panel-gate").text  # the gate's decision, with the numbers it decided on
        assert "rollback" in said and "hot:v3" in said and "z=-5.10" in said and "n=30" in said, said
        d.get(studio + "/experience")
        d.find_element(By.ID, "lookup-id").send_keys(trained[0][0] + "\n")
        WebDriverWait(d, 20).until(lambda _: d.find_elements(By.CSS_SELECTOR, ".step.trained"))
        text = d.find_element(By.CSS_SELECTOR, ".path").text
        assert "raw record" in text and "lane: advantage" in text and "trained at step" in text, text
        assert "first served in weights v" in text, text
        # and a graded live answer: its feedback on its path
        d.get(studio + f"/experience?id={one}")
        assert "feedback thumbs up by studio:Ann#" in d.find_element(By.CSS_SELECTOR, ".path").text
    finally:
        if d is not None:
            d.quit()
        run.send_signal(signal.SIGINT)
        try:
            assert run.wait(120) == 0
        finally:
            stop_run(run, state)  # a run that did not stop: it and its stages, not the run alone
