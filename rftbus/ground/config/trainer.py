"""The `trainer:` config section (pydantic only: no heavy imports here)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from rftbus.ground.models.devices import DESCRIBED, check_spec

from rftbus.ground.models.config import LoraSpec
from rftbus.ground.models.lineage import check_lineage


class TrainerConfig(BaseModel):
    """The DeepSpeed trainer: the loss, the optimizer, checkpoints, weight versions and its loop."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    group_id: str = Field("rftbus-trainer", description="the trainer's Kafka consumer group (its offsets live in its "
                          "checkpoints)")
    lineage: str = Field("", description="whose weight versions these are: empty for the run's first trainer; "
                         "another trainer on the same stream (run.trainers) publishes under <model>@<lineage>, "
                         "so the promotion gate can choose among several trainers' versions (rftbus/ground/models/"
                         "lineage.py)")
    id: str | None = Field(None, description="status-file id; default the process rank")

    # What is learned.
    loss: str = Field("grpo", min_length=1, description="the loss: a built-in (grpo, ppo, mix = GRPO + SFT on "
                      "demonstrations, sft, dpo; rftbus/trainer/losses/), an entry point in rftbus.losses, or "
                      "module:Class, a subclass of rftbus.trainer.losses.Loss")
    zero_stage: int = Field(1, ge=0, le=3, description="DeepSpeed ZeRO stage")
    device: str = Field("auto", description=f"{DESCRIBED}: auto is every GPU there is (a rank each), else the CPU; "
                        "cuda:N,M gives rank i the i-th listed GPU (the others are not shown to the trainer)")
    precision: Literal["auto", "fp32", "bf16"] = Field(
        "auto", description="auto: bf16 on a CUDA GPU that supports it (fp32 master weights in DeepSpeed's "
        "optimizer), fp32 elsewhere")
    lora: LoraSpec | None = Field(None, description="train a LoRA adapter (PEFT) instead of every weight: each "
                                  "weight version is the adapter (MBs, not the model); unset = full fine-tuning")
    gradient_checkpointing: bool = Field(False, description="recompute activations in backward (long responses)")
    micro_batch_tokens: int | None = Field(None, ge=2, description="cut each batch into micro-batches of at most "
                                           "this many padded tokens, gradients accumulated (rftbus/trainer/micro.py)")
    lr: float = Field(1e-3, gt=0, description="AdamW learning rate (5e-4 suits LoRA on a 135M model; full weights want "
                      "less)")
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay")
    warmup_steps: int = Field(0, ge=0, description="linear LR warm-up, in optimizer steps")
    lr_decay_steps: int | None = Field(None, ge=1, description="after warm-up, cosine decay of the LR to "
                                       "lr·lr_min_ratio over this many optimizer steps (update_epochs per "
                                       "trainer step), flat after; None = constant")
    lr_min_ratio: float = Field(0.1, ge=0, le=1, description="the cosine decay's floor, as a share of lr")
    grad_clip: float = Field(1.0, ge=0, description="0 = off")
    update_epochs: int = Field(1, ge=1, description="optimizer steps per batch (PPO-style reuse)")
    seed: int = Field(0, description="torch's seed in the trainer")
    threads: int | None = Field(None, ge=1, description="torch intra-op threads of a trainer `rftbus run` starts (its "
                                "OMP_NUM_THREADS); None: the cores the run may use less the explorers' threads "
                                "(run/cores.py), so no two stages share a core")

    # Policy-gradient knobs.
    clip_low: float = Field(0.2, ge=0, description="ratio clip 1 - clip_low")
    clip_high: float = Field(0.2, ge=0, description="ratio clip 1 + clip_high")
    off_policy: Literal["auto", "none", "tis", "decoupled"] = Field(
        "auto", description="correction with the behaviour logprobs; auto = decoupled when η > 0, else none")
    is_cap: float = Field(2.0, gt=0, description="truncation C of the behaviour importance weight")
    late_m2_tau: float = Field(0.04, gt=0, description="rows staler than rl.max_staleness (late grades): their "
                               "tokens with the largest (log π_prox/π_behav)² are masked until the rest's mean is "
                               "<= this (M2PO's second-moment trust region; rftbus/trainer/losses/m2.py)")
    kl_coef: float | None = Field(None, ge=0, description="KL to the frozen reference; default 0.05 for ppo, else 0")
    entropy_coef: float = Field(0.0, ge=0, description="weight of an entropy bonus in the policy loss (0 = off)")
    kl_cov_ratio: float = Field(0.0, ge=0, le=1, description="KL-Cov: the share of trained tokens with the largest "
                                "logprob-advantage covariance held near the proximal policy (entropy collapse); 0 = off")
    kl_cov_coef: float = Field(1.0, ge=0, description="KL-Cov: weight of their |logp - logp_prox| penalty")
    advantage_norm: Literal["none", "batch"] = Field(
        "none", description="batch: whiten the RL rows' advantages across each step's batch (rftbus/trainer/batch.py::"
        "whiten_advantages): lone live answers' r - baseline, small and lagging, weigh like a group's")
    mix_mu: float = Field(0.1, ge=0, le=1, description="μ: loss = (1-μ)·GRPO(usual) + μ·SFT(expert)")
    mix_expert_per_batch: int | None = Field(None, ge=0, description="expert experiences per MIX batch; default B")
    mix_min_groups: int | None = Field(None, ge=1, description="MIX: step once this many RL groups (≤ B) are "
                                       "ready while demonstrations wait; default B (always wait for B)")
    demo_replay: int = Field(0, ge=0, description="mix / sft: demonstrations kept once trained and drawn again "
                             "beside each batch (rftbus/trainer/replay.py): scarce corrections count many times; 0 = off")
    demo_replay_per_step: int = Field(64, ge=1, description="demonstrations drawn from the replay pool per step")
    step_wait_s: float | None = Field(None, gt=0, description="step with the RL groups that are ready (at least "
                                      "one) once this long has passed since the last step, instead of waiting "
                                      "for B: a steady step rate when streams drop most groups; None = wait for B")
    dpo_beta: float = Field(0.1, gt=0, description="dpo: β, the strength of the implicit KL to the reference")
    gamma: float = Field(1.0, ge=0, le=1, description="ppo: discount of GAE")
    gae_lambda: float = Field(0.95, ge=0, le=1, description="ppo: λ of GAE")
    vf_coef: float = Field(0.5, ge=0, description="ppo: weight of the value loss")
    max_seq_len: int | None = Field(None, ge=2, description="default: the model's max_position_embeddings")

    # Checkpoints, weights, lineage.
    checkpoint_dir: str | None = Field(None, description="default <state_dir>/checkpoints")
    checkpoint_interval: int = Field(1, ge=1, description="steps between checkpoints (every publish also checkpoints)")
    keep_checkpoints: int = Field(2, ge=1, description="checkpoints kept on disk (older ones deleted)")
    store_url: str | None = Field(None, description="weight store, any fsspec URL; default <state_dir>/weights")
    weights_transport: str = Field("store", min_length=1, description="how a weight version's bytes reach the "
                                   "explorers, serve and the evaluator (its WeightVersion record on the weights topic "
                                   "announces it either way): store = safetensors files in store_url; or an entry "
                                   "point in rftbus.weight_transports, or module:Class, a subclass of rftbus.ground."
                                   "weights.transport.WeightTransport")
    keep_versions: int = Field(4, ge=1, description="weight versions kept in the store (see weights_gc.py)")
    max_version_jump: int = Field(1000, ge=1, description="a weight record more than this many versions ahead of the "
                                  "newest one a process believes is refused (a forged record must not become every "
                                  "follower's latest: rftbus/ground/weights/admit.py)")
    gc_grace_s: float = Field(60.0, ge=0, description="a superseded version survives at least this long")

    max_abs_advantage: float = Field(100.0, gt=0, description="a sample with |advantage| above this is rejected "
                                     "advantage_out_of_bounds before the step (a finite 1e308 still makes the loss inf)")
    max_abs_reward: float = Field(1e4, gt=0, description="likewise |reward| (reward_out_of_bounds)")
    logprob_tolerance: float = Field(1e-3, ge=0, description="a behaviour logprob above this (a log-probability is "
                                     "<= 0) is rejected logprob_out_of_bounds")
    dedupe_window: int = Field(2_000_000, ge=1, description="experience ids the trainer remembers as decided "
                               "(rftbus/trainer/dedupe.py): a repeat among them is rejected `duplicate`, never trained twice")

    # Loop.
    staleness_for_expert: bool = Field(False, description="apply η to the expert lane too (demos have no behaviour policy)")
    poll_timeout_s: float = Field(0.2, gt=0, description="seconds one poll of the curated topics waits")
    max_pending_groups: int | None = Field(None, ge=1, description="buffer cap before lanes pause; default 4·B")
    max_steps: int | None = Field(None, ge=1, description="stop after this many steps (counting from the checkpoint)")
    idle_exit_s: float | None = Field(None, gt=0, description="exit after this long with no trainable batch")
    hold_at_step: int | None = Field(None, ge=1, description="begin no step past this one (the step count, not "
                                     "since the checkpoint) and wait: `rftbus run --max-steps` sets it, so no step "
                                     "is in flight when the run stops it (a real model's step can outlast the stop's "
                                     "grace, and a kill between checkpoint and publish leaves a version unpublished)")
    status_interval_s: float = Field(1.0, gt=0, description="seconds between status-file writes")
    eval_interval: int = Field(0, ge=0, description="steps between evals on the held-out split; 0 = off")
    eval_n: int = Field(16, ge=1, description="held-out tasks the trainer's own eval (eval_interval, `rftbus eval`) "
                        "scores")
    eval_max_new_tokens: int | None = Field(None, ge=1, description="new tokens a held-out eval answer may have "
                                            "(the run's eval, the trainer's, `rftbus eval`); None: the explorers' "
                                            "explorer.sampling.max_new_tokens")

    @field_validator("lineage")
    @classmethod
    def _lineage(cls, v: str) -> str:
        return check_lineage(v)

    @field_validator("device")
    @classmethod
    def _device(cls, v: str) -> str:
        return check_spec(v)

    @model_validator(mode="after")
    def _lora_not_sharded(self) -> TrainerConfig:
        if self.lora is not None and self.zero_stage == 3:
            raise ValueError("lora with zero_stage 3 is not supported (the adapter is a few MB: ZeRO 0-2 hold it "
                             "whole); use zero_stage 0, 1 or 2")
        return self

    @model_validator(mode="after")
    def _replay_needs_demonstrations(self) -> TrainerConfig:
        if self.demo_replay and self.loss in ("grpo", "ppo", "dpo"):  # (a loss of one's own: checked in make_loss)
            raise ValueError(f"demo_replay replays demonstrations (the expert lane), which loss {self.loss!r} does "
                             "not read: use loss mix or sft, or demo_replay: 0")
        return self

    @model_validator(mode="after")
    def _norm_needs_advantages(self) -> TrainerConfig:
        if self.advantage_norm != "none" and self.loss in ("ppo", "sft", "dpo"):
            raise ValueError(f"advantage_norm {self.advantage_norm!r} scales the streams' advantages, which loss "
                             f"{self.loss!r} does not use (ppo whitens its own): use loss grpo or mix, or "
                             "advantage_norm: none")
        return self
