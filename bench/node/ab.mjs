// Interleaved A/B of two builds of the Node package in one process, on one
// Redis: uncontended acquire+release, alternating batches of 100 so that
// machine load falls on both alike (what a before/after pair of whole
// bench runs cannot separate from noise on a shared machine).
//   node bench/node/ab.mjs OLD_PACKAGE_DIR NEW_PACKAGE_DIR   (POLYLOCK_TEST_REDIS set)
import { createRequire } from 'node:module'
import { resolve } from 'node:path'

const [oldDir, newDir] = process.argv.slice(2)
if (!oldDir || !newDir) throw new Error('usage: node bench/node/ab.mjs OLD_PACKAGE_DIR NEW_PACKAGE_DIR')
const url = process.env.POLYLOCK_TEST_REDIS
if (!url) throw new Error('POLYLOCK_TEST_REDIS is not set: eval "$(scripts/services env)" first')
const require = createRequire(import.meta.url)
const load = (dir) => require(resolve(dir, 'index.js'))
const [a, b] = await Promise.all([load(oldDir).connect(url), load(newDir).connect(url)])
const [la, lb] = [a.lock(`ab/old-${process.pid}`), b.lock(`ab/new-${process.pid}`)]
const now = () => process.hrtime.bigint()

async function batch(lock, out, n) {
  for (let i = 0; i < n; i++) {
    const t = now()
    await (await lock.acquire()).release()
    out?.push(Number(now() - t) / 1000)
  }
}

const p = (s, q) => [...s].sort((x, y) => x - y)[Math.min(s.length - 1, Math.ceil(q * s.length) - 1)]
const [sa, sb] = [[], []]
await batch(la, undefined, 300) // warm-up
await batch(lb, undefined, 300)
for (let r = 0; r < 40; r++) {
  // Each round runs one batch of each build, the first one alternating.
  const order = r % 2 ? [[la, sa], [lb, sb]] : [[lb, sb], [la, sa]]
  for (const [lock, out] of order) await batch(lock, out, 100)
}
console.log(
  `old p50 ${p(sa, 0.5).toFixed(0)} µs, new p50 ${p(sb, 0.5).toFixed(0)} µs, new/old ${(p(sb, 0.5) / p(sa, 0.5)).toFixed(3)} (n=${sa.length} each)`,
)
await Promise.all([a.close(), b.close()])
