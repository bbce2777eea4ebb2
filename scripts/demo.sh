#!/usr/bin/env bash
# What vSpec does, side by side: set up (cached), then, for two bundled tiny model pairs, serve
# target-only and vSpec (`vllm serve`, preset cpu-tiny, adaptive gamma 0..4) on 127.0.0.1, send
# each arm the same closed-loop load (same prompts, 8 requests in flight, arms alternating,
# warm-up excluded), stop the servers, and print a table: tokens/s of each arm, the ratio, the
# gamma the controller settled on, and the path of a figure (tokens/s and gamma per round).
#   the pair where speculation pays: --target-model vspec-tiny/target-deep
#       --draft-model vspec-tiny/draft-cheap-agree (expected: vSpec >= 1.3x target-only)
#   the pair where it does not: the preset's target + draft (gamma settles on 0; >= 0.9x)
# Both arms' workers run one OpenMP thread (the preset's). Results, server logs and
# summary.json go to .cache/demo/. About 3.5 minutes on 2 cores once set up, 6 on a fresh machine
# (setup.sh --demo builds only the models the demo serves).
#   ./scripts/demo.sh [--rounds N] [--num-prompts N] [--output-len N] [--strict] [-- pair flags]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
./scripts/setup.sh --demo
export HUST_VSPEC_MODEL_DIR="$root/.cache/models"
exec .venv/bin/python scripts/demo_side_by_side.py --out "$root/.cache/demo" "$@"
