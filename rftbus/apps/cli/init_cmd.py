"""`rftbus init`: a config for a real model and your data, with the settings measured on real models, commented.

The defaults of `rftbus config` are the toy's (a tiny model learning in seconds); a real chat model wants others
(LoRA, a lower learning rate, room to answer, a longer budget, no demonstrations unless asked). `init` writes them
with the reason beside each, reads the data to name its prompt and answer columns and to train on every row (never
a silent cut), and runs `rftbus check` on what it wrote.
"""

from __future__ import annotations

import re

import json
from pathlib import Path

import typer

from rftbus.apps.cli.context import state
from rftbus.ground.errors import RftbusError

PROMPT_KEYS = ("prompt", "question", "problem", "input", "instruction", "query")
ANSWER_KEYS = ("answer", "solution", "output", "target", "completion", "response", "label")

TEMPLATE = """\
# Written by `rftbus init` for {model_label} on {data}. `rftbus check {out}` before `rftbus run {out}`;
# every key: `rftbus config`. The settings are those measured on SmolLM2-135M-Instruct + LoRA on this kind of
# machine (docs/BENCHMARKS.md, "A real chat model", "rftbus vs TRL"); change them with the reasons in mind.

state_dir: {state_dir}

rl:
  group_size: 8           # n answers a prompt: at a ~20 % success rate most groups have reward variance
  batch_groups: 8         # B groups a step: 64 answers
  max_staleness: 1        # η: generation and training overlap by one version (the off-policy correction covers it)
  sync_interval: 1

model:
{model_lines}

taskset:
  name: {name}
  path: {data}
  fields: {{prompt: {prompt_key}, answer: {answer_key}}}
{eval_line}

explorer:
  batch_tasks: 8          # 8 groups per generate call, each prompt read once
  sampling: {{temperature: 1.0, max_new_tokens: {new_tokens}}}   # room to answer; the toy default is 6
  rewards: [{{name: {reward}, weight: 1.0}}]   # the contract for your own: docs/REWARDS.md

trainer:
  loss: grpo
  # LoRA r 8 on the attention projections: a version is ~0.7 % of a 135M model, and learned as fast as r 16 on all
  lora: {{r: 8, alpha: 16, dropout: 0.0, target_modules: [q_proj, k_proj, v_proj, o_proj]}}
  lr: 0.0005              # 5e-4 for LoRA (the toy's 1e-3 is for full weights of a tiny model)
  micro_batch_tokens: 1024   # bounds a step's memory (~3 GB for 135M); gradients accumulate
  step_wait_s: 5          # step on the groups ready 5 s after the last step: steps as often as the explorer feeds
  device: auto            # auto: a GPU when there is one; with two, e.g. trainer cuda:1, explorer.engine cuda:0

run:
  tasks: {tasks}            # every train row of {data} (run.tasks is how many are published a pass)
  task_passes: 20
  expert: false           # pure RL; true also publishes each answer as a demonstration (MIX)
  max_minutes: 60
  eval_n: {eval_n}
  eval_every_versions: 3
  eval_device: auto       # where the held-out eval generates (cpu, cuda:N); eval_engine: explorer uses vLLM's kind
"""


def _read_rows(path: Path) -> tuple[dict, int]:
    """The data's first row and how many rows it has, read by the taskset's own reader (JSONL, CSV, Parquet, a
    Hugging Face dataset folder): what `init` sees is what the run will read."""
    from rftbus.ground.tasksets.files import SourceError, records

    first, n = None, 0
    try:
        for where, row in records(str(path)):
            if isinstance(row, Exception):
                raise RftbusError(f"{where}: {row}")
            if first is None:
                if not isinstance(row, dict):
                    raise RftbusError(f"{where}: the first row is {type(row).__name__}, not an object")
                first = row
            n += 1
    except SourceError as e:
        raise RftbusError(str(e)) from None
    if first is None:
        raise RftbusError(f"{path}: no rows")
    return first, n


def _pick(row: dict, keys: tuple[str, ...], given: str | None, what: str, path: Path) -> str:
    if given:
        if given not in row:
            raise RftbusError(f"{path}: no column {given!r} (it has {', '.join(row)})")
        return given
    found = next((k for k in keys if k in row), None)
    if found is None:
        raise RftbusError(f"{path}: no {what} column among {', '.join(row)}; name it with --{what}-field")
    return found


