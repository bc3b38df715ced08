#!/usr/bin/env bash
# CI entry point of the Node package: installs the dependencies and runs the
# whole suite (its pretest builds the native addon with cargo into the shared
# target dir) against the servers named by POLYLOCK_TEST_REDIS and
# POLYLOCK_TEST_ZK. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
for v in POLYLOCK_TEST_REDIS POLYLOCK_TEST_ZK; do
  if [ -z "${!v:-}" ]; then
    echo "bindings-node: $v is not set (eval \"\$(scripts/services env)\" first)" >&2
    exit 2
  fi
done
# --ignore-scripts: our install script would build the addon without the
# test hooks, a build the pretest step replaces at once with its own (about
# 50 s on 2 cores); the dependencies have no install scripts.
npm ci --ignore-scripts --no-audit --no-fund || npm install --ignore-scripts --no-audit --no-fund
# The conformance runner records its operation histories there; histcheck
# (tests/history, built with Go) checks them after the suite: a violation
# fails it and prints the minimal failing history.
ROOT="$(cd .. && pwd)"
# shellcheck source=../../scripts/lib.sh
. "$ROOT/scripts/lib.sh"
histories="$(new_history_dir node)"
status=0
POLYLOCK_HISTORY_DIR="$histories" npm test || status=$?
check_histories "$histories" required || status=1
exit "$status"
