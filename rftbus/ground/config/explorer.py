"""The `explorer:` and `taskset:` config sections (pydantic only: no heavy imports here)."""

from __future__ import annotations

from typing import Any, Literal

import re

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

from rftbus.ground.models.devices import check_spec

SECRET_PARAM = re.compile(r"key|token|password|secret", re.IGNORECASE)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class SamplingConfig(_Strict):
    """How answers are sampled (the behaviour policy the logprobs record)."""

    temperature: float = Field(1.0, gt=0, description="softmax temperature of sampling (1 = the model's distribution)")
    top_p: float = Field(1.0, gt=0, le=1, description="nucleus sampling: the smallest set of tokens with this much "
                         "probability (1 = off)")
    top_k: int = Field(0, ge=0, description="0 = off")
    max_new_tokens: int = Field(8, ge=1, description="an answer's length cap, in tokens (prompt + this must fit the "
                                "model's context)")
    min_new_tokens: int = Field(0, ge=0, description="no end-of-sequence before this many tokens (fixed-length "
                                "rollouts, e.g. `bench async`); the sampled distribution then masks EOS early on")
    # "sampling": logprob of each token under the distribution it was drawn from (temperature,
    # top-k/top-p applied); "raw": under the model's plain softmax (temperature 1, no truncation).
    logprobs: Literal["sampling", "raw"] = Field("sampling", description="behaviour logprobs recorded: sampling = "
                                                 "under the distribution drawn from (temperature, top-k/top-p), raw = "
                                                 "the plain softmax")
    seed: int | None = Field(None, description="seed the engine's sampler (reproducible rollouts)")


class RewardSpec(_Strict):
    """One reward term: a built-in name (taskset, math, code, format, judge) or a dotted path."""

    name: str = Field(description="a built-in reward (taskset, math, code, format, judge_model, judge_llm), "
                      "module:function, or an entry point")
    weight: float = Field(1.0, description="this term's weight in the reward (a weighted sum)")
    params: dict[str, Any] = Field(default_factory=dict, description="the function's keyword arguments; one "
                                   "named like a secret (api_key, token, password, secret) is never printed")

    @field_validator("params")
    @classmethod
    def _secrets(cls, v: dict[str, Any]) -> dict[str, Any]:
        return {k: SecretStr(x) if isinstance(x, str) and SECRET_PARAM.search(k) else x for k, x in v.items()}


class EngineConfig(_Strict):
    """The engine that generates answers: transformers, vLLM, an OpenAI-compatible endpoint, or a plugin."""

    kind: str = Field("transformers", description="transformers | vllm | openai | dotted path")
    device: str = Field("auto", description="transformers and vllm: auto, cpu, mps, cuda or cuda:N (vllm: cuda:N,M "
                        "for tensor_parallel_size 2); vllm is shown only these GPUs")

    @field_validator("device")
    @classmethod
    def _device(cls, v: str) -> str:
        return check_spec(v)
    # openai engine
    base_url: str = Field("http://127.0.0.1:8000/v1", description="openai: the OpenAI-compatible endpoint the explorer "
                          "calls")
    api_key: SecretStr = Field(SecretStr("EMPTY"), description="openai: bearer token for the endpoint (never printed)")
    model: str | None = Field(None, description="openai: model name at the endpoint (default: model.name)")
    request_timeout_s: float = Field(60.0, gt=0, description="openai: seconds one request may take")
    served_version: int = Field(0, ge=0, description="openai: weight version the endpoint serves (stamped)")
    push_lora: bool = Field(False, description="openai: push each published LoRA version to the endpoint "
                            "(vLLM's /v1/load_lora_adapter; VLLM_ALLOW_RUNTIME_LORA_UPDATING=True there) and request "
                            "it by name, <model>-v<version>")
    lora_dir: str | None = Field(None, description="openai push_lora: where version folders are written, a path the "
                                 "endpoint can read (shared disk); default <state_dir>/upstream-lora")
    keep_adapters: int = Field(3, ge=1, description="openai push_lora: adapters kept loaded at the endpoint "
                               "(older ones are unloaded; keep more than rl.max_staleness)")
    # vllm engine
    gpu_memory_utilization: float = Field(0.5, gt=0, le=1, description="vllm: share of the GPU's memory the engine may "
                                          "take")
    tensor_parallel_size: int = Field(1, ge=1, description="vllm: GPUs one engine shards the model over")
    max_model_len: int | None = Field(None, ge=1, description="vllm: context to reserve KV cache for "
                                      "(default: the model's)")
    enforce_eager: bool = Field(False, description="vllm: no CUDA graphs or torch.compile (faster start; on this "
                                "2-core CPU the compiled engine starts in ~200 s against ~40 s and decodes ~10 % faster)")
    kv_cache_gb: float | None = Field(None, gt=0, description="vllm: KV cache size in GiB (default: "
                                      "gpu_memory_utilization of the GPU; 1 GiB of host memory on vLLM's CPU build)")
    lora_mode: Literal["auto", "adapter", "merged"] = Field(
        "auto", description="vllm with trainer.lora: each version as an adapter (a LoRARequest), or merged into full "
        "weights (one full swap a version); auto: merged on vLLM's CPU build (its LoRA kernels are slow), adapter on GPUs")
    python: str | None = Field(None, description="the Python the explorers run under (`rftbus run`): the "
                               "environment vLLM is installed in, e.g. .venv-vllm/bin/python (make install-vllm); "
                               "vLLM pins torch exactly, so it gets an environment of its own. Default: the run's own")


