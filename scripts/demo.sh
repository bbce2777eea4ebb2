#!/usr/bin/env bash
# What vSpec does, side by side: set up (cached), then for two bundled tiny model pairs start a
# target-only `vllm serve` and a vSpec one (preset cpu-tiny, adaptive gamma 0..4) on 127.0.0.1,
# send both the same closed-loop load (same prompts, 8 in flight, arms alternating, warm-up
# excluded), stop them, and print a table: tokens/s of each arm, the ratio, the gamma the
# controller settled on; plus the path of a figure (throughput per round, gamma per step).
#   pair 1, where speculation pays: --target-model vspec-tiny/target-deep
#           --draft-model vspec-tiny/draft-cheap-agree (expected vSpec >= 1.3x target-only)
#   pair 2, where it does not: cpu-tiny as is (the controller settles on gamma 0; >= 0.9x)
# Results, server logs and controller traces go to .cache/demo/. A few minutes on 2 cores.
#   ./scripts/demo.sh [--rounds N] [--num-prompts N] [--output-len N] [-- vllm-hust-vspec flags]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
./scripts/setup.sh
export HUST_VSPEC_MODEL_DIR="$root/.cache/models"
exec .venv/bin/python scripts/demo_side_by_side.py --out "$root/.cache/demo" "$@"
