#!/usr/bin/env bash
# Run a vSpec preset: ./run.sh PRESET [vllm-hust-vspec flags] [-- vllm serve args]
#   ./run.sh cpu-tiny                 # the bundled tiny pair on CPU (after scripts/setup.sh)
#   ./run.sh eagle --dry-run          # print the exact command
#   VSPEC_CONFIG=my.toml ./run.sh eagle
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [[ $# -lt 1 || "$1" == "-h" || "$1" == "--help" ]]; then
    echo "usage: ./run.sh PRESET [flags] [-- vllm serve args]"
    echo "presets: $(ls "$here/configs" | sed 's/\.toml$//' | tr '\n' ' ')"
    echo "flags: see 'vllm-hust-vspec --help'"
    exit 0
fi
preset="$1"; shift
launcher="vllm-hust-vspec"
if [[ -x "$here/.venv/bin/vllm-hust-vspec" ]]; then
    launcher="$here/.venv/bin/vllm-hust-vspec"
elif ! command -v vllm-hust-vspec >/dev/null 2>&1; then
    echo "run.sh: vllm-hust-vspec is not installed; run ./scripts/setup.sh or ./manage.sh install" >&2
    exit 2
fi
# The bundled tiny models live in .cache/models once scripts/build_tiny_models.py has run.
if [[ -z "${HUST_VSPEC_MODEL_DIR:-}" && -d "$here/.cache/models" ]]; then
    export HUST_VSPEC_MODEL_DIR="$here/.cache/models"
fi
exec "$launcher" --protocol "$preset" "$@"
