"""`rftbus run` end to end on the real broker, small budget: the whole loop turns and the books balance."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

from tests.conftest import REPO, rftbus_cli, stop_run


def _env(broker, tag: str) -> dict[str, str]:
    """Own topics and groups on the shared session broker, so other tests' records do not count here."""
    env = {f"RFTBUS_TOPICS__{k.upper()}__NAME": f"e2e{tag}.{spec.name}" for k, spec in broker.topics.all().items()}
    env.update({
        "RFTBUS_KAFKA__BOOTSTRAP_SERVERS": broker.bootstrap_servers,
        "RFTBUS_EXPLORER__GROUP_ID": f"e2e{tag}-explorers", "RFTBUS_STREAMS__APP_ID": f"e2e{tag}-streams",
        "RFTBUS_TRAINER__GROUP_ID": f"e2e{tag}-trainer",
        "RFTBUS_RUN__TASKS": "200", "RFTBUS_RUN__EVAL_N": "16", "RFTBUS_RUN__ANALYTICS": "false",
        "RFTBUS_RL__GROUP_SIZE": "4", "RFTBUS_RL__BATCH_GROUPS": "4",
        "RFTBUS_RUN__STUDIO": "false",  # a process less per run (and no two runs on the studio's one port);
        # the tests of the studio turn it on
    })
    return env


def test_run_turns_the_loop_and_counts_reconcile(broker, tmp_path):
    env = _env(broker, uuid.uuid4().hex[:6])
    state = tmp_path / "state"
    # 24 steps, not 6: the trainer steps on demonstrations from its first second, at 2-3 steps/s, and at
    # η = 1 the explorer's groups of the streams worker's first seconds (its recovery scans) are stale by the
    # time they are decided. A 6-step run could end inside that window with nothing but demonstrations
    # trained (CI did: 12 steps, 5 groups produced, all stale).
    out = rftbus_cli(None, "--state-dir", str(state), "run", str(REPO / "configs" / "toy.yaml"),
                     "--max-steps", "24", "--minutes", "6", "--summary-json", str(tmp_path / "s.json"),
                     env=env, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    s = json.loads((tmp_path / "s.json").read_text())
    assert s["stop_reason"].startswith("trainer reached step")
    assert s["trainer_steps"] >= 24
    assert s["counts_reconcile"] is True and s["duplicated"] == 0 and s["experiences_lost"] == 0
    assert s["stages_dead"] == {} and s["reconcile_error"] is None
    assert s["experiences_produced"] == (s["experiences_trained"] + sum(s["experiences_rejected"].values())
                                         + s["experiences_in_flight"] + s["experiences_lost"])
    assert s["experiences_trained"] > 0, (s["experiences_rejected"], s["steps_timeline"])
    assert s["max_staleness_trained"] <= s["max_staleness"] == 1
    assert s["versions_published"] >= 2
    assert s["explorer_newest_version"] >= 2, "the explorer never generated with a newer version"
    assert s["eval_reward_initial"] is not None and s["eval_reward_final"] is not None
    # How soon it learned, and whether it kept stepping (#19).
    assert 0 < s["first_step_after_broker_s"] < 120 and s["broker_ready_s"] is not None
    assert s["step_rate_first_third"] is not None and s["steps_timeline"][-1][1] >= 24
    # Where the CPU went (#43): every process of the run, the trainer's and explorer's phases measured.
    procs = s["profile"]["processes"]
    assert {"trainer-0", "explorer-e0", "streams-s0", "run (eval)"} <= set(procs), sorted(procs)
    trainer = procs["trainer-0"]["phases"]
    assert trainer["forward"]["count"] >= 24 and trainer["backward"]["cpu_s"] > 0 and "publish" in trainer
    assert procs["explorer-e0"]["phases"]["generate"]["wall_s"] > 0 and procs["run (eval)"]["phases"]["eval"]["count"] >= 1
    assert all(p["cpu_s"] > 0 for p in procs.values())
    assert all(p["published_s"] <= p["seconds"] for p in s["eval_points"])
    # The best eval's weights are kept and export as a Hugging Face folder.
    best = s["eval_best"]
    assert best["reward"] == max(p["reward"] for p in s["eval_points"]), best
    out = rftbus_cli(None, "--config", str(REPO / "configs" / "toy.yaml"), "--state-dir", str(state),
                     "export", str(tmp_path / "best"), "--best", env=env, timeout=300)
    assert out.returncode == 0 and f"best eval: v{best['version']}" in out.stdout, out.stdout + out.stderr
    assert (tmp_path / "best" / "model.safetensors").is_file()
    # Each eval point was also written as it was scored, for following a run while it goes.
    logged = [json.loads(line) for line in (state / "run" / "eval.jsonl").read_text().splitlines()]
    assert logged == s["eval_points"]
    for png in s["plots"]:
        assert open(png, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    # Nothing left running: every child exited.
    assert all(code == 0 for code in s["exit_codes"].values()), s["exit_codes"]


def test_ctrl_c_during_start_up_stops_cleanly(broker, tmp_path):
    """SIGINT while the job is still starting (here: topics and tasks, children still loading) is a clean stop."""
    cmd = [str(Path(sys.executable).parent / "rftbus"), "--state-dir", str(tmp_path / "state"), "run",
           str(REPO / "configs" / "toy.yaml"), "--summary-json", str(tmp_path / "s.json")]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, **_env(broker, uuid.uuid4().hex[:6])})
    seen = []
    try:
        for line in proc.stdout:
            seen.append(line)
            if "broker answered" in line:
                proc.send_signal(signal.SIGINT)
                break
        rest, _ = proc.communicate(timeout=120)
    finally:
        stop_run(proc, tmp_path / "state")
    out = "".join(seen) + rest
    assert proc.returncode == 0, out[-3000:]
    s = json.loads((tmp_path / "s.json").read_text())
    assert s["stop_reason"] == "stopped by the user"
    # The children start beside the broker (they load their models while it boots): the stop stopped
    # each of them during its own start, cleanly, before anything was trained.
    assert s["exit_codes"] and all(code in (0, None) for code in s["exit_codes"].values()), s["exit_codes"]
    assert s["trainer_steps"] == 0 and s["stages_dead"] == {}, s


