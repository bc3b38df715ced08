// polylock (the native addon, and polylock/wasm: the core in WebAssembly over
// ioredis) beside redlock and redis-semaphore's Mutex, in one run, on the same
// Redis: uncontended acquire+release latency, cross-process handoff latency,
// and the floor (an ioredis PING); and polylock's throughput: acquire+release
// per second across 1,000 distinct locks from one client, 64 concurrent async
// loops. Prints a Markdown table, writes it to results.md and the raw figures
// to results.json. BENCH_ONLY_THROUGHPUT=1: print the throughput, write nothing.
import { execFileSync, fork } from 'node:child_process'
import { once } from 'node:events'
import { writeFileSync } from 'node:fs'
import { setTimeout as sleep } from 'node:timers/promises'
import Redis from 'ioredis'

import { KINDS, POLL_MS, open } from './impls.mjs'

const REDIS = process.env.POLYLOCK_TEST_REDIS
const ZK = process.env.POLYLOCK_TEST_ZK
if (!REDIS) throw new Error('POLYLOCK_TEST_REDIS is not set: eval "$(scripts/services env)" first')
const WARMUP = Number(process.env.BENCH_WARMUP ?? 200)
const ITERATIONS = Number(process.env.BENCH_ITERATIONS ?? 2000)
const HANDOFFS = Number(process.env.BENCH_HANDOFFS ?? 100)
// How long the holder keeps the lock after the waiter said it is about to block.
const HOLD_MS = 25
const TP_LOCKS = 1000
const TP_LOOPS = 64
const TP_MS = 3000

const key = (what) => `/polylock-bench/node-${what}-${process.pid}-${Date.now()}`
const now = () => process.hrtime.bigint()
const toMs = (ns) => Number(ns) / 1e6

function percentiles(samplesNs) {
  const s = [...samplesNs].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0))
  const at = (q) => toMs(s[Math.min(s.length - 1, Math.ceil(q * s.length) - 1)])
  return { n: s.length, p50: at(0.5), p99: at(0.99), min: toMs(s[0]), max: toMs(s[s.length - 1]) }
}

const BATCH = 100

// Timed operations measured interleaved: after each one's warm-up, batches of
// BATCH take turns (the first op of each round rotating), so that the
// machine's load and drift fall on every op alike and a ratio of two p50s
// compares the ops, not the moments they happened to run at.
async function interleaved(ops) {
  const samples = ops.map(() => [])
  for (const op of ops) for (let i = 0; i < WARMUP; i++) await op()
  for (let r = 0; r * BATCH < ITERATIONS; r++) {
    const batch = Math.min(BATCH, ITERATIONS - r * BATCH)
    for (let k = 0; k < ops.length; k++) {
      const i = (r + k) % ops.length
      for (let j = 0; j < batch; j++) {
        const t = now()
        await ops[i]()
        samples[i].push(now() - t)
      }
    }
  }
  return samples.map(percentiles)
}

// The pause before each paced acquire+release: a service's lock calls come
// between requests, not back to back. Longer than the 1 ms after which the
// runtime's thread stops polling for the next call, so every paced call is
// a quiet one, as most calls in a service are (as in bench/python).
const PACE_MS = 2
const PACED_ITERATIONS = Number(process.env.BENCH_PACED_ITERATIONS ?? 400)

// Every implementation's acquire+release, each after PACE_MS of quiet:
// batches of 50 take turns, as in `interleaved`; the pause is not timed.
async function pacedOnRedis() {
  const impls = await Promise.all(KINDS.map((kind) => open(kind, REDIS)))
  const keys = KINDS.map((kind) => key(`paced-${kind}`))
  const samples = KINDS.map(() => [])
  for (let i = 0; i < impls.length; i++) for (let w = 0; w < 20; w++) await impls[i].release(await impls[i].acquire(keys[i]))
  for (let r = 0; r * 50 < PACED_ITERATIONS; r++) {
    for (let k = 0; k < impls.length; k++) {
      const i = (r + k) % impls.length
      for (let j = 0; j < 50; j++) {
        await sleep(PACE_MS)
        const t = now()
        await impls[i].release(await impls[i].acquire(keys[i]))
        samples[i].push(now() - t)
      }
    }
  }
  await Promise.all(impls.map((impl) => impl.close()))
  return Object.fromEntries(KINDS.map((kind, i) => [kind, percentiles(samples[i])]))
}

