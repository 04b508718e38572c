"""The taskset producer against the real broker: built-ins, files, bad rows, expert demos, dedupe ids."""

from __future__ import annotations

import csv
import json

import pyarrow as pa
import pyarrow.parquet as pq
from conftest import make_config, rftbus_cli
from explorer_kafka import fresh_config, read_topic

from rftbus.ground.config.explorer import FieldMap
from rftbus.producers.tasks.publish import publish_tasks
from rftbus.producers.tasks.sources import read_source
from rftbus.ground.schemas import Source


def _env(cfg):
    return {f"RFTBUS_TOPICS__{k.upper()}__NAME": spec.name for k, spec in cfg.topics.all().items()}


def test_publish_builtin_twice_same_ids_and_eval_split(broker, tmp_path):
    cfg = fresh_config(make_config, tmp_path, broker)
    for _ in range(2):
        out = rftbus_cli(cfg, "tasks", "publish", "addition", "--n", "5", "--json", env=_env(cfg))
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["published"] == 5
    out = rftbus_cli(cfg, "tasks", "publish", "addition", "--n", "3", "--split", "eval", "--expert", env=_env(cfg))
    assert out.returncode == 0, out.stderr
    tasks = read_topic(cfg, "tasks")
    train = [t for _, t in tasks if t.split == "train"]
    evals = [t for _, t in tasks if t.split == "eval"]
    assert len(train) == 10 and len({t.task_id for t in train}) == 5  # same stable ids the second time
    assert len(evals) == 3 and not {t.task_id for t in evals} & {t.task_id for t in train}
    assert all(key == t.task_id for key, t in tasks)
    experts = [g for _, g in read_topic(cfg, "expert")]
    assert len(experts) == 3 and {g.task_id for g in experts} == {t.task_id for t in evals}
    for g in experts:  # a demonstration is a group of one
        [e] = g.samples
        assert g.source is Source.expert and e.reward == 1.0 and g.metadata["policy_free"] == "1"
        assert e.logprobs == [0.0] * len(e.response_ids) and all(e.loss_mask)
        answer = next(t.answer for t in evals if t.task_id == g.task_id)
        assert e.response_text == answer


def test_jsonl_bad_rows_reported_by_line_and_skipped(broker, tmp_path):
    cfg = fresh_config(make_config, tmp_path, broker)
    src = tmp_path / "mine.jsonl"
    src.write_text("\n".join([
        json.dumps({"q": "1+1=", "a": 2, "k": 3}),
        json.dumps({"q": "2+2=", "a": "4"}),
        "{not json",
        json.dumps({"a": "5"}),
        json.dumps({"q": "3+3=", "a": "6", "k": "many"}),
        json.dumps({"q": "4+4=", "a": "8", "tag": "x"}),
    ]) + "\n")
    yaml = tmp_path / "cfg.yaml"
    yaml.write_text("taskset:\n  fields: {prompt: q, answer: a, n_samples: k, metadata: [tag]}\n")
    out = rftbus_cli(cfg, "--config", str(yaml), "tasks", "publish", str(src), env=_env(cfg))
    assert out.returncode == 1
    assert "mine.jsonl:3" in out.stderr and "not valid JSON" in out.stderr
    assert "mine.jsonl:4" in out.stderr and "'q'" in out.stderr
    assert "mine.jsonl:5" in out.stderr and "n_samples" in out.stderr
    assert "3 bad rows skipped" in out.stderr and "3 good ones are published" in out.stderr
    tasks = {t.prompt: t for _, t in read_topic(cfg, "tasks")}
    assert sorted(tasks) == ["1+1=", "2+2=", "4+4="]
    assert tasks["1+1="].answer == "2" and tasks["1+1="].n_samples == 3 and tasks["1+1="].taskset == "mine"
    assert tasks["4+4="].metadata == {"tag": "x"}


