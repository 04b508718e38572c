#!/usr/bin/env bash
# Wheels of what the GPU suite needs beyond torch and transformers, for a CUDA machine with no network
# (tests/gpu/README.md). Into .whl/ (ignored by git); python 3.12, manylinux x86_64, no dependencies
# resolved there: every package is named here with the version constraints.txt pins.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .whl
pins() { for name in "$@"; do grep -i "^${name}==" constraints.txt; done; }
wanted=$(pins pydantic pydantic_core annotated-types click shellingham markdown-it-py mdurl Pygments typing_extensions packaging typing-inspection hjson ninja py-cpuinfo \
              msgpack psutil einops confluent-kafka fastavro pyyaml typer rich safetensors numpy)
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform any -d .whl $wanted
# deepspeed ships only an sdist: build its wheel here (pure Python until its ops are JIT-built there)
ds=$(pins deepspeed)
python3 -m pip wheel -q --no-deps --no-build-isolation -w .whl "$ds"
ls .whl
