"""A run's weight version as a Hugging Face folder that `model.path` accepts.

The trainer publishes plain transformers state dicts (`<store>/<model>/v<N>.safetensors`). Exporting
loads one into the architecture the config builds (`load_policy`, strict: every key and shape must
match), then writes `save_pretrained` weights, the tokenizer and `rftbus-export.json` (where the
weights came from). The folder is read back with `from_pretrained` and compared tensor by tensor
before the export counts as done, so a later run that starts from it starts from exactly version N.
"""

from __future__ import annotations

import copy
import json
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from rftbus.ground.config import Config
from rftbus.ground.errors import RftbusError
from rftbus.ground.schemas import WeightVersion

MANIFEST = "rftbus-export.json"
ADAPTER = "adapter"


class ExportError(RftbusError):
    """The weights cannot be found, verified or written as a Hugging Face folder."""


@dataclass
class ExportReport:
    out: str
    model: str
    version: int | None
    source: str
    sha256: str
    verified: str  # how the file was checked against what the trainer published
    parameters: int
    seconds: float
    adapter: str | None = None  # a LoRA version: the PEFT adapter folder inside `out`, beside the merged model


def published_versions(cfg: Config) -> dict[int, WeightVersion] | None:
    """WeightVersion records for cfg.model.name on the weights topic by version; None without a broker."""
    from rftbus.ground.kafka.clients import BrokerUnreachable, check_reachable
    from rftbus.ground.weights.follower import published

    try:
        check_reachable(cfg, timeout=3)
    except BrokerUnreachable:
        return None
    return dict(published(cfg))


def export_weights(cfg: Config, out: Path, version: int | None = None, weights_file: Path | None = None,
                   force: bool = False) -> ExportReport:
    """Write version `version` (default: the newest in the store) or `weights_file` to `out`."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rftbus.ground.models.loading import dtype_name, load_policy, load_tokenizer
    from rftbus.ground.models.lora import is_peft, load_version
    from rftbus.ground.weights import WeightsError, WeightStore, decode_payload, sha256_hex

    t0 = time.monotonic()
    out = Path(out)
    if out.exists() and any(out.iterdir()) and not force:
        raise ExportError(f"{out} exists and is not empty (--force replaces it)")
    if weights_file is not None:
        src, uri = Path(weights_file), str(weights_file)
        if not src.is_file():
            raise ExportError(f"weights file {src} does not exist")
        data = src.read_bytes()
    else:
        from rftbus.ground.weights.store_transport import store_url

        store = WeightStore(store_url(cfg))
        have = store.versions(cfg.model.name)
        if not have:
            raise ExportError(f"no weight versions of model {cfg.model.name!r} in {store.base}")
        if version is None:
            version = have[-1]
        elif version not in have:
            near = ", ".join(f"v{v}" for v in have[-8:])
            raise ExportError(f"v{version} of {cfg.model.name!r} is not in {store.base} "
                              f"(garbage-collected or never published; newest kept: {near})")
        uri = store.uri(cfg.model.name, version)
        with store.fs.open(uri.removeprefix("file://") if store.local else uri, "rb") as f:
            data = f.read()
    sha = sha256_hex(data)

    verified = "not checked: exported from a file"
    if weights_file is None:
        records = published_versions(cfg)
        if records is None:
            verified = "not checked: broker unreachable"
        elif version not in records:
            verified = f"not checked: v{version} is not on {cfg.topics.weights.name} (compacted away?)"
        elif records[version].sha256 != sha:
            raise ExportError(f"{uri} has sha256 {sha[:12]}…, but {records[version].sha256[:12]}… was published")
        else:
            verified = f"sha256 matches the WeightVersion on {cfg.topics.weights.name}"

    try:
        payload = decode_payload(data, uri)
    except WeightsError as e:
        raise ExportError(str(e)) from None
    tok = load_tokenizer(cfg.model)
    model = load_policy(cfg.model, tok)
    try:
        model = load_version(model, payload)
    except (RuntimeError, RftbusError) as e:
        raise ExportError(f"{uri} does not fit the configured model ({cfg.model.path or cfg.model.name}): "
                          f"{str(e).splitlines()[0]}") from None
    adapter = None
    if is_peft(model):  # a LoRA version: the merged model (what `model.path` loads) and the adapter folder
        adapter, model = model, copy.deepcopy(model).merge_and_unload()

    tmp = out.with_name(out.name + ".tmp-export")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    model.save_pretrained(tmp, safe_serialization=True)
    tok.save_pretrained(tmp)
    report = ExportReport(out=str(out), model=cfg.model.name, version=version, source=uri, sha256=sha,
                          verified=verified, parameters=sum(p.numel() for p in model.parameters()),
                          seconds=0.0, adapter=ADAPTER if adapter is not None else None)
    (tmp / MANIFEST).write_text(json.dumps({k: v for k, v in asdict(report).items() if k not in ("out", "seconds")},
                                           indent=2) + "\n")

    # Read it back the way `model.path` will, and compare every tensor and the tokenizer.
    back = AutoModelForCausalLM.from_pretrained(tmp, dtype=getattr(torch, dtype_name(cfg.model)))
    want, got = model.state_dict(), back.state_dict()
    bad = [k for k in want if k not in got or not torch.equal(want[k], got[k])]
    if bad:
        shutil.rmtree(tmp, ignore_errors=True)
        raise ExportError(f"the exported folder does not read back as the same weights ({bad[:3]})")
    if adapter is not None:
        try:
            _write_adapter(adapter, tmp / ADAPTER, cfg)
        except ExportError:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    tok_back = AutoTokenizer.from_pretrained(tmp)
    probe = "37+45=82"
    if tok_back(probe, add_special_tokens=False)["input_ids"] != tok(probe, add_special_tokens=False)["input_ids"]:
        shutil.rmtree(tmp, ignore_errors=True)
        raise ExportError("the exported tokenizer encodes differently from the configured one")

    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)
    report.seconds = round(time.monotonic() - t0, 2)
    return report


def _write_adapter(adapter, folder: Path, cfg: Config) -> None:
    """The PEFT adapter folder (`PeftModel.from_pretrained(base, folder)`), read back onto a fresh base model and
    compared tensor by tensor before it counts."""
    import torch
    from peft import PeftModel, get_peft_model_state_dict

    from rftbus.ground.models.loading import load_policy, load_tokenizer

    adapter.save_pretrained(folder)
    back = PeftModel.from_pretrained(load_policy(cfg.model, load_tokenizer(cfg.model)), folder)
    want, got = get_peft_model_state_dict(adapter), get_peft_model_state_dict(back)
    bad = [k for k in want if k not in got or not torch.equal(want[k], got[k])]
    if bad or set(got) != set(want):
        raise ExportError(f"the adapter folder does not read back as the same adapter ({bad[:3]})")