// polylock's uncontended acquire and release as the two script calls its runtime
// sends (by SHA1, once the server has the scripts), from the Rust benchmark binary (one definition for every language;
// bench/node/run.sh builds it).
function rawScriptCalls(name) {
  const bin = `${process.env.CARGO_TARGET_DIR ?? new URL('../../target', import.meta.url).pathname}/release/polylock-bench`
  return JSON.parse(execFileSync(bin, ['--print-raw-scripts', name], { encoding: 'utf8' }))
}

// The floors (an ioredis PING; polylock's two scripts issued raw over
// ioredis, no polylock code) and every implementation's uncontended
// acquire+release on Redis, interleaved.
async function uncontendedOnRedis() {
  const redis = new Redis(REDIS)
  const impls = await Promise.all(KINDS.map((kind) => open(kind, REDIS)))
  const keys = KINDS.map((kind) => key(`uncontended-${kind}`))
  const scripts = rawScriptCalls(key('uncontended-raw'))
  for (const c of scripts) await redis.script('LOAD', c.source)
  const calls = scripts.map((c) => [c.sha, c.keys.length, ...c.keys, ...c.args])
  const ops = [
    () => redis.ping(),
    async () => {
      for (const args of calls) await redis.callBuffer('EVALSHA', ...args)
    },
    ...impls.map((impl, i) => async () => impl.release(await impl.acquire(keys[i]))),
  ]
  const [floor, rawScripts, ...rest] = await interleaved(ops)
  await Promise.all([redis.quit(), ...impls.map((impl) => impl.close())])
  return { floor, rawScripts, uncontended: Object.fromEntries(KINDS.map((kind, i) => [kind, rest[i]])) }
}

async function uncontended(kind, url) {
  const impl = await open(kind, url)
  const k = key(`uncontended-${kind}`)
  const [samples] = await interleaved([async () => impl.release(await impl.acquire(k))])
  await impl.close()
  return samples
}

async function handoff(kind, url) {
  const impl = await open(kind, url)
  const waiter = fork(new URL('./waiter.mjs', import.meta.url), [kind, url])
  const next = async () => (await once(waiter, 'message'))[0]
  await next() // ready
  const k = key(`handoff-${kind}`)
  const samples = []
  const warmup = Math.min(10, Math.ceil(HANDOFFS / 10))
  for (let i = 0; i < warmup + HANDOFFS; i++) {
    const held = await impl.acquire(k)
    waiter.send({ cmd: 'wait', key: k })
    await next() // waiting: it is about to block in acquire()
    await sleep(HOLD_MS)
    const releasedAt = now()
    await impl.release(held)
    const { acquiredAt } = await next()
    if (i >= warmup) samples.push(BigInt(acquiredAt) - releasedAt)
  }
  waiter.send({ cmd: 'exit' })
  await once(waiter, 'exit')
  await impl.close()
  return percentiles(samples)
}

// acquire+release per second across TP_LOCKS names from one client: TP_LOOPS
// async loops, each walking its own slice of the names; counted for TP_MS
// after half a second of warm-up.
async function throughput(url) {
  const impl = await open('polylock', url)
  const prefix = key('throughput')
  let done = 0
  let stop = false
  const loop = async (t) => {
    const mine = []
    for (let i = t; i < TP_LOCKS; i += TP_LOOPS) mine.push(`${prefix}/${i}`)
    for (let i = 0; !stop; i = (i + 1) % mine.length) {
      await impl.release(await impl.acquire(mine[i]))
      done++
    }
  }
  const loops = Array.from({ length: TP_LOOPS }, (_, t) => loop(t))
  await sleep(500)
  const n0 = done
  const t0 = now()
  await sleep(TP_MS)
  const ops = Math.round((done - n0) / (toMs(now() - t0) / 1000))
  stop = true
  await Promise.all(loops)
  await impl.close()
  return ops
}

