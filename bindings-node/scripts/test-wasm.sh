#!/usr/bin/env bash
# CI entry point of polylock/wasm: builds polylock.wasm, installs ioredis and
# the test tools from npm (no native addon build: --ignore-scripts), and runs
# in Node, against the Redis named by POLYLOCK_TEST_REDIS (and _REDIS2, for
# the refusing-server test, when set):
#   - the conformance scenarios through polylock/wasm (Redis ones);
#   - the package's own suite with every `polylock` import resolved to
#     polylock/wasm (test/wasm/as-polylock.mjs), Redis only; the mixed test
#     (native addon + wasm + Rust) runs in scripts/test.sh, which builds the addon;
#   - test/wasm/: a lease running out server-side is told before the next
#     grant; a key deleted behind the holder's back; no .node file anywhere;
#   - bindings-wasm/workerd/run.sh: the module in workerd (from npm), locking
#     on the same Redis over cloudflare:sockets.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${POLYLOCK_TEST_REDIS:-}" ]; then
  echo "bindings-node: POLYLOCK_TEST_REDIS is not set (eval \"\$(scripts/services env)\" first)" >&2
  exit 2
fi
npm ci --ignore-scripts --no-audit --no-fund || npm install --ignore-scripts --no-audit --no-fund
node scripts/build-wasm.mjs
suite=()
for f in test/*.test.mjs; do
  [[ $f == test/mixed.test.mjs || $f == test/conformance.test.mjs ]] || suite+=("$f")
done
export POLYLOCK_NODE_ENTRY=polylock/wasm POLYLOCK_TEST_BACKENDS=redis
# The conformance runner records its operation histories there, and
# histcheck (tests/history, built with Go) checks them after the run.
ROOT="$(cd .. && pwd)"
# shellcheck source=../../scripts/lib.sh
. "$ROOT/scripts/lib.sh"
histories="$(new_history_dir wasm)"
POLYLOCK_HISTORY_DIR="$histories" node --import ./test/wasm/as-polylock.mjs --test --test-reporter=spec \
  test/conformance.test.mjs "${suite[@]}" test/wasm/*.test.mjs
check_histories "$histories" required
../bindings-wasm/workerd/run.sh
