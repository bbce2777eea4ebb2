#!/usr/bin/env bash
# release.sh: build, check and publish vllm-hust-vspec. See ./release.sh --help.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$root"
PY="${VSPEC_PYTHON:-}"
if [[ -z "$PY" ]]; then
    if [[ -x "$root/.venv/bin/python" ]]; then PY="$root/.venv/bin/python"; else PY="$(command -v python3)"; fi
fi

usage() {
    cat <<'USAGE'
usage: ./release.sh VERB [OPTIONS]

  source-check [--fast] [--full-tests]
        one version everywhere (src/vllm_hust_vspec/_version.py, both manifests'
        extension_version, artefact names in dist/), entry points, license, valid manifests,
        MOD_METADATA.json (schema, version, extension id, evidence anchors in the docs); then
        ruff and the unit tests (--fast skips ruff and tests; --full-tests runs all of tests/)
  build [--no-isolation]
        remove dist/, build/ and egg-info, then build the wheel and the sdist with 'uv build'
        when uv is on PATH, else 'python -m build' (--no-isolation builds offline with the
        tools already installed); exactly the two current artefacts remain in dist/
  check [ARTEFACT...]
        wheel: manifests, schemas, entry points, METADATA, LICENSE, every RECORD hash; sdist:
        PKG-INFO, manifests, MOD_METADATA.json, LICENSE, operator scripts, scripts/ configs/
        profiles/ docs/; prints SHA256 sums
        (default: the two artefacts in dist/)
  publish [--dry-run]
        upload dist/* with twine. Refuses outside a clean git checkout; the token comes only
        from VSPEC_PYPI_TOKEN or UV_PUBLISH_TOKEN (refused if both are set and differ), else
        TWINE_PASSWORD, and is never printed; VSPEC_RELEASE_CONFIRM must equal the exact
        version. VSPEC_REPOSITORY_URL selects another index.

Environment: VSPEC_PYTHON (the Python to use; default ./.venv/bin/python, then python3).
USAGE
}

say() { echo "release.sh: $*"; }
die() { echo "release.sh: error: $1" >&2; exit "${2:-1}"; }
run() { printf '+'; printf ' %q' "$@"; printf '\n'; "$@"; }

version() { sed -n 's/^__version__ = "\(.*\)"/\1/p' "$root/src/vllm_hust_vspec/_version.py"; }

cmd_source_check() {
    local fast=0 tests=(-m "not engine" tests)
    for a in "$@"; do
        case "$a" in
            --fast) fast=1 ;;
            --full-tests) tests=(tests) ;;
            *) die "source-check: unknown option '$a'" 2 ;;
        esac
    done
    run "$PY" scripts/release_check.py source --root "$root"
    (( fast )) && return 0
    run "$PY" -m ruff check src tests scripts
    run "$PY" -m pytest -q "${tests[@]}"
}

cmd_build() {
    local isolation=1
    for a in "$@"; do
        case "$a" in
            --no-isolation) isolation=0 ;;
            *) die "build: unknown option '$a'" 2 ;;
        esac
    done
    local v
    v="$(version)"
    # Stale build/lib files would otherwise end up in the wheel.
    run rm -rf dist build src/vllm_hust_vspec.egg-info
    if command -v uv >/dev/null 2>&1; then
        run uv build --out-dir dist
    elif (( isolation )); then
        run "$PY" -m build --outdir dist
    else
        run "$PY" -m build --no-isolation --skip-dependency-check --outdir dist
    fi
    local found
    found="$(find dist -maxdepth 1 -type f -printf '%f\n' | sort | tr '\n' ' ')"
    local want="vllm_hust_vspec-$v-py3-none-any.whl vllm_hust_vspec-$v.tar.gz "
    [[ "$found" == "$want" ]] || die "dist/ holds '$found', expected exactly '$want'"
    say "built $want"
}

cmd_check() {
    run "$PY" scripts/release_check.py artefacts --root "$root" "$@"
}

cmd_publish() {
    local dry=0
    for a in "$@"; do
        case "$a" in
            --dry-run) dry=1 ;;
            *) die "publish: unknown option '$a'" 2 ;;
        esac
    done
    local v
    v="$(version)"
    git -C "$root" rev-parse --is-inside-work-tree >/dev/null 2>&1 \
        || die "publish: $root is not a git checkout; publish only from a clean clone of the tag"
    if [[ -n "$(git -C "$root" status --porcelain)" ]]; then
        die "publish: the git checkout is not clean (see 'git status'); commit or remove the changes"
    fi
    [[ "${VSPEC_RELEASE_CONFIRM:-}" == "$v" ]] \
        || die "publish: set VSPEC_RELEASE_CONFIRM=$v to confirm publishing exactly this version"
    # UV_PUBLISH_TOKEN is the predecessor's name for the same token.
    local token="${VSPEC_PYPI_TOKEN:-}" uv_token="${UV_PUBLISH_TOKEN:-}"
    if [[ -n "$token" && -n "$uv_token" && "$token" != "$uv_token" ]]; then
        die "publish: VSPEC_PYPI_TOKEN and UV_PUBLISH_TOKEN are both set and differ; unset one"
    fi
    token="${token:-${uv_token:-${TWINE_PASSWORD:-}}}"
    [[ -n "$token" ]] || die "publish: no token; set VSPEC_PYPI_TOKEN (or UV_PUBLISH_TOKEN) in the environment (never on the command line)"
    cmd_check
    local cmd=("$PY" -m twine upload --non-interactive)
    [[ -n "${VSPEC_REPOSITORY_URL:-}" ]] && cmd+=(--repository-url "$VSPEC_REPOSITORY_URL")
    cmd+=("dist/vllm_hust_vspec-$v-py3-none-any.whl" "dist/vllm_hust_vspec-$v.tar.gz")
    if (( dry )); then
        printf '[dry-run] would run: TWINE_USERNAME=__token__ TWINE_PASSWORD=***'
        printf ' %q' "${cmd[@]}"; printf '\n'
        return 0
    fi
    "$PY" -c 'import twine' 2>/dev/null || die "publish: twine is not installed in $PY (pip install twine)"
    printf '+ TWINE_USERNAME=__token__ TWINE_PASSWORD=***'; printf ' %q' "${cmd[@]}"; printf '\n'
    # The token travels in the environment of twine only, never in argv or the output.
    TWINE_USERNAME=__token__ TWINE_PASSWORD="$token" "${cmd[@]}"
    say "published vllm-hust-vspec $v"
}

verb="${1:-}"
[[ $# -gt 0 ]] && shift
case "$verb" in
    source-check) cmd_source_check "$@" ;;
    build) cmd_build "$@" ;;
    check) cmd_check "$@" ;;
    publish) cmd_publish "$@" ;;
    -h|--help|help) usage ;;
    "") usage; exit 2 ;;
    *) echo "release.sh: unknown verb '$verb'" >&2; usage >&2; exit 2 ;;
esac
