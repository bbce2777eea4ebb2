#!/usr/bin/env bash
# Run a vSpec preset: ./run.sh [PRESET] [vllm-hust-vspec flags] [-- vllm serve args]
#   ./run.sh                          # the 'draft' preset, as vllm-hust-vSpec 0.14 did
#   ./run.sh cpu-tiny                 # the bundled tiny pair on CPU (after scripts/setup.sh)
#   ./run.sh eagle --dry-run          # print the exact command
#   ./run.sh --port 8100              # flags first: the 'draft' preset with them
#   VSPEC_CONFIG=my.toml ./run.sh eagle
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
launcher="vllm-hust-vspec"
if [[ -x "$here/.venv/bin/vllm-hust-vspec" ]]; then
    launcher="$here/.venv/bin/vllm-hust-vspec"
elif ! command -v vllm-hust-vspec >/dev/null 2>&1; then
    echo "run.sh: vllm-hust-vspec is not installed; run ./scripts/setup.sh or ./manage.sh install" >&2
    exit 2
fi
if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
    echo "usage: ./run.sh [PRESET] [flags] [-- vllm serve args]   (default preset: draft)"
    echo "presets: $(ls "$here/configs" | sed -n 's/\.toml$//p' | tr '\n' ' ')"
    echo
    exec "$launcher" --help
fi
preset="draft"
if [[ $# -gt 0 && "$1" != -* ]]; then
    preset="$1"; shift
fi
# The bundled tiny models live in .cache/models once scripts/build_tiny_models.py has run.
if [[ -z "${HUST_VSPEC_MODEL_DIR:-}" && -d "$here/.cache/models" ]]; then
    export HUST_VSPEC_MODEL_DIR="$here/.cache/models"
fi
exec "$launcher" --protocol "$preset" "$@"
