#!/usr/bin/env bash
# CI entry point of the Node package: installs (which builds the native addon
# with cargo into the shared target dir) and runs the whole suite against the
# servers named by POLYLOCK_TEST_REDIS and POLYLOCK_TEST_ZK. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
for v in POLYLOCK_TEST_REDIS POLYLOCK_TEST_ZK; do
  if [ -z "${!v:-}" ]; then
    echo "bindings-node: $v is not set (eval \"\$(scripts/services env)\" first)" >&2
    exit 2
  fi
done
npm ci --no-audit --no-fund || npm install --no-audit --no-fund
npm test
