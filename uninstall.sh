#!/usr/bin/env bash
# uninstall.sh: remove vSpec from one Python environment; the same as './manage.sh uninstall'.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
    echo "usage: ./uninstall.sh [--dry-run] [--python PY]"
    echo "  = ./manage.sh uninstall: disable and forget in the Extension Manager when present,"
    echo "    then 'pip uninstall vllm-hust-vspec' in this environment only. Never touches vLLM,"
    echo "    vllm-ascend, CANN, models, drivers or running servers (restart them to unload vSpec)."
    echo "  Exit 3 when a copy stays visible from a parent environment."
    exit 0
fi
exec "$here/manage.sh" uninstall "$@"
