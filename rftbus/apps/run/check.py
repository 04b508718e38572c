"""`rftbus check [CONFIG]`: what a first run would trip on, found before anything starts.

Each check opens the real thing the run would open (the model folder's tokenizer and chat template, the data, every
reward imported and scoring one real train row, the sizes the run, the taskset and the simulated agents ask of
each other) and gives one line per problem. `rftbus run` runs the same checks first and stops on an error;
warnings (data cut by `run.tasks`) are printed and the run goes on.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Callable
from typing import Any

from rftbus.ground.config import Config, where_looked
from rftbus.ground.errors import RftbusError


@dataclass
class Report:
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.errors


def _first_line(e: BaseException) -> str:
    """The error's first line; its type too unless it is rftbus's own (whose message already says what it is)."""
    text = str(e).strip().splitlines()
    if isinstance(e, RftbusError) and text:
        return text[0]
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__


def check_model(cfg: Config, tasks: list, rep: Report, config_file: Path | None = None) -> Any:
    """The tokenizer and prompt format (chat template, stop ids) of the configured model, and `tasks`' prompts with
    the answers' length inside its context; its weights are not loaded (seconds, and a missing or broken folder
    fails on the tokenizer and config already)."""
    from rftbus.ground.models.loading import load_tokenizer
    from rftbus.ground.prompting import run_prompt_format
    from rftbus.ground.models.source import missing_folder, model_folder

    looked = where_looked(cfg.model.path, config_file) if cfg.model.path else None
    if (why := missing_folder(cfg.model.path, looked)) is not None:
        rep.errors.append(f"model: {why}")
        return None
    from huggingface_hub.utils import logging as hub_logging

    hub_logging.set_verbosity_error()  # (its retries print a line each; a hub id that does not load is said once)
    try:
        folder = model_folder(cfg.model)
        tok = load_tokenizer(cfg.model)
        fmt = run_prompt_format(tok, cfg)
    except (RftbusError, OSError, ValueError) as e:
        path = cfg.model.path
        if path and not path.endswith(".gguf") and not Path(path).expanduser().exists():  # read as a hub id
            rep.errors.append(f"model.path {path!r}: no folder {where_looked(path, config_file)}, and as a "
                              f"Hugging Face hub id it did not load ({_first_line(e)})")
        else:
            rep.errors.append(f"model: {_first_line(e)}")
        return None
    if folder is not None:
        from transformers import AutoConfig

        try:
            conf = AutoConfig.from_pretrained(folder, trust_remote_code=cfg.model.trust_remote_code)
        except (OSError, ValueError) as e:
            rep.errors.append(f"model {folder}: no model config ({_first_line(e)})")
            return None
        ctx = getattr(conf.get_text_config(), "max_position_embeddings", None)
        check_context(cfg, fmt, ctx if isinstance(ctx, int) else None, tasks, rep)
    rep.notes.append(f"model {cfg.model.name or folder or 'tiny'}: "
                     f"{'chat template' if fmt.template else 'plain text prompts'}, stop ids {fmt.stop_ids}")
    return fmt


def check_context(cfg: Config, fmt: Any, ctx: int | None, tasks: list, rep: Report) -> None:
    """Prompt and answer inside the model's context (`ctx` tokens): explorer.sampling.max_new_tokens alone, then
    the longest prompt of the tasks checked (through the one prompt renderer) with it."""
    if ctx is None:
        return
    new = cfg.explorer.sampling.max_new_tokens
    if new >= ctx:
        rep.errors.append(f"explorer.sampling.max_new_tokens {new} is past the model's context of {ctx} tokens "
                          f"(max_position_embeddings): at most {ctx - 1} less the prompt")
        return
    longest = max(((len(fmt.of_task(t)), t) for t in tasks), key=lambda x: x[0], default=None)
    if longest is not None and longest[0] + new > ctx:
        n, t = longest
        rep.errors.append(f"task {t.task_id}: its prompt is {n} tokens, and with explorer.sampling.max_new_tokens "
                          f"{new} that is past the model's context of {ctx}: shorten it or lower max_new_tokens")


def check_data(cfg: Config, rep: Report, config_file: Path | None = None) -> tuple[Any, list]:
    """The taskset opened, data read whole (a bad row named), and the train tasks the run would publish."""
    from rftbus.producers.tasks.sources import SourceError
    from rftbus.ground.tasksets.data import DataTaskset, open_taskset

    path = cfg.taskset.path
    looked = (f"; looked for {where_looked(path, config_file)}" if path and cfg.taskset.format != "hub"
              and not Path(path).expanduser().exists() else "")
    try:
        ts = open_taskset(cfg.taskset)
    except (RftbusError, OSError, ValueError) as e:
        rep.errors.append(f"taskset {cfg.taskset.name}: {_first_line(e)}{looked}")
        return None, []
    if isinstance(ts, DataTaskset):
        try:
            counts = ts.check()
        except (SourceError, RftbusError) as e:  # every bad row its own line
            first, *rows = str(e).splitlines()
            first += looked
            rep.errors.append(first if first.startswith("taskset") else f"taskset {cfg.taskset.name}: {first}")
            rep.errors.extend(r.strip() for r in rows if r.strip())
            return ts, []
        train = counts["train"]
        if cfg.run.tasks < train:
            rep.warnings.append(f"run.tasks {cfg.run.tasks} publishes the first {cfg.run.tasks} of the data's {train} "
                                f"train rows; set run.tasks: {train} to train on all of them")
        rep.notes.append(f"taskset {ts.name}: {train} train and {counts['eval']} held-out eval tasks")
        tasks = list(ts.tasks("train", min(cfg.run.tasks, train)))
        if cfg.run.eval_n > counts["eval"]:
            rep.warnings.append(f"run.eval_n {cfg.run.eval_n} is more than the {counts['eval']} held-out tasks: eval "
                                f"scores {counts['eval']}")
    else:
        try:
            tasks = list(ts.tasks("train", cfg.run.tasks, cfg.taskset.seed))
        except ValueError as e:
            rep.errors.append(f"run.tasks {cfg.run.tasks}: {_first_line(e)} (taskset {cfg.taskset.name})")
            return ts, []
        rep.notes.append(f"taskset {cfg.taskset.name}: {len(tasks)} train tasks drawn")
        held_out = _drawable(ts, cfg.run.eval_n, cfg.taskset.seed, "eval")
        if held_out < cfg.run.eval_n:  # (the run's eval would fail at every point and the run go on without one)
            rep.errors.append(f"run.eval_n {cfg.run.eval_n} is more than the {held_out} distinct held-out problems "
                              f"taskset {cfg.taskset.name} has: set run.eval_n: {held_out} or fewer")
    if cfg.run.simulate:
        have = len(tasks) if isinstance(ts, DataTaskset) else _drawable(ts, cfg.simulate.tasks, cfg.taskset.seed)
        if have < cfg.simulate.tasks:
            rep.errors.append(f"simulate.tasks {cfg.simulate.tasks} is more than the {have} train tasks taskset "
                              f"{cfg.taskset.name} has: set simulate.tasks: {have} or fewer")
    return ts, tasks


def _drawable(ts: Any, n: int, seed: int, split: str = "train") -> int:
    """How many distinct tasks of `split` a built-in taskset can draw, up to n (it raises past its size)."""
    lo, hi = 0, n
    while lo < hi:
        mid = (lo + hi + 1) // 2
        try:
            list(ts.tasks(split, mid, seed))
            lo = mid
        except ValueError:
            hi = mid - 1
    return lo


def check_rewards(cfg: Config, ts: Any, tasks: list, rep: Report) -> None:
    """Every reward imported and scoring one real train row: its reference answer where the taskset has one."""
    from rftbus.ground.rewards import make_rewards
    from rftbus.ground.tasksets.data import DataTaskset

    if isinstance(ts, DataTaskset) and any(r.name == "taskset" for r in cfg.explorer.rewards):
        rep.errors.append(f"reward `taskset` is a built-in taskset's own scorer; taskset {ts.name} is data: score it "
                          "with explorer.rewards such as math, code, format, judge_llm or your own (docs/REWARDS.md)")
        return
    try:
        rewards = make_rewards(cfg.explorer.rewards)
    except (RftbusError, ImportError, TypeError, ValueError) as e:
        rep.errors.append(f"explorer.rewards: {_first_line(e)}")
        return
    except SystemExit as e:  # a reward module that exits at import ended `check` with nothing said (#63)
        rep.errors.append(f"explorer.rewards: importing a reward exited the process (SystemExit {e.code!r}): a "
                          "reward module must not exit")
        return
    if not tasks:
        return
    task = tasks[0]
    answer = task.answer or (ts.expert(task) if ts is not None else "") or ""
    try:
        scored = rewards.score(task, answer)
    except (Exception, SystemExit) as e:  # noqa: BLE001 - a user's reward may raise anything: said here
        rep.errors.append(f"explorer.rewards on task {task.task_id} ({answer!r:.40} as the answer): "
                          f"{_first_line(e) if not isinstance(e, SystemExit) else f'it exited (SystemExit {e.code!r})'}")
        return
    rep.notes.append(f"rewards {[s.name for s in cfg.explorer.rewards]}: task {task.task_id}'s reference answer "
                     f"scores {scored.reward:g}")


def vllm_problem(device: str, python: str | None) -> str | None:
    """Why vLLM cannot run for explorers on `device` under `python` (None: the run's own), asked of that Python
    itself (vLLM lives in an environment of its own); None when it can."""
    import subprocess

    if python is None:
        from rftbus.producers.engines.vllm import vllm_unavailable_reason

        return vllm_unavailable_reason(device)
    probe = ("import sys; from rftbus.producers.engines.vllm import vllm_unavailable_reason as r; "
             "print(r(sys.argv[1]) or '')")
    try:
        out = subprocess.run([python, "-c", probe, device], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"explorer.engine.python {python} cannot be run: {e}"
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["(no output)"])[-1]
        return f"explorer.engine.python {python} cannot import rftbus's vllm engine: {last}"
    return out.stdout.strip() or None


def check_devices(cfg: Config, rep: Report) -> None:
    """Each role's device against the GPUs this machine shows (a role on a missing GPU fails only once loaded)."""
    import torch

    from rftbus.ground.models.devices import problem

    gpus = torch.cuda.device_count()
    # DeepSpeed (imported by transformers below) guesses its accelerator and prints a warning when it finds none;
    # said here instead (rftbus/trainer/dist.py sets the same for the trainer's processes)
    os.environ.setdefault("DS_ACCELERATOR", "cuda" if gpus else "cpu")
    engine = cfg.explorer.engine
    roles = {"trainer.device": cfg.trainer.device, "run.eval_device": cfg.run.eval_device}
    if engine.kind in ("transformers", "vllm"):
        roles["explorer.engine.device"] = engine.device
    if engine.kind == "vllm":
        if (why := vllm_problem(engine.device, engine.python)) is not None:
            rep.errors.append(f"explorer.engine.kind is vllm: {why}")
        # the held-out eval runs in `rftbus run`'s own process, so its vLLM must be importable there
        if cfg.run.eval_engine == "explorer" and (why := vllm_problem(cfg.run.eval_device, None)) is not None:
            rep.errors.append(f"run.eval_engine is explorer (vllm) in the run's own Python: {why}")
    for role, spec in roles.items():
        if spec == "mps" and not torch.backends.mps.is_available():
            rep.errors.append(f"{role} is mps: this machine has no Apple GPU (MPS)")
        elif (line := problem(role, spec, gpus)) is not None:
            rep.errors.append(line)
    shown = {role: spec for role, spec in roles.items() if spec != "auto"}
    if shown:
        rep.notes.append("devices: " + ", ".join(f"{r} {s}" for r, s in shown.items()) + f" ({gpus} CUDA device(s))")


def _can_make(rep: Report, key: str, make: Callable[[], object]) -> None:
    """A plugin the config names (a built-in, an entry point, or module:Class) can be made; else one line naming the
    key and what is wrong."""
    try:
        make()
    except (RftbusError, ImportError, TypeError, ValueError) as e:
        rep.errors.append(f"{key}: {_first_line(e)}")


def check_loss(cfg: Config, rep: Report) -> None:
    """trainer.loss names a Loss the trainer can make."""
    from rftbus.trainer.losses import make_loss

    _can_make(rep, "trainer.loss", lambda: make_loss(cfg.trainer, cfg.rl.max_staleness))


def check_weights_transport(cfg: Config, rep: Report) -> None:
    """trainer.weights_transport names a WeightTransport every process can make."""
    from rftbus.ground.weights.transport import make_transport

    _can_make(rep, "trainer.weights_transport", lambda: make_transport(cfg))


def check_synthesis(cfg: Config, rep: Report) -> None:
    """synthesis.synthesizer names one the stage can make (the built-in taskset one only for a built-in taskset)."""
    if not cfg.synthesis.enabled:
        return
    from rftbus.producers.synthesis.base import make_synthesizer

    _can_make(rep, "synthesis.synthesizer",
              lambda: make_synthesizer(cfg.synthesis.synthesizer, cfg.taskset.name, cfg.taskset.params))


def check_user_code(config_file, rep: Report) -> None:
    """A module beside the config named like a standard-library module is never the one imported (the user's
    folders come after the library, #63), so a reward in it is not what runs: said in one line."""
    import sys
    from pathlib import Path

    if config_file:
        for f in sorted(Path(config_file).resolve().parent.glob("*.py")):
            if f.stem in sys.stdlib_module_names:
                rep.warnings.append(f"{f} is named like the standard library's `{f.stem}`: it is never imported from "
                                  "here (the library is); rename it")


def check_otel(cfg: Config, rep: Report) -> None:
    """Agents' traces: what reading them needs (opentelemetry-proto), and a Collector `rftbus run` can start."""
    import importlib.util
    import shutil

    o = cfg.otel
    if o.reads_traces and importlib.util.find_spec("opentelemetry.proto") is None:
        rep.errors.append("otel: reading traces needs opentelemetry-proto (pip install 'rftbus[otel]')")
    if not o.collector:
        return
    if o.collector_binary is not None:
        if not Path(o.collector_binary).is_file():
            rep.errors.append(f"otel.collector_binary {str(o.collector_binary)!r}: no such file")
        return
    from rftbus.ground.otel.build import DONE_MARKER, binary_path

    cache = Path(o.cache_dir or Path(cfg.state_dir) / "otelcol")
    if not (binary_path(cache).parent / DONE_MARKER).exists() and shutil.which("go") is None:
        rep.errors.append(f"otel.collector: no Collector built under {cache} and no Go toolchain to build one "
                          "(https://go.dev/dl/, 1.24 or newer); or set otel.collector_binary to a Collector with the "
                          "OTLP receiver and the Kafka exporter (otelcol-contrib)")


def check_config(cfg: Config, config_file=None) -> Report:
    rep = Report()
    t0 = time.perf_counter()
    check_user_code(config_file, rep)
    check_devices(cfg, rep)
    file = Path(config_file) if config_file else None
    ts, tasks = check_data(cfg, rep, file)
    check_model(cfg, tasks, rep, file)
    check_rewards(cfg, ts, tasks, rep)
    check_loss(cfg, rep)
    check_weights_transport(cfg, rep)
    check_synthesis(cfg, rep)
    check_otel(cfg, rep)
    rep.seconds = time.perf_counter() - t0
    return rep
