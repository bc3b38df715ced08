#!/usr/bin/env bash
# The Python package's test entry point: venv, native build, stub check,
# lint, type check, and pytest against the real servers (both backends).
#
#   bindings-python/scripts/test.sh [pytest args...]
#
# Needs the servers (scripts/services start); reads POLYLOCK_TEST_REDIS and
# POLYLOCK_TEST_ZK, or asks scripts/services env for them. Idempotent: the
# venv (POLYLOCK_VENV, default /tmp/polylock-venv) and the cargo target dir
# (the workspace's) are reused.
set -euo pipefail

pkg="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
repo="$(cd "$pkg/.." && pwd)"
venv="${POLYLOCK_VENV:-/tmp/polylock-venv}"

step() { printf '\n== %s\n' "$*" >&2; }

step "venv $venv"
[[ -x "$venv/bin/python" ]] || python3 -m venv "$venv"
# shellcheck disable=SC1091
source "$venv/bin/activate"
python -m pip install -q --disable-pip-version-check \
    'maturin>=1.5,<2' pytest pytest-timeout mypy 'ruff==0.17.6' redis kazoo gunicorn

if [[ -z "${POLYLOCK_TEST_REDIS:-}" || -z "${POLYLOCK_TEST_ZK:-}" ]]; then
    eval "$("$repo/scripts/services" env)"
fi
: "${POLYLOCK_TEST_REDIS:?not set: run scripts/services start}"
: "${POLYLOCK_TEST_ZK:?not set: run scripts/services start}"

step "build (maturin develop --release --features test-hooks, shared target dir)"
cd "$pkg"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$repo/target}"
# The suite injects faults (_debug_faults): a build with the test hooks.
maturin develop --release --quiet --features test-hooks

step "stubtest"
python -m mypy.stubtest polylock._native

step "ruff + mypy"
ruff check python tests "$repo/bench/python" "$repo/demo/workers/python"
ruff format --check python tests "$repo/bench/python" "$repo/demo/workers/python"
mypy --strict python/polylock

step "pytest"
# The conformance runner records its operation histories there; histcheck
# (tests/history, built with Go) checks them after the run: a violation
# fails the suite and prints the minimal failing history.
ROOT="$repo"
# shellcheck source=../../scripts/lib.sh
. "$repo/scripts/lib.sh"
histories="$(new_history_dir python)"
status=0
POLYLOCK_HISTORY_DIR="$histories" python -m pytest -q --timeout 300 -p no:cacheprovider tests "$@" || status=$?

step "histcheck (the conformance runner's histories)"
# A run given a selection of tests may leave the conformance runner out.
check_histories "$histories" "$([[ $# -eq 0 ]] && echo required)" || status=1
exit "$status"
