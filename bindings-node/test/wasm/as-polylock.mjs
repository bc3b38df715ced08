// `node --import ./test/wasm/as-polylock.mjs`: the Node package's own suite
// run through polylock/wasm. Every ESM import of `polylock` resolves to
// `polylock/wasm` (the tests that require() it read POLYLOCK_NODE_ENTRY).
import { register } from 'node:module'

register(
  'data:text/javascript,' +
    encodeURIComponent(
      "export async function resolve(s, c, next) { return next(s === 'polylock' ? 'polylock/wasm' : s, c) }",
    ),
  import.meta.url,
)