def _counts(cfg) -> dict[str, int] | None:
    """Train and held-out rows of the data as the config splits it (None when it cannot be read: check says why)."""
    from rftbus.ground.tasksets.data import DataTaskset, open_taskset

    try:
        ts = open_taskset(cfg.taskset)
        return ts.check() if isinstance(ts, DataTaskset) else None
    except (RftbusError, OSError, ValueError):
        return None


def init(
    ctx: typer.Context,
    out: Path = typer.Argument(Path("rftbus.yaml"), help="The config file to write."),
    model: str = typer.Option(..., "--model", help="A model folder, a Hugging Face id, or a preset "
                              "(smollm2-135m-instruct)."),
    data: Path = typer.Option(..., "--data", help="Train data: JSONL, CSV, Parquet, or a Hugging Face dataset "
                              "folder."),
    eval_data: Path | None = typer.Option(None, "--eval", help="Held-out eval data (default: a tenth of --data)."),
    prompt_field: str | None = typer.Option(None, "--prompt-field"),
    answer_field: str | None = typer.Option(None, "--answer-field"),
    reward: str = typer.Option("math", "--reward", help="A built-in reward or module:function."),
    new_tokens: int = typer.Option(128, "--max-new-tokens", min=1),
    force: bool = typer.Option(False, "--force", help="Overwrite OUT."),
) -> None:
    """Write a config for a real model and your data, with measured settings, then check it."""
    from rftbus.ground.models.source import PRESETS
    from rftbus.apps.run.check import check_config
    from rftbus.apps.cli.run_cmd import show_report

    st = state(ctx)
    if out.exists() and not force:
        raise RftbusError(f"{out} exists; --force to overwrite")
    from rftbus.ground.tasksets.files import detect

    if not data.exists() or not detect(data):
        raise RftbusError(f"--data {data}: a JSONL, CSV or Parquet file, or a Hugging Face dataset folder "
                          "(save_to_disk) is needed" + ("" if data.exists() else ": it does not exist"))
    row, rows = _read_rows(data)
    prompt_key = _pick(row, PROMPT_KEYS, prompt_field, "prompt", data)
    answer_key = _pick(row, ANSWER_KEYS, answer_field, "answer", data)
    if not re.fullmatch(r"[A-Za-z_][\w.]*(:[A-Za-z_]\w*)?", reward):
        raise RftbusError(f"--reward {reward!r}: a built-in reward's name or module:function")
    q = json.dumps  # every value the user gave is written as a quoted YAML scalar: nothing can add a key (#63)
    name = re.sub(r"[^A-Za-z0-9_-]+", "-", data.stem).strip("-") or "data"
    if model in PRESETS:
        model_lines, label = f"  name: {q(model)}", model
    else:
        label = Path(model).name or model
        model_lines = f"  name: {q(label)}\n  path: {q(model)}"

    def text(tasks: int, eval_n: int) -> str:
        return TEMPLATE.format(
            model_label=q(label), data=q(str(data)), out=q(str(out)), name=q(name), state_dir=q(f".rftbus/{name}"),
            model_lines=model_lines, prompt_key=q(prompt_key), answer_key=q(answer_key), reward=q(reward),
            new_tokens=new_tokens, tasks=tasks,
            eval_line=f"  eval: {{path: {q(str(eval_data))}}}" if eval_data else "  eval: {fraction: 0.1}   # a tenth held out",
            eval_n=eval_n)

    out.write_text(text(rows, 64))
    st.config_path = out
    counts = _counts(st.config())  # the split as the run will make it: train every row, eval every held-out one
    if counts is not None:
        out.write_text(text(counts["train"], max(1, min(64, counts["eval"]))))
    st.console.print(f"wrote {out}: {label}, {rows} rows of {data} ({prompt_key} -> {answer_key}), reward {reward}",
                     soft_wrap=True)
    rep = check_config(st.config(), out)
    show_report(st, rep)
    if not rep.ok:
        st.err.print(f"[red]{out} was written but does not pass `rftbus check`: fix the lines above[/]")
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command()(init)
