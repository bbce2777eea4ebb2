#!/usr/bin/env bash
# Paired GSM8K regression of the Qwen3.5-35B-A3B frontier MTP2 protocol: a target-only and an
# adaptive-MTP2 server from the SAME preset, interleaved runs, medians, and a throughput gate.
# A thin wrapper over `vllm-hust-vspec-bench pair` (docs/benchmarks.md); exits 1 under the gate.
#
#   scripts/benchmark_qwen35_frontier_mtp2_gsm8k.sh pair [bench pair flags] [-- vllm serve args]
#   scripts/benchmark_qwen35_frontier_mtp2_gsm8k.sh pair --dry-run
#
# Variables (flags after `pair` win over them):
#   VSPEC_GSM8K_DATASET  local GSM8K JSONL ("question" lines; nothing is downloaded), required
#   VSPEC_MIN_SPEEDUP    gate on median adaptive / target-only output throughput (1.10)
#   VSPEC_BENCH_PRESET   preset of both servers (qwen35-frontier-mtp2)
#   VSPEC_TARGET_MODEL   target model folder (default: the preset's, looked up locally)
#   VSPEC_MAX_CONCURRENCY requests in flight (16: the B16 protocol)
#   VSPEC_RESULT_DIR     where results go (default ./vspec-bench/pair-<time>)
#   VSPEC_BENCH          the bench command (default vllm-hust-vspec-bench, else this checkout's)
set -euo pipefail
prog="$(basename "$0")"
if [[ "${1:-}" != "pair" ]]; then
    echo "usage: $prog pair [vllm-hust-vspec-bench pair flags] [-- vllm serve args]" >&2
    exit 2
fi
shift
if [[ -z "${VSPEC_GSM8K_DATASET:-}" ]] && [[ " $* " != *" --dataset-path "* ]]; then
    echo "$prog: error: set VSPEC_GSM8K_DATASET=/path/to/gsm8k-test.jsonl (or pass" \
         "--dataset-path FILE.jsonl): the local GSM8K file both arms read" >&2
    exit 2
fi
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [[ -n "${VSPEC_BENCH:-}" ]]; then
    read -r -a bench <<<"$VSPEC_BENCH"
elif command -v vllm-hust-vspec-bench >/dev/null; then
    bench=(vllm-hust-vspec-bench)
else
    bench=("$root/.venv/bin/python" -m vllm_hust_vspec.cli.bench)
fi
args=(pair --protocol "${VSPEC_BENCH_PRESET:-qwen35-frontier-mtp2}" --dataset gsm8k
      --min-speedup "${VSPEC_MIN_SPEEDUP:-1.10}"
      --max-concurrency "${VSPEC_MAX_CONCURRENCY:-16}")
[[ -n "${VSPEC_GSM8K_DATASET:-}" ]] && args+=(--dataset-path "$VSPEC_GSM8K_DATASET")
[[ -n "${VSPEC_TARGET_MODEL:-}" ]] && args+=(--target-model "$VSPEC_TARGET_MODEL")
[[ -n "${VSPEC_RESULT_DIR:-}" ]] && args+=(--result-dir "$VSPEC_RESULT_DIR")
# The user's flags come last: argparse keeps the last value, so they override the above.
exec "${bench[@]}" "${args[@]}" "$@"
