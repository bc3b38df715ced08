#!/usr/bin/env bash
# The core in workerd: installs workerd from npm into a temp dir, serves
# worker.js with polylock.wasm (built by bindings-node's build:wasm), and
# checks, against POLYLOCK_TEST_REDIS: two grants with increasing fencing
# tokens, then `would_block` while a polylock/wasm client in Node holds
# the lock. workerd refuses loopback TCP unless its `internet` service
# allows "local" addresses (config below); with the default it answers
# "connecting to 127.0.0.1:PORT is not allowed".
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
node_pkg="$here/../../bindings-node"
: "${POLYLOCK_TEST_REDIS:?start the servers and eval \"\$(scripts/services env)\" first}"
port="${POLYLOCK_WORKERD_PORT:-8791}"
work="$(mktemp -d)"
pid=
cleanup() {
  [[ -n $pid ]] && kill "$pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
(cd "$node_pkg" && node scripts/build-wasm.mjs)
cp "$here/worker.js" "$node_pkg/polylock.wasm" "$work/"
(cd "$work" && echo '{"private":true}' >package.json && npm install --no-audit --no-fund workerd@1.20261117.1 >/dev/null)
cat >"$work/config.capnp" <<CAPNP
using Workerd = import "/workerd/workerd.capnp";
const config :Workerd.Config = (
  services = [
    (name = "main", worker = .demo),
    (name = "internet", network = (allow = ["public", "private", "local"])),
  ],
  sockets = [ (name = "http", address = "127.0.0.1:$port", http = (), service = "main") ],
);
const demo :Workerd.Worker = (
  modules = [
    (name = "worker.js", esModule = embed "worker.js"),
    (name = "polylock.wasm", wasm = embed "polylock.wasm"),
  ],
  compatibilityDate = "2025-01-01",
);
CAPNP
"$work/node_modules/.bin/workerd" serve "$work/config.capnp" >"$work/workerd.log" 2>&1 &
pid=$!
cd "$node_pkg"
PORT="$port" node --input-type=module <<'JS'
import assert from 'node:assert/strict'
import { setTimeout as sleep } from 'node:timers/promises'
import { connect } from 'polylock/wasm'
const redis = process.env.POLYLOCK_TEST_REDIS
const at = (q) => `http://127.0.0.1:${process.env.PORT}/?redis=${encodeURIComponent(redis)}&${q}`
async function ask(q) {
  for (let i = 0; ; i++) {
    try {
      const r = await fetch(at(q))
      return { status: r.status, body: await r.text() }
    } catch (e) {
      if (i > 50) throw e // workerd still starting
      await sleep(100)
    }
  }
}
const first = JSON.parse((await ask('timeoutMs=2000')).body)
const second = JSON.parse((await ask('timeoutMs=2000')).body)
assert.equal(first.granted?.k, 'granted', JSON.stringify(first))
assert.ok(BigInt(second.granted.token) > BigInt(first.granted.token), 'tokens increase')
assert.deepEqual(second.events, ['granted', 'timeout', 'released'])
const client = await connect(redis)
const guard = await client.lock('workerd/demo').acquire()
const held = JSON.parse((await ask('timeoutMs=0')).body)
assert.equal(held.events[0].err.kind, 'would_block', JSON.stringify(held))
assert.ok(BigInt(first.granted.token) < guard.fencingToken)
await guard.release()
await client.close()
console.log(`workerd: granted ${first.granted.token}, ${second.granted.token}; would_block while Node held ${guard.fencingToken}`)
JS
