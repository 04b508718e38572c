"""Tasksets from data (rftbus/ground/tasksets/data.py, files.py): formats, the column mapping, messages, a system
prompt and a template, the eval split and its checks, and bad input named by `file:line`. No broker."""

from __future__ import annotations

import json

import pytest

from rftbus.ground.config.explorer import TasksetConfig
from rftbus.ground.tasksets import get_taskset
from rftbus.ground.tasksets.data import DataTaskset, held_out, open_taskset
from rftbus.ground.tasksets.files import SourceError

ROWS = [{"q": f"What is {i} plus {i}?", "a": str(2 * i), "level": i % 3} for i in range(1, 61)]


def _jsonl(path, rows) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def _tc(path, **over) -> TasksetConfig:
    return TasksetConfig(name="mine", path=str(path), fields={"prompt": "q", "answer": "a", "metadata": ["level"]},
                         **over)


def test_the_builtins_and_data_are_one_mechanism(tmp_path):
    assert type(open_taskset(TasksetConfig(name="addition"))) is type(get_taskset("addition"))
    ts = open_taskset(_tc(_jsonl(tmp_path / "d.jsonl", ROWS)))
    assert isinstance(ts, DataTaskset) and ts.name == "mine"
    with pytest.raises(SourceError, match="neither a built-in"):
        open_taskset(TasksetConfig(name="no-such-thing"))


def test_a_seeded_share_is_held_out_and_never_trained(tmp_path):
    ts = open_taskset(_tc(_jsonl(tmp_path / "d.jsonl", ROWS), eval={"fraction": 0.25, "seed": 3}))
    train = {t.task_id for t in ts.tasks("train", 1000)}
    ev = {t.task_id for t in ts.tasks("eval", 1000)}
    assert not train & ev and len(train | ev) == len(ROWS) and 5 <= len(ev) <= 25
    assert ev == {t.task_id for t in ts.tasks("eval", 1000)}  # the same share every time
    assert all(held_out(i, 0.25, 3) for i in ev)
    assert ts.check() == {"train": len(train), "eval": len(ev)}
    t = next(ts.tasks("train", 1))
    assert t.metadata["level"] == str(ROWS[0]["level"]) and t.taskset == "mine"
    assert t.columns() == {"level": ROWS[0]["level"]}  # back with its type (an int), for rewards


@pytest.mark.parametrize("fmt", ["csv", "parquet", "hf"])
def test_csv_parquet_and_a_dataset_folder_read_the_same(tmp_path, fmt):
    import datasets

    ds = datasets.Dataset.from_list(ROWS)
    path = tmp_path / f"d.{fmt}"
    {"csv": lambda: ds.to_csv(str(path), index=False), "parquet": lambda: ds.to_parquet(str(path)),
     "hf": lambda: ds.save_to_disk(str(path))}[fmt]()
    ts = open_taskset(_tc(path))
    got = [t.prompt for t in ts.tasks("train", 1000)] + [t.prompt for t in ts.tasks("eval", 1000)]
    assert sorted(got) == sorted(r["q"] for r in ROWS)


def test_a_named_split_of_a_dataset_folder_is_the_eval_split(tmp_path):
    import datasets

    d = datasets.DatasetDict({"train": datasets.Dataset.from_list(ROWS[:40]),
                              "test": datasets.Dataset.from_list(ROWS[40:])})
    d.save_to_disk(str(tmp_path / "ds"))
    ts = open_taskset(_tc(tmp_path / "ds", eval={"split": "test"}))
    assert ts.check() == {"train": 40, "eval": 20}
    with pytest.raises(SourceError, match="has splits"):
        open_taskset(_tc(tmp_path / "ds", eval={"split": "validation"})).check()


def test_messages_a_system_prompt_and_a_template(tmp_path):
    rows = [{"chat": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
                      {"role": "user", "content": f"{i}+{i}?"}], "a": str(2 * i)} for i in range(10)]
    ts = open_taskset(TasksetConfig(name="chat", path=_jsonl(tmp_path / "c.jsonl", rows),
                                    fields={"messages": "chat", "answer": "a"}, system_prompt="Be brief.",
                                    eval={"fraction": 0.3}))
    t = next(ts.tasks("train", 1))
    assert t.messages is not None and t.messages[0] == {"role": "system", "content": "Be brief."}
    assert [m["role"] for m in t.messages] == ["system", "user", "assistant", "user"] and t.prompt == t.messages[-1]["content"]
    tpl = open_taskset(_tc(_jsonl(tmp_path / "d.jsonl", ROWS), template="Q (level {{ level }}): {{ q }}"))
    assert next(tpl.tasks("train", 1)).prompt.startswith("Q (level 1): What is 1 plus 1")


