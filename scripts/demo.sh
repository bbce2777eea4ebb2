#!/usr/bin/env bash
# The main job on the embedded default: set up (cached), start a real `vllm serve` on
# 127.0.0.1 with the bundled tiny model pair (preset cpu-tiny, adaptive gamma 0..4), send
# concurrent OpenAI chat requests, print the answers, the controller's gamma choices and the
# vspec_ metrics, then stop the server.
#   VSPEC_DEMO_PORT=8765 ./scripts/demo.sh [extra vllm-hust-vspec flags]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
./scripts/setup.sh
port="${VSPEC_DEMO_PORT:-8765}"
mkdir -p .cache/demo
trace=".cache/demo/trace.jsonl"
log=".cache/demo/server.log"
rm -f "$trace"
echo "demo: starting vllm serve (preset cpu-tiny) on 127.0.0.1:$port; log in $log"
HUST_VSPEC_MODEL_DIR="$root/.cache/models" ./run.sh cpu-tiny --port "$port" \
    --adaptive-trace "$trace" "$@" >"$log" 2>&1 &
server=$!
cleanup() {
    if kill -0 "$server" 2>/dev/null; then
        kill -INT "$server" 2>/dev/null || true
        for _ in $(seq 30); do kill -0 "$server" 2>/dev/null || break; sleep 1; done
        kill -KILL "$server" 2>/dev/null || true
    fi
}
trap cleanup EXIT
.venv/bin/python scripts/demo_client.py --port "$port" --server-pid "$server" --log "$log" \
    --trace "$trace"
