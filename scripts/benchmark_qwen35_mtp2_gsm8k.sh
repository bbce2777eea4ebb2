#!/usr/bin/env bash
# Paired GSM8K regression of the non-frontier Qwen3.5-35B-A3B MTP2 preset
# (qwen35-35b-a3b-mtp2): the frontier script with another default preset; same flags and
# variables (see benchmark_qwen35_frontier_mtp2_gsm8k.sh), default gate 1.10x.
#   scripts/benchmark_qwen35_mtp2_gsm8k.sh [pair] [bench pair flags] [-- vllm serve args]
set -euo pipefail
[[ "${1:-}" == "pair" ]] && shift
export VSPEC_BENCH_PRESET="${VSPEC_BENCH_PRESET:-qwen35-35b-a3b-mtp2}"
exec "$(dirname "${BASH_SOURCE[0]}")/benchmark_qwen35_frontier_mtp2_gsm8k.sh" pair "$@"
