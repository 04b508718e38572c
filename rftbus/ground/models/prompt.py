"""The one prompt renderer: a task or a chat request becomes prompt ids the same way everywhere.

Explorers, demonstrations, `serve`, held-out eval and corrections all call `PromptFormat`, so what an answer
was generated from is byte for byte what it trains on (a test compares every path with SmolLM2's tokenizer).
With a chat template: the template renders the conversation with the generation prompt, and the text is
tokenized without adding special tokens (the template writes its own, so BOS appears exactly once). Without
one (the tiny model, base models): the text as-is, with the tokenizer's own special tokens (a Llama-style
BOS). Generation stops on every id of the generation config's `eos_token_id`, the tokenizer's eos and the
template's end-of-turn token (SmolLM2's GGUF names `<|im_start|>` as eos; its turns end at `<|im_end|>`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from rftbus.ground.models.config import ModelConfig
from rftbus.ground.models.source import ModelError
from rftbus.ground.models.tool_calls import ToolCallError, for_template, template_renders_tools

_PROBE = "\x00rftbus-probe\x00"


def _ids(enc: Any) -> list[int]:
    """transformers 5.x returns a BatchEncoding where 4.x returned a list: take the ids either way."""
    if hasattr(enc, "keys") and "input_ids" in enc.keys():
        enc = enc["input_ids"]
    return [int(i) for i in enc]


@dataclass
class PromptFormat:
    tokenizer: Any
    template: bool
    system_prompt: str | None = None
    stop_ids: list[int] = field(default_factory=list)
    end_of_turn: int | None = None  # appended to a demonstration's response (the token the model ends a turn with)
    vision: Any = None  # a VLM's Vision (models/vision.py): a prompt's images expanded into its ids; None: text only

    @classmethod
    def for_model(cls, tokenizer: Any, cfg: ModelConfig, generation_eos: int | list[int] | None = None) -> PromptFormat:
        has = bool(getattr(tokenizer, "chat_template", None))
        if cfg.chat_template and not has:
            raise ModelError(f"model.chat_template is true but the tokenizer of {cfg.path or cfg.name} has no chat "
                             "template (set model.chat_template: false to send prompts as plain text)")
        use = has if cfg.chat_template is None else cfg.chat_template
        if cfg.system_prompt is not None and not use:
            raise ModelError("model.system_prompt needs a chat template (the tokenizer has none, or "
                             "model.chat_template is false)")
        fmt = cls(tokenizer, use, cfg.system_prompt)
        fmt.end_of_turn = fmt._end_of_turn() if use else tokenizer.eos_token_id
        stops: list[int] = []
        gen = [generation_eos] if isinstance(generation_eos, int) else list(generation_eos or [])
        for i in [fmt.end_of_turn, *gen, tokenizer.eos_token_id]:
            if isinstance(i, int) and i not in stops:
                stops.append(i)
        fmt.stop_ids = stops
        return fmt

    def _end_of_turn(self) -> int | None:
        """The first token the template writes after an assistant's content (ChatML's `<|im_end|>`)."""
        text = self.tokenizer.apply_chat_template(
            [{"role": "user", "content": "x"}, {"role": "assistant", "content": _PROBE}], tokenize=False)
        after = text.split(_PROBE, 1)[1] if _PROBE in text else ""
        ids = _ids(self.tokenizer(after, add_special_tokens=False)["input_ids"]) if after else []
        if ids and ids[0] in set(self.tokenizer.all_special_ids) | set(getattr(self.tokenizer, "added_tokens_decoder", {})):
            return ids[0]
        return self.tokenizer.eos_token_id

    # -- prompts ----------------------------------------------------------------------------------
    def messages(self, msgs: list[dict[str, Any]], tools: list[dict] | None = None) -> tuple[list[int], str]:
        """(prompt ids, prompt text) of a conversation, ready for the assistant's next turn. Tool calls and
        results are rendered by the template, or in the Hermes convention where it has none (tool_calls.py)."""
        if self.template:
            if self.system_prompt is not None and not (msgs and msgs[0].get("role") == "system"):
                msgs = [{"role": "system", "content": self.system_prompt}, *msgs]
            native = template_renders_tools(self.tokenizer)
            msgs = for_template(msgs, tools, native)
            text = self.tokenizer.apply_chat_template(msgs, tools=tools if native and tools else None,
                                                      add_generation_prompt=True, tokenize=False)
            return _ids(self.tokenizer(text, add_special_tokens=False)["input_ids"]), text
        if tools or any(m.get("tool_calls") or m.get("role") == "tool" for m in msgs):
            raise ToolCallError("tools need a chat template (the tokenizer has none, or model.chat_template is false)")
        if len(msgs) == 1 and msgs[0].get("role") == "user":
            text = str(msgs[0].get("content") or "")
        else:  # no template: `role: text` lines, the assistant's turn open
            text = "\n".join(f"{m['role']}: {m.get('content') or ''}" for m in msgs) + "\nassistant: "
        return self.text(text), text

    def observation(self, content: str, role: str = "user", ended: bool = True) -> list[int]:
        """The tokens that follow an assistant's turn to hand the model `content` (an environment's observation,
        a tool's result) and open its next turn, as the template frames them; `ended`: the turn's ids already
        end with its end-of-turn token. Without a template: the content's tokens as they are."""
        if not self.template:
            return _ids(self.tokenizer(content, add_special_tokens=False)["input_ids"])
        msgs = for_template([{"role": "user", "content": "x"}, {"role": "assistant", "content": _PROBE},
                             {"role": role, "content": content}], None, template_renders_tools(self.tokenizer))
        text = self.tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
        after = text.split(_PROBE, 1)[1]
        ids = _ids(self.tokenizer(after, add_special_tokens=False)["input_ids"])
        if ended and ids and ids[0] == self.end_of_turn:
            ids = ids[1:]
        return ids

    def task(self, prompt: str) -> list[int]:
        """A task's prompt (one user message) as prompt ids."""
        return self.messages([{"role": "user", "content": prompt}])[0]

    def of_task(self, task: Any) -> list[int]:
        """A Task's prompt ids: its chat messages when it has them (a data taskset's system prompt and
        few-shot turns), else its prompt as one user message; its images, if any, shown in the last user turn."""
        msgs = task.messages or [{"role": "user", "content": task.prompt}]
        if getattr(task, "images", None):
            return self.with_images(msgs, task.images)[0]
        return self.messages(task.messages)[0] if task.messages else self.task(task.prompt)

    def with_images(self, msgs: list[dict[str, Any]], images: list[Any]) -> tuple[list[int], str]:
        """(prompt ids, prompt text) of a conversation whose last user turn shows `images` (Image records): the
        template's image parts (or one placeholder per image before the text, without a template), each expanded
        by the model's processor into as many image tokens as the model has image features."""
        if self.vision is None:
            raise ModelError(f"the prompt shows {len(images)} image(s) but the model reads text only "
                             "(set model.tiny.vision, or model.path to a vision-language model)")
        last = max((k for k, m in enumerate(msgs) if m.get("role") == "user"), default=None)
        if last is None:
            raise ModelError("a prompt with images needs a user turn to show them in")
        n = len(images)
        if self.template:
            if self.system_prompt is not None and not (msgs and msgs[0].get("role") == "system"):
                msgs = [{"role": "system", "content": self.system_prompt}, *msgs]
                last += 1
            parts = [dict(m) for m in msgs]
            parts[last]["content"] = self.vision.content(str(msgs[last].get("content") or ""), n)
            renderer = self.vision.processor if getattr(self.vision.processor, "chat_template", None) else self.tokenizer
            text = renderer.apply_chat_template(parts, add_generation_prompt=True, tokenize=False)
        else:
            shown = [dict(m) for m in msgs]
            shown[last]["content"] = self.vision.plain(str(msgs[last].get("content") or ""), n)
            if len(shown) == 1:
                text = str(shown[0]["content"])
            else:
                text = "\n".join(f"{m['role']}: {m.get('content') or ''}" for m in shown) + "\nassistant: "
        return self.vision.expand(text, images), text

    def text(self, text: str) -> list[int]:
        """Plain text as the model reads it (a completion prompt): the tokenizer's special tokens included."""
        return _ids(self.tokenizer(text)["input_ids"])

    # -- responses --------------------------------------------------------------------------------
    def response(self, text: str, ended: bool = True) -> list[int]:
        """A written answer (a demonstration, a correction, a traced call's) as response ids: its tokens and, when
        the turn `ended` (not cut at a length limit), the end of turn."""
        ids = _ids(self.tokenizer(text, add_special_tokens=False)["input_ids"])
        return ids + ([self.end_of_turn] if ended and self.end_of_turn is not None else [])

    def cut(self, ids: list[int]) -> tuple[list[int], str]:
        """Generated ids up to and including the first stop id (kept for the loss mask) and finish reason."""
        for k, i in enumerate(ids):
            if i in self.stop_ids:
                return ids[: k + 1], "stop"
        return ids, "length"

    def decode(self, ids: list[int]) -> str:
        """A response's text: stop and other special tokens dropped."""
        return self.tokenizer.decode(ids, skip_special_tokens=True)


def default_task_id(prompt_ids: list[int]) -> str:
    """Live prompts that repeat share a task id, so the streams' per-task baseline sees them as one task (serve's
    answers and traced ones alike: the same prompt ids, the same id)."""
    return "live:" + hashlib.sha256(b"".join(t.to_bytes(4, "little", signed=False) for t in prompt_ids)).hexdigest()[:24]


def prompt_format(tokenizer: Any, cfg: ModelConfig) -> PromptFormat:
    """The PromptFormat of the configured model (its generation config's stop ids included); a run's, whose
    vision-language model shows a task's images, is rftbus.ground.prompting.run_prompt_format."""
    from rftbus.ground.models.source import model_folder

    eos = None
    folder = model_folder(cfg)
    if folder is not None:
        from rftbus.ground.models.loading import generation_config

        eos = generation_config(folder, cfg).eos_token_id
    return PromptFormat.for_model(tokenizer, cfg, eos)