def test_csv_parquet_and_hf_folder(broker, tmp_path):
    from datasets import Dataset, DatasetDict
    cfg = fresh_config(make_config, tmp_path, broker)
    rows = [{"prompt": f"{i}+1=", "answer": str(i + 1)} for i in range(4)]
    with open(tmp_path / "t.csv", "w", newline="") as f:
        w = csv.DictWriter(f, ["prompt", "answer"])
        w.writeheader()
        w.writerows(rows)
        f.write(",7\n")  # line 6: empty prompt
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "t.parquet")
    DatasetDict({"test": Dataset.from_list(rows)}).save_to_disk(str(tmp_path / "hf"))
    fields = FieldMap()
    reports = {}
    for name, split in (("t.csv", "train"), ("t.parquet", "train"), ("hf", "test")):
        reports[name] = publish_tasks(cfg, read_source(str(tmp_path / name), fields=fields, split=split, n=None))
    assert reports["t.csv"].published == 4 and reports["t.csv"].bad[0][0].endswith("t.csv:6")
    assert reports["t.parquet"].published == 4 and not reports["t.parquet"].bad
    assert reports["hf"].published == 4
    tasks = [t for _, t in read_topic(cfg, "tasks")]
    assert len(tasks) == 12 and len({t.task_id for t in tasks if t.taskset == "t"}) == 4  # csv+parquet: same ids
    assert {t.split for t in tasks if t.taskset == "hf"} == {"test"}
    limited = list(read_source(str(tmp_path / "t.parquet"), fields=fields, split="train", n=2))
    assert len(limited) == 2


def test_unknown_source_is_one_clear_error(broker, tmp_path):
    cfg = fresh_config(make_config, tmp_path, broker)
    out = rftbus_cli(cfg, "tasks", "publish", "no-such-thing", env=_env(cfg))
    assert out.returncode == 1 and "neither a file/folder nor a built-in taskset" in out.stderr
    assert "Traceback" not in out.stderr


def test_hostile_rows_are_named_by_line_not_a_traceback(broker, tmp_path):
    """#42: a 9 MB line and JSON nested 100,000 deep each cost their own row, named by line; the good rows are
    published (through the real CLI and broker)."""
    cfg = fresh_config(make_config, tmp_path, broker)
    src = tmp_path / "hostile.jsonl"
    with open(src, "w") as f:
        f.write(json.dumps({"q": "1+1=", "a": "2", "self": "me"}) + "\n")
        f.write('{"q": "' + "9" * (9 * 1024 * 1024) + '", "a": "1"}\n')
        f.write("[" * 100_000 + "]" * 100_000 + "\n")
        f.write(json.dumps({"q": "2+2=", "a": "4", "self": "you"}) + "\n")
    yaml = tmp_path / "cfg.yaml"
    yaml.write_text("taskset:\n  fields: {prompt: q, answer: a}\n")
    out = rftbus_cli(cfg, "--config", str(yaml), "tasks", "publish", str(src), env=_env(cfg))
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr[-2000:]
    assert "hostile.jsonl:2" in out.stderr and "characters (skipped)" in out.stderr
    assert "hostile.jsonl:3" in out.stderr and "nested too deeply" in out.stderr
    assert "2 bad rows skipped" in out.stderr
    assert sorted(t.prompt for _, t in read_topic(cfg, "tasks")) == ["1+1=", "2+2="]


def test_publishes_sharing_a_producer_each_count_their_own(broker, tmp_path):
    """`rftbus run` publishes its passes with one producer (a new one per pass waited on a frozen node, #46), and
    two may be awaiting Kafka at once: each report counts its own records, not the other's."""
    import threading

    from rftbus.ground.kafka.clients import make_producer

    cfg = fresh_config(make_config, tmp_path, broker)
    producer = make_producer(cfg)
    rows = {n: list(read_source("addition", fields=FieldMap(), split="train", n=n, seed=n)) for n in (7, 12)}
    reports: dict[int, object] = {}
    threads = [threading.Thread(target=lambda n=n: reports.__setitem__(n, publish_tasks(cfg, rows[n], producer=producer)))
               for n in rows]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert {n: (r.published, r.failed) for n, r in reports.items()} == {7: (7, []), 12: (12, [])}
    assert len(read_topic(cfg, "tasks")) == 19