class WorkflowConfig(_Strict):
    """How a task becomes an episode: one turn, or turns with an environment."""

    kind: str = Field("single_turn", description="single_turn | multi_turn | dotted path | entry point name")
    env: str | None = Field(None, description="multi_turn: environment, a built-in name or dotted path")
    env_params: dict[str, Any] = Field(default_factory=dict, description="multi_turn: the environment's keyword "
                                       "arguments")
    max_turns: int = Field(4, ge=1, description="multi_turn: model turns an episode may take")


class ExplorerConfig(_Strict):
    """The explorers: the engine that generates, how it samples, the workflow and the rewards."""

    group_id: str = Field("rftbus-explorers", description="the explorers' Kafka consumer group (they share the tasks "
                          "topic)")
    id: str | None = Field(None, description="explorer id stamped on experiences; default host-pid")
    engine: EngineConfig = EngineConfig()
    sampling: SamplingConfig = SamplingConfig()
    workflow: WorkflowConfig = WorkflowConfig()
    rewards: list[RewardSpec] = Field(default_factory=lambda: [RewardSpec(name="taskset")],
                                      description="the reward's terms, summed with their weights (docs/REWARDS.md)")
    task_timeout_s: float = Field(120.0, gt=0, description="a task's deadline, every attempt included (a task may "
                                  "set its own in metadata timeout_s); past it -> task_timeout, not retried")
    max_n_samples: int = Field(64, ge=1, description="the most samples a task may ask for (Task.n_samples); a task "
                               "over it is rejected n_samples_out_of_bounds, not rolled out")
    max_prompt_chars: int = Field(256 * 1024, ge=1, description="a task whose prompt (or messages) is longer is "
                                  "rejected prompt_too_long before it is tokenized")
    task_workflows: list[str] = Field(default_factory=list, description="dotted paths of workflows a task may "
                                      "name (Task.workflow) besides the built-ins, installed rftbus.workflows entry "
                                      "points and workflow.kind: the operator's list, never what a task says")
    task_retries: int = Field(1, ge=0, description="extra attempts, within the deadline, after an attempt raised")
    admission: bool = Field(True, description="staleness admission control (off only for tests/benchmarks)")
    admission_refresh_s: float = Field(0.5, gt=0, description="how often consumer lags are re-read")
    admission_min_acceptance: float = Field(
        1.0, gt=0, le=1, description="groups not yet through streams count at streams' recent acceptance rate, "
        "at least this; 1 (default) counts every group in full. Lower it where explorers have their own "
        "hardware and streams drops most groups; see rftbus/producers/admission.py")
    admission_by_consumption: bool = Field(
        True, description="bound pending groups by (η+1−lag)·g, g = curated groups the trainer takes per version "
        "(measured), instead of (η+1−lag)·B: staleness by construction when steps take fewer than B groups for "
        "reasons other than supply (MIX stepping on demonstrations). Off where the trainer's steps are paced by "
        "supply (pure GRPO with step_wait_s): there g measures the explorer, and the bound holds it at g = 1")
    no_signal_floor: float | None = Field(
        None, gt=0, le=1, description="roll out a prompt whose last k groups had zero reward variance with "
        "probability max(floor, 2^-k) (rftbus/producers/no_signal.py); None = always")
    no_signal_min_group: int | None = Field(
        None, ge=2, description="with no_signal_floor: a prompt whose last k groups had zero reward variance "
        "gets a group of n·2^-k samples, at least this many (adaptive group size); None = always n")
    threads: int | None = Field(None, ge=1, description="torch threads of each explorer `rftbus run` starts; None: "
                                "half the cores the run may use, shared among the explorers (run/cores.py: a "
                                "64-answer step's generation and training cost about the same on one core each)")
    batch_tasks: int = Field(1, ge=1, description="single-turn tasks generated together in one engine call "
                             "(those already fetched, within admission's headroom); each is still its own group, "
                             "produced and committed as before. On CPU 8 gives about 3x the samples/s of 1")
    expert: bool = Field(False, description="also publish the taskset's expert demonstration per task")
    static_membership: bool = Field(
        False, description="join the explorers' group as a static member (group.instance.id from the explorer "
        "id, which must then be set): a restarted explorer gets its task partitions back at once instead of "
        "after the session timeout, but a stopped one holds them until that timeout. `rftbus run` turns it "
        "on for the explorers it supervises")
    status_interval_s: float = Field(1.0, gt=0, description="seconds between status-file writes")
    max_tasks: int | None = Field(None, ge=1, description="stop after this many tasks (benchmarks, tests)")
    idle_exit_s: float | None = Field(None, gt=0, description="exit after this long with no new task")