def test_a_start_up_error_is_one_message_and_starts_no_broker(broker, tmp_path):
    """A taskset too small for run.tasks: `rftbus run` runs `rftbus check` first, so the error is one line before
    anything starts, and no broker is left behind (none was started). (Ctrl-C during start-up, after the broker
    started, stopping it: test_ctrl_c_during_start_up_stops_cleanly.)"""
    from rftbus.ground.broker import embedded
    from tests.conftest import _free_pair, make_config

    cfg = make_config(tmp_path / "state", _free_pair(), **{"taskset.name": "reverse",
                                                           "taskset.params": {"length": 2}, "run.tasks": 500})
    (tmp_path / "c.yaml").write_text(json.dumps(cfg.model_dump(mode="json", include={"state_dir", "broker",
                                                                                      "taskset", "run"})))
    env = {k: v for k, v in os.environ.items() if not k.startswith("RFTBUS_")}
    try:
        out = subprocess.run([str(Path(sys.executable).parent / "rftbus"), "run", str(tmp_path / "c.yaml")],
                             capture_output=True, text=True, env=env, timeout=300)
        assert out.returncode == 2, out.stdout[-2000:] + out.stderr[-2000:]
        errors = [ln for ln in out.stderr.splitlines() if ln.startswith("error:")]
        assert len(errors) == 1 and "fewer than 500 distinct train problems" in errors[0] and "run.tasks" in errors[0]
        assert "Traceback" not in out.stderr and "not started" in out.stderr
        assert "embedded Kafka broker running" not in out.stdout
        assert embedded.running_pid(cfg) is None
    finally:
        embedded.stop(cfg)