const throughputs = { redis: await throughput(REDIS) }
if (ZK) throughputs.zookeeper = await throughput(ZK)
console.error(`throughput (acquire+release/s, ${TP_LOCKS} locks, ${TP_LOOPS} async loops, one client): ${JSON.stringify(throughputs)}`)
if (process.env.BENCH_ONLY_THROUGHPUT === '1') process.exit(0)

const results = { settings: { WARMUP, ITERATIONS, HANDOFFS, HOLD_MS, POLL_MS, PACE_MS, PACED_ITERATIONS, redis: REDIS, zk: ZK ?? null }, redis: {}, zookeeper: {}, throughput: throughputs }
const onRedis = await uncontendedOnRedis()
const paced = await pacedOnRedis()
results.floor = onRedis.floor
results.rawScripts = onRedis.rawScripts
for (const kind of KINDS) {
  results.redis[kind] = { uncontended: onRedis.uncontended[kind], paced: paced[kind], handoff: await handoff(kind, REDIS) }
  console.error(`done: ${kind} on redis`)
}
if (ZK) {
  results.zookeeper.polylock = { uncontended: await uncontended('polylock', ZK), handoff: await handoff('polylock', ZK) }
  console.error('done: polylock on zookeeper')
}

const f = (ms) => ms.toFixed(3)
const ratio = (a, b) => `${(a / b).toFixed(2)}x`
const poly = results.redis.polylock
const lines = [
  `Node ${process.version}; ${ITERATIONS} uncontended acquire+release after ${WARMUP} warm-up (the floor and the Redis implementations interleaved, in batches of ${BATCH}); ${HANDOFFS} cross-process handoffs`,
  `(holder releases -> waiter in another process returns, process.hrtime.bigint()); peers poll every ${POLL_MS} ms. Times in ms.`,
  '',
  `Paced: ${PACED_ITERATIONS} acquire+release each after a ${PACE_MS} ms pause (not timed), implementations taking turns in batches of 50.`,
  '',
  '| backend | implementation | uncontended p50 | uncontended p99 | paced p50 | paced p99 | handoff p50 | handoff p99 | polylock/this uncontended p50 | polylock/this paced p50 | polylock/this handoff p50 |',
  '| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |',
]
for (const kind of KINDS) {
  const r = results.redis[kind]
  const ratios =
    kind === 'polylock'
      ? ['', '', '']
      : [ratio(poly.uncontended.p50, r.uncontended.p50), ratio(poly.paced.p50, r.paced.p50), ratio(poly.handoff.p50, r.handoff.p50)]
  lines.push(
    `| redis | ${kind} | ${f(r.uncontended.p50)} | ${f(r.uncontended.p99)} | ${f(r.paced.p50)} | ${f(r.paced.p99)} | ${f(r.handoff.p50)} | ${f(r.handoff.p99)} | ${ratios.join(' | ')} |`,
  )
}
if (results.zookeeper.polylock) {
  const r = results.zookeeper.polylock
  lines.push(`| zookeeper | polylock | ${f(r.uncontended.p50)} | ${f(r.uncontended.p99)} | | | ${f(r.handoff.p50)} | ${f(r.handoff.p99)} | | | |`)
}
lines.push(`| redis | floor: ioredis PING | ${f(results.floor.p50)} | ${f(results.floor.p99)} | | | | | | | |`)
lines.push(
  `| redis | raw: polylock's two scripts over ioredis | ${f(results.rawScripts.p50)} | ${f(results.rawScripts.p99)} | | | | | ${ratio(poly.uncontended.p50, results.rawScripts.p50)} | | |`,
)
lines.push('', `Throughput, acquire+release per second across ${TP_LOCKS} distinct locks from one client (${TP_LOOPS} concurrent async loops,`,
  `\`await lock.acquire()\` / \`release()\`, ${TP_MS / 1000} s after 0.5 s warm-up):`, '', '| backend | ops/s |', '| --- | ---: |')
for (const [b, ops] of Object.entries(throughputs)) lines.push(`| ${b} | ${ops} |`)
const table = lines.join('\n') + '\n'
process.stdout.write(table)
const here = new URL('.', import.meta.url)
writeFileSync(new URL('results.md', here), table)
writeFileSync(new URL('results.json', here), JSON.stringify(results, null, 2) + '\n')
