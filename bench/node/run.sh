#!/usr/bin/env bash
# Runs the Node benchmark: builds the polylock addon and polylock.wasm (release) if needed,
# and the Rust benchmark binary (bench.mjs asks it for polylock's raw script calls),
# installs the peers from npm, and runs bench.mjs against the servers named by
# POLYLOCK_TEST_REDIS / POLYLOCK_TEST_ZK (from scripts/services env if unset).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
if [ -z "${POLYLOCK_TEST_REDIS:-}" ]; then eval "$("$root/scripts/services" env)"; fi
(cd "$root/bindings-node" && { [ -d node_modules/ioredis ] || npm ci --no-audit --no-fund || npm install --no-audit --no-fund; } && npm run build && npm run build:wasm)
cargo build --release -q -p polylock-bench --manifest-path "$root/Cargo.toml"
cd "$here"
npm ci --no-audit --no-fund || npm install --no-audit --no-fund
node bench.mjs