def test_curriculum_stage_runs_first_then_the_configured_taskset(broker, tmp_path):
    """`run.curriculum` through the real loop: length-2 reversals are published just in time until
    the trainer's step 2, then the configured length-4 taskset; the books still balance."""
    import yaml

    from rftbus.ground.kafka.read import read_to_end
    from rftbus.ground.schemas import make_codec

    tag = uuid.uuid4().hex[:6]
    cfg = yaml.safe_load((REPO / "configs" / "toy-grpo-reverse.yaml").read_text())
    cfg["run"].update(tasks=200, task_passes=1, eval_n=16, eval_every_versions=2,
                      curriculum=[{"params": {"length": 2}, "tasks": 4, "until_step": 2}])
    cfg["trainer"]["update_epochs"] = 1
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    out = rftbus_cli(None, "--state-dir", str(tmp_path / "state"), "run", str(tmp_path / "c.yaml"),
                     "--max-steps", "8", "--minutes", "8", "--summary-json", str(tmp_path / "s.json"),
                     env=_env(broker, tag), timeout=700)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    s = json.loads((tmp_path / "s.json").read_text())
    assert s["counts_reconcile"] is True and s["duplicated"] == 0
    [stage] = s["curriculum"]
    assert stage["stage"] == 1 and stage["params"] == {"length": 2}
    assert stage["ended_step"] is not None and stage["ended_step"] >= 2
    assert stage["passes"] >= 1 and stage["published"] == 4 * stage["passes"]

    decode = make_codec(None).deserializer()

    def records(topic: str) -> list:
        return [decode(m.value(), None) for m in read_to_end(broker, f"e2e{tag}.{topic}", timeout_s=10, strict=False)]

    tasks = records(broker.topics.tasks.name)
    staged = [t for t in tasks if ".c1p" in t.task_id]
    assert len(staged) == stage["published"] and len(tasks) == stage["published"] + 200
    assert all(len(t.answer) == 2 for t in staged) and all(len(t.answer) == 4 for t in tasks if t not in staged)
    rolled = {e.task_id for e in records(broker.topics.raw.name)}
    assert any(".c1p" in t for t in rolled), "no stage task was rolled out"
    assert any(".c1p" not in t for t in rolled), "the explorers never reached the configured taskset"