class FieldMap(_Strict):
    """Which column of a JSONL/Parquet/CSV/HF dataset row feeds which Task field."""

    prompt: str = Field("prompt", description="the column holding the prompt text")
    messages: str | None = Field(None, description="a column of chat messages ([{role, content}, ...]) rendered "
                                 "by the model's chat template instead of `prompt`")
    answer: str | None = Field("answer", description="the column holding the reference answer (for rewards); null: "
                               "none")
    task_id: str | None = Field(None, description="unset = stable id from (taskset, prompt)")
    workflow: str | None = Field(None, description="a column naming a row's own workflow (dotted path)")
    n_samples: str | None = Field(None, description="a column with a row's own number of answers (group size)")
    priority: str | None = Field(None, description="a column with a row's priority (higher first in the curriculum)")
    metadata: list[str] | None = Field(None, description="columns copied into Task.metadata and handed to rewards "
                                       "with their types (task.columns(); TRL-style rewards as keyword lists); "
                                       "unset: every column no other field maps")


class EvalSplitConfig(_Strict):
    """Where a data taskset's held-out tasks come from: a file, a named split, else a fraction of the source."""

    path: str | None = Field(None, description="a file or folder of eval rows (same format and fields as the data)")
    split: str | None = Field(None, description="a named split of the source (HF dataset folder or hub id), "
                              "e.g. test")
    fraction: float = Field(0.1, ge=0, lt=1, description="without path or split: this share of the source, chosen "
                            "by a seeded hash of each task, is eval and never train")
    seed: int = Field(0, description="seed of the hash that picks the held-out fraction")


class TasksetConfig(_Strict):
    """The tasks: a built-in taskset, or data (JSONL, Parquet, CSV, a dataset folder or hub id)."""

    name: str = Field("addition", description="a built-in taskset (addition, reverse, times), or the data's name")
    path: str | None = Field(None, description="the data: a JSONL/Parquet/CSV file, a Hugging Face save_to_disk "
                             "folder, or a hub dataset id (format: hub); unset: `name` is a built-in (or a path)")
    format: Literal["auto", "jsonl", "parquet", "csv", "hf", "hub"] = Field("auto", description="how `path` is read; "
                                                                            "auto: by its suffix (a folder: a Hugging "
                                                                            "Face dataset)")
    subset: str | None = Field(None, description="a hub dataset's configuration name (openai/gsm8k: main)")
    params: dict[str, Any] = Field(default_factory=dict, description="built-in taskset parameters")
    fields: FieldMap = FieldMap()
    system_prompt: str | None = Field(None, description="a system message before every task's prompt (needs a chat "
                                      "template)")
    template: str | None = Field(None, description="a Jinja template over the row's columns that makes the prompt, "
                                 "e.g. 'Solve step by step, end with #### and the answer.\\n{{ question }}'")
    eval: EvalSplitConfig = EvalSplitConfig()
    split: str = Field("train", description="the data's split to train on (HF dataset folder or hub id)")
    n: int = Field(64, ge=1, description="built-in tasksets: how many tasks to publish")
    seed: int = Field(0, description="built-in tasksets: seed of the tasks drawn")
