// Uncontended acquire+release paced like a service's calls (each after a
// pause), polylock against the two requests a hand-written ioredis lock
// sends (SET NX PX, then a compare-and-delete script). Batches of the two
// take turns. A one-off probe, not part of bench/run:
//   node bench/node/paced.mjs [PAUSE_MS=10] [N=300]   (POLYLOCK_TEST_REDIS set)
import { createRequire } from 'node:module'
import { resolve } from 'node:path'

const require = createRequire(import.meta.url)
const Redis = require('ioredis')
const polylock = require(resolve(import.meta.dirname, '../../bindings-node/index.js'))
const url = process.env.POLYLOCK_TEST_REDIS
if (!url) throw new Error('POLYLOCK_TEST_REDIS is not set: eval "$(scripts/services env)" first')
const [pauseMs, n] = [Number(process.argv[2] ?? 10), Number(process.argv[3] ?? 300)]

const client = await polylock.connect(url)
const lock = client.lock(`paced/polylock-${process.pid}`)
const redis = new Redis(url)
const key = `paced/ioredis-${process.pid}`
const unlock = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"
const systems = {
  polylock: async () => (await lock.acquire()).release(),
  'ioredis SET NX + script': async () => {
    await redis.set(key, 'me', 'PX', 30000, 'NX')
    await redis.eval(unlock, 1, key, 'me')
  },
}
const pause = () => new Promise((r) => setTimeout(r, pauseMs))
const samples = Object.fromEntries(Object.keys(systems).map((s) => [s, []]))
for (let round = 0; round * 50 < n; round++) {
  for (const [name, pair] of Object.entries(systems)) {
    for (let i = 0; i < 50; i++) {
      await pause()
      const t = process.hrtime.bigint()
      await pair()
      samples[name].push(Number(process.hrtime.bigint() - t) / 1000)
    }
  }
}
for (const [name, s] of Object.entries(samples)) {
  s.sort((a, b) => a - b)
  console.log(`${name}: p50 ${s[s.length >> 1].toFixed(0)} µs, p90 ${s[Math.floor(s.length * 0.9)].toFixed(0)} µs, each after ${pauseMs} ms`)
}
await client.close()
redis.disconnect()