def _write_as(bootstrap: str, topic: str, client: dict, timeout_s: float = 10) -> str:
    """'ok' or the broker's error name for one acknowledged write with these client settings."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, **client, "acks": "all",
                  "message.timeout.ms": int(timeout_s * 1000)})
    got: list[str] = []
    try:
        p.produce(topic, key=b"k", value=b"forged", on_delivery=lambda err, _m: got.append(
            "ok" if err is None else err.name()))
    except Exception as e:  # noqa: BLE001 - a refusal at produce() is as good as one at delivery
        return type(e).__name__
    p.flush(timeout_s + 5)
    return got[0] if got else "no answer"


def test_kill9_of_the_embedded_broker_is_recovered_without_help(tmp_path):
    """#18: `rftbus run` supervises the broker it started: kill -9 mid-run, it comes back on the same
    data, the loop resumes by itself, and the summary is written and balances. #63: that broker is the run's
    own, with a SASL user per role and the ACL table by default: the loop turns with every child its role's user,
    and nobody but the gate (not a client without a password, not serve's user) writes the decisions topic."""
    import time

    from rftbus.ground.broker import embedded
    from rftbus.ground.status import read_statuses
    from tests.conftest import JARS, _free_pair, make_config

    state = tmp_path / "state"
    port = _free_pair()
    cfg = make_config(state, port)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RFTBUS_")}
    env.update({"RFTBUS_BROKER__PORT": str(port), "RFTBUS_BROKER__LIBS_DIR": str(JARS), "RFTBUS_BROKER__HEAP": "512m",
                "RFTBUS_RUN__TASKS": "200", "RFTBUS_RUN__EVAL_N": "16", "RFTBUS_RUN__ANALYTICS": "false",
                "RFTBUS_RL__GROUP_SIZE": "4", "RFTBUS_RL__BATCH_GROUPS": "4"})
    cmd = [str(Path(sys.executable).parent / "rftbus"), "--state-dir", str(state), "run",
           str(REPO / "configs" / "toy.yaml"), "--max-steps", "60", "--minutes", "8",
           "--summary-json", str(tmp_path / "s.json")]
    log = open(tmp_path / "run.out", "w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None:
            steps = [st.get("step", 0) for st in read_statuses(state) if st.get("role") == "trainer"]
            if steps and max(steps) >= 3:
                break
            time.sleep(0.5)
        pid = embedded.running_pid(cfg)
        assert proc.poll() is None and pid is not None, (tmp_path / "run.out").read_text()[-3000:]
        users = json.loads((state / "kafka" / "users.json").read_text())
        shared = (state / "run" / "config.yaml").read_text()
        assert not any(pw in shared for pw in users.values())  # each child has its own, in its environment

        def as_user(user: str) -> dict:
            return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "PLAIN", "sasl.username": user,
                    "sasl.password": users[user]}

        decisions, bootstrap = cfg.topics.decisions.name, cfg.broker.bootstrap
        assert _write_as(bootstrap, decisions, as_user("rftbus-serve")) == "TOPIC_AUTHORIZATION_FAILED"
        assert _write_as(bootstrap, cfg.topics.weights.name, as_user("rftbus-explorer")) == "TOPIC_AUTHORIZATION_FAILED"
        assert _write_as(bootstrap, decisions, as_user("rftbus-gate")) == "ok"
        assert _write_as(bootstrap, decisions, {**as_user("rftbus-serve"), "sasl.password": "guess"}, 3) != "ok"
        assert _write_as(bootstrap, decisions, {}, 3) != "ok"  # no password: no connection
        os.kill(pid, signal.SIGKILL)
        proc.wait(timeout=560)
    finally:
        stop_run(proc, state)
        log.close()
        embedded.stop(cfg)
    out = (tmp_path / "run.out").read_text()
    assert proc.returncode == 0, out[-3000:]
    s = json.loads((tmp_path / "s.json").read_text())
    assert s["stop_reason"].startswith("trainer reached step"), s["stop_reason"]
    assert s["restarts"]["broker"] == 1 and s["stages_dead"] == {}, (s["restarts"], s["stages_dead"])
    assert "gone" in s["crashes"]["broker"][0]
    assert s["counts_reconcile"] is True and s["experiences_lost"] == 0 and s["duplicated"] == 0
    events = (state / "run" / "events.log").read_text()
    assert "broker: restarted the broker on the same data" in events, events[-2000:]


def test_a_stage_given_up_on_stops_the_run_loudly(broker, tmp_path):
    """#18: a child that keeps crashing is not given up on silently: the run stops with its cause, exits
    1, and the summary says which stage died (the counts cannot reconcile without it)."""
    env = _env(broker, uuid.uuid4().hex[:6])
    # DeepSpeed (only the trainer imports it) refuses an unknown accelerator: every start of the trainer fails
    env.update({"DS_ACCELERATOR": "no-such-accelerator", "RFTBUS_RUN__MAX_RESTARTS": "1"})
    out = rftbus_cli(None, "--state-dir", str(tmp_path / "state"), "run", str(REPO / "configs" / "toy.yaml"),
                     "--minutes", "6", "--summary-json", str(tmp_path / "s.json"), env=env, timeout=600)
    assert out.returncode == 1 and (tmp_path / "s.json").exists(), out.stdout[-3000:] + out.stderr[-3000:]
    s = json.loads((tmp_path / "s.json").read_text())
    assert s["stop_reason"].startswith("gave up on trainer (exit code 1: "), s["stop_reason"]
    assert list(s["stages_dead"]) == ["trainer"] and s["counts_reconcile"] is False
    assert len(s["crashes"]["trainer"]) == 2 and s["restarts"]["trainer"] == 1
    assert "stopping the run: gave up on trainer" in out.stderr
