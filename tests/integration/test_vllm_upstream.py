"""#56 item 4: serve in front of a real `vllm serve` (vLLM's CPU build, runtime LoRA loading on) with the promotion
gate on, on the real broker with the real `Gate`: every version the gate promotes or puts on canary is loaded into
the server under its own name and answers there (the server's own request log names the adapter, and its answer is
the adapter's greedy answer asked directly, which differs from the base model's), and once the gate rolls the
candidate back, new sessions never name it again. SmolLM2-135M-Instruct on both sides: the front tokenizes, the
server generates."""

from __future__ import annotations

import time
from collections import Counter

import httpx
import pytest
from conftest import SMOLLM2

from rftbus.consumers.gate.audit import audit_log
from rftbus.producers.serve.sessions import SESSION_HEADER
from tests.integration.test_gate import wait_for
from tests.integration.test_serve import FB, INF, recorded, serving
from tests.integration.test_serve_gate import gate_serving, publish_adapter
from tests.vllm_server import asked_adapters, vllm_serve, vllm_serve_missing

NAME = "smollm2-135m-instruct"
LORA = {"r": 8, "alpha": 16, "dropout": 0.0, "target_modules": ["q_proj", "v_proj"]}
PROMPT = "What is 7 times 8? Answer with the number only."


def ask(c: httpx.Client, session: str) -> tuple[int, str, str]:
    r = c.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 6, "temperature": 0},
               headers={SESSION_HEADER: session})
    assert r.status_code == 200, r.text
    return int(r.headers["X-Rftbus-Model-Version"]), r.headers["X-Rftbus-Experience-Id"], r.json()["choices"][0]["text"]


def direct(url: str, model: str, prompt_ids: list[int]) -> list[int]:
    """The server's own greedy answer for `model` (an adapter by name), asked without rftbus."""
    r = httpx.post(url + "/completions", timeout=120, json={
        "model": model, "prompt": prompt_ids, "max_tokens": 6, "temperature": 0, "logprobs": 1,
        "return_tokens_as_token_ids": True})
    assert r.status_code == 200, r.text
    return [int(t.split(":", 1)[1]) for t in r.json()["choices"][0]["logprobs"]["tokens"]]


@pytest.mark.timeout(900)
def test_serve_behind_the_gate_in_front_of_vllm_serve(broker, smollm2_folder, tmp_path):
    missing = vllm_serve_missing()
    if missing:
        pytest.skip(f"no vLLM server to put serve in front of: {missing}")
    log = tmp_path / "vllm-serve.log"
    with vllm_serve(smollm2_folder, NAME, log) as url:
        more = {**SMOLLM2, "gate.enabled": True, "gate.canary_share": 0.5, "gate.min_answers": 4,
                "gate.hold_every_s": 600.0, "trainer.lora": LORA, "serve.weights_wait_s": 60.0,
                "serve.max_body_bytes": 65536,
                "serve.engine": {"kind": "openai", "base_url": url, "push_lora": True, "keep_adapters": 2,
                                 "lora_dir": str(tmp_path / "lora"), "request_timeout_s": 120.0}}
        with serving(tmp_path / "front", broker, **more) as (cfg, server):
            publish_adapter(cfg, 0, 0.0, lora=LORA)
            with gate_serving(cfg, server, 120) as (gated, deadline):
                c = httpx.Client(base_url=server.url, timeout=120, headers={"Authorization": f"Bearer {INF}"})
                f = httpx.Client(base_url=server.url, timeout=60, headers={"Authorization": f"Bearer {FB}"})
                first = [ask(c, f"early-{i}") for i in range(3)]
                assert {v for v, _, _ in first} == {0}
                assert asked_adapters(log) == [f"{NAME}-v0"] * 3  # the promoted version, by its own name there

                # v1 on canary: pushed under its own name; the canary's sessions are answered by it, there
                # (seed 4: this adapter's greedy first token differs from the base model's by a clear margin, 22.73
                # against 22.13; with an unseeded A it was a coin flip between the two, and the test flaked)
                publish_adapter(cfg, 1, 0.2, lora=LORA, seed=4)
                wait_for(cfg, "canary", 1)
                while gated.canary is None:
                    assert time.monotonic() < deadline + 120, "serve never put v1 on canary"
                    time.sleep(0.2)
                before = len(asked_adapters(log))
                answers = {f"s{i}": ask(c, f"s{i}") for i in range(24)}
                arms = Counter(v for v, _, _ in answers.values())
                assert set(arms) == {0, 1} and min(arms.values()) >= 4, arms  # about half on canary
                asked = asked_adapters(log, before)
                assert Counter(asked) == {f"{NAME}-v0": arms[0], f"{NAME}-v1": arms[1]}, asked
                models = [m["id"] for m in httpx.get(url + "/models").json()["data"]]
                assert {f"{NAME}-v0", f"{NAME}-v1"} <= set(models), models
                rec = recorded(cfg, [e for _, e, _ in answers.values()])
                by_version = {v: rec[e] for v, e, _ in answers.values()}
                ids = by_version[1].prompt_ids
                v1, v0 = direct(url, f"{NAME}-v1", ids), direct(url, f"{NAME}-v0", ids)
                assert v1 != v0, "the candidate's adapter did not change the server's answer"
                assert list(by_version[1].response_ids) == v1 and list(by_version[0].response_ids) == v0

                # the graders find the candidate worse: rolled back; new sessions never name it again
                for v, e, _ in answers.values():
                    r = f.post("/v1/feedback", json={"experience_id": e, "reward": 0.0 if v else 1.0})
                    assert r.status_code in (200, 202), r.text
                wait_for(cfg, "rollback", 1)
                while gated.canary is not None:
                    assert time.monotonic() < deadline + 240, "serve kept the rolled-back candidate on canary"
                    time.sleep(0.2)
                before = len(asked_adapters(log))
                after = [ask(c, f"after-{i}") for i in range(8)]
                assert {v for v, _, _ in after} == {0}
                assert asked_adapters(log, before) == [f"{NAME}-v0"] * 8
                found = audit_log(cfg)
                assert found["ok"] and found["unlicensed_answers"] == 0 and found["rollbacks"][0]["version"] == "v1"