def test_a_separate_eval_file_that_repeats_a_train_task_is_refused(tmp_path):
    train = _jsonl(tmp_path / "train.jsonl", ROWS[:50])
    ev = _jsonl(tmp_path / "eval.jsonl", ROWS[48:])  # rows 49 and 50 are in both
    with pytest.raises(SourceError) as e:
        open_taskset(_tc(train, eval={"path": ev})).check()
    assert "eval.jsonl:1: this eval task is also a train task" in str(e.value) and "train.jsonl:49" in str(e.value)
    assert open_taskset(_tc(train, eval={"path": _jsonl(tmp_path / "e2.jsonl", ROWS[50:])})).check() == \
        {"train": 50, "eval": 10}


@pytest.mark.parametrize("row,words", [
    ({"a": "1"}, "column 'q' (prompt) is missing"),
    ({"q": "   ", "a": "1"}, "the prompt is empty"),
    ({"q": "x", "a": ["1", "2"]}, "column 'a' (answer) is a list"),
    ({"q": 7, "a": "1"}, "column 'q' (prompt) is a int"),
])
def test_a_bad_row_is_named_by_file_and_line(tmp_path, row, words):
    path = tmp_path / "d.jsonl"
    _jsonl(path, [ROWS[0], row, *ROWS[1:]])
    with pytest.raises(SourceError) as e:
        open_taskset(_tc(path)).check()
    assert f"{path}:2: {words}" in str(e.value) and "1 bad rows" in str(e.value)


def test_a_template_naming_a_missing_column_and_a_file_of_another_format(tmp_path):
    path = _jsonl(tmp_path / "d.jsonl", ROWS)
    with pytest.raises(SourceError, match=r"d.jsonl:1: taskset.template: 'question' is undefined"):
        open_taskset(_tc(path, template="{{ question }}")).check()
    with pytest.raises(SourceError, match="taskset.template: unexpected"):
        open_taskset(_tc(path, template="{{ q }"))
    with pytest.raises(SourceError, match="not a Parquet file"):
        open_taskset(_tc(path, format="parquet")).check()
    (tmp_path / "bin.jsonl").write_bytes(b"\x00\xff\xfe" * 10)
    with pytest.raises(SourceError, match="not UTF-8"):
        open_taskset(_tc(tmp_path / "bin.jsonl")).check()


def test_an_eval_share_that_holds_nothing_out_is_refused(tmp_path):
    with pytest.raises(SourceError, match="no eval tasks"):
        open_taskset(_tc(_jsonl(tmp_path / "d.jsonl", ROWS[:3]), eval={"fraction": 0.0})).check()


def test_the_shipped_gsm8k_mini_is_well_formed_and_its_eval_is_apart():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "data" / "gsm8k-mini"
    ts = open_taskset(TasksetConfig(name="gsm8k-mini", path=str(root / "train.jsonl"),
                                    fields={"prompt": "question"}, eval={"path": str(root / "eval.jsonl")}))
    assert ts.check() == {"train": 500, "eval": 100}
    t = next(ts.tasks("eval", 1))
    assert t.answer is not None and "\n#### " in t.answer


def test_a_hub_dataset_id_loads_where_the_hub_is_reachable():
    import socket

    try:
        socket.create_connection(("huggingface.co", 443), timeout=3).close()
    except OSError:
        pytest.skip("huggingface.co is not reachable from this machine: the hub path is untested here")
    ts = open_taskset(TasksetConfig(name="gsm8k", path="openai/gsm8k", format="hub", subset="main", split="train",
                                    fields={"prompt": "question"}, eval={"split": "test"}))
    assert next(ts.tasks("eval", 1)).answer


def test_hostile_rows_are_named_by_line(tmp_path):
    """#42: JSON nested 100,000 deep (RecursionError) and a column named `self` under a template (TypeError) were
    tracebacks; now each is a line of the check's report, and the good rows stay."""
    src = tmp_path / "h.jsonl"
    src.write_text(json.dumps({"q": "1+1=", "a": "2", "self": "me"}) + "\n" + "[" * 100_000 + "]" * 100_000 + "\n"
                   + json.dumps({"q": "2+2=", "a": "4", "self": "you", "level": 0}) + "\n")
    ts = open_taskset(TasksetConfig(name="h", path=str(src), fields={"answer": "a"}, template="{{ q }} {{ row['self'] }}"))
    with pytest.raises(SourceError) as e:
        ts.check()
    assert "h.jsonl:2: JSON nested too deeply to read" in str(e.value) and "1 bad rows" in str(e.value)
    got = [r.task.prompt for split in ("train", "eval") for r in ts.rows(split) if r.task is not None]
    assert sorted(got) == ["1+1= me", "2+2= you"], got
