"""Model-based judge: a Hugging Face sequence-classification reward model scores (prompt, response).

One label: reward = sigmoid(logit) (or the raw logit with `raw=True`); several labels: the softmax
probability of `positive_label`. Loaded once per explorer process, on CPU unless `device` says so.
"""

from __future__ import annotations

import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from rftbus.ground.rewards.base import RewardFn
from rftbus.ground.schemas import Task


class RewardModelJudge(RewardFn):
    name = "judge_model"

    def __init__(self, path: str, device: str = "cpu", positive_label: int = 1, raw: bool = False,
                 max_length: int = 512):
        self.tok = AutoTokenizer.from_pretrained(path)
        self.model = AutoModelForSequenceClassification.from_pretrained(path).to(device).eval()
        self.device, self.positive_label, self.raw, self.max_length = device, positive_label, raw, max_length

    @torch.inference_mode()
    def __call__(self, task: Task, response: str) -> dict[str, float]:
        enc = self.tok(task.prompt, response, return_tensors="pt", truncation=True, max_length=self.max_length)
        logits = self.model(**{k: v.to(self.device) for k, v in enc.items()}).logits[0].float()
        if logits.numel() == 1:
            logit = float(logits[0])
            return {"reward": logit if self.raw else float(torch.sigmoid(logits[0])), "logit": logit}
        return {"reward": float(torch.softmax(logits, -1)[self.positive_label])}
