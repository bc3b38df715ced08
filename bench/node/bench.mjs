// polylock (the native addon, and polylock/wasm: the core in WebAssembly over
// ioredis) beside redlock and redis-semaphore's Mutex, in one run, on the same
// Redis: uncontended acquire+release latency, cross-process handoff latency,
// and the floor (an ioredis PING); and polylock's throughput: acquire+release
// per second across 1,000 distinct locks from one client, 64 concurrent async
// loops. Every latency row also has its CPU per operation: this process's
// (process.cpuUsage(): user + sys, every thread, the addon's runtime included)
// and the lock server's (see serverCpu); and the idle row: one polylock client
// holding 100 locks, making no calls, in % of one core. Prints a Markdown
// table, writes it to results.md and the raw figures to results.json.
// BENCH_ONLY_THROUGHPUT=1: print the throughput, write nothing. BENCH_QUICK=1:
// every row with few iterations, a smoke test.
import { execFileSync, fork } from 'node:child_process'
import { once } from 'node:events'
import { readFileSync, readdirSync, writeFileSync } from 'node:fs'
import { setTimeout as sleep } from 'node:timers/promises'
import Redis from 'ioredis'

import { KINDS, POLL_MS, open } from './impls.mjs'

const REDIS = process.env.POLYLOCK_TEST_REDIS
const ZK = process.env.POLYLOCK_TEST_ZK
if (!REDIS) throw new Error('POLYLOCK_TEST_REDIS is not set: eval "$(scripts/services env)" first')
const QUICK = process.env.BENCH_QUICK === '1'
const WARMUP = Number(process.env.BENCH_WARMUP ?? (QUICK ? 20 : 200))
const ITERATIONS = Number(process.env.BENCH_ITERATIONS ?? (QUICK ? 100 : 2000))
const HANDOFFS = Number(process.env.BENCH_HANDOFFS ?? (QUICK ? 10 : 100))
const IDLE_S = QUICK ? 2 : 10
// How long the holder keeps the lock after the waiter said it is about to block.
const HOLD_MS = 25
const TP_LOCKS = 1000
const TP_LOOPS = 64
const TP_MS = QUICK ? 1000 : 3000

const key = (what) => `/polylock-bench/node-${what}-${process.pid}-${Date.now()}`
const now = () => process.hrtime.bigint()
const toMs = (ns) => Number(ns) / 1e6

function percentiles(samplesNs) {
  const s = [...samplesNs].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0))
  const at = (q) => toMs(s[Math.min(s.length - 1, Math.ceil(q * s.length) - 1)])
  return { n: s.length, p50: at(0.5), p99: at(0.99), min: toMs(s[0]), max: toMs(s[s.length - 1]) }
}

const BATCH = 100

// CPU time in µs, user + sys, of this process (every thread).
const clientCpu = () => {
  const u = process.cpuUsage()
  return u.user + u.system
}

// The lock server's CPU time in µs so far, or null when unknown. Redis: INFO
// cpu (used_cpu_user + used_cpu_sys, its background threads included).
// ZooKeeper: the sum of /proc/<pid>/task/*/schedstat (ns on a CPU, every
// thread of its JVM) of POLYLOCK_BENCH_ZK_PID (bench/run sets it from the pid
// file of scripts/services).
const infoConn = new Redis(REDIS)
const ZK_PID = /^\d+$/.test(process.env.POLYLOCK_BENCH_ZK_PID ?? '') ? process.env.POLYLOCK_BENCH_ZK_PID : null
async function serverCpu(url) {
  if (url.startsWith('zk://')) {
    if (!ZK_PID) return null
    let ns = 0
    for (const task of readdirSync(`/proc/${ZK_PID}/task`)) {
      try {
        ns += Number(readFileSync(`/proc/${ZK_PID}/task/${task}/schedstat`, 'utf8').split(' ')[0])
      } catch {} // a thread that ended meanwhile
    }
    return ns / 1000
  }
  const info = await infoConn.info('cpu')
  const field = (k) => Number(info.match(new RegExp(`${k}:([0-9.]+)`))[1])
  return (field('used_cpu_user') + field('used_cpu_sys')) * 1e6
}

// CPU of one row over the spans it was timed in, summed: per op.
class Tally {
  client = 0
  server = 0
  ops = 0
  add(client, server, ops) {
    this.client += client
    this.server = server === null || this.server === null ? null : this.server + server
    this.ops += ops
  }
  perOp() {
    const n = Math.max(this.ops, 1)
    return { clientCpuUs: this.client / n, serverCpuUs: this.server === null ? null : this.server / n }
  }
}

// A span's CPU: the server's read first and last, so its query's own client
// work stays out of the client figure.
async function span(url, body) {
  const s0 = await serverCpu(url)
  const c0 = clientCpu()
  await body()
  const client = clientCpu() - c0
  const s1 = await serverCpu(url)
  return [client, s0 === null || s1 === null ? null : s1 - s0]
}

// Before each timed batch, a pause counted nowhere: what the previous batch's
// system still did after its last call ends there, not in this batch's CPU.
const SETTLE_MS = 5

// Timed operations measured interleaved: after each one's warm-up, batches of
// BATCH take turns (the first op of each round rotating), so that the
// machine's load and drift fall on every op alike and a ratio of two p50s
// compares the ops, not the moments they happened to run at. With paceMs,
// each call follows a pause that long (out of the latency, in the CPU). Each
// batch's CPU, this process's and the server's (of url), is charged to its op.
async function interleaved(ops, url, { iterations = ITERATIONS, warmup = WARMUP, paceMs = 0 } = {}) {
  const samples = ops.map(() => [])
  const tallies = ops.map(() => new Tally())
  for (const op of ops) for (let i = 0; i < warmup; i++) await op()
  for (let r = 0; r * BATCH < iterations; r++) {
    const batch = Math.min(BATCH, iterations - r * BATCH)
    for (let k = 0; k < ops.length; k++) {
      const i = (r + k) % ops.length
      await sleep(SETTLE_MS)
      const [client, server] = await span(url, async () => {
        for (let j = 0; j < batch; j++) {
          if (paceMs) await sleep(paceMs)
          const t = now()
          await ops[i]()
          samples[i].push(now() - t)
        }
      })
      tallies[i].add(client, server, batch)
    }
  }
  return samples.map((s, i) => ({ ...percentiles(s), ...tallies[i].perOp() }))
}

// The pause before each paced acquire+release: a service's lock calls come
// between requests, not back to back. Out of the latency, in the CPU per
// operation: what a client burns while its caller is away counts against it.
const PACE_MS = 2
const PACED_ITERATIONS = Number(process.env.BENCH_PACED_ITERATIONS ?? (QUICK ? 50 : 400))

// Every implementation's acquire+release on url, each after PACE_MS of
// quiet, interleaved as in `interleaved`.
async function paced(kinds, url) {
  const impls = await Promise.all(kinds.map((kind) => open(kind, url)))
  const keys = kinds.map((kind) => key(`paced-${kind}`))
  const ops = impls.map((impl, i) => async () => impl.release(await impl.acquire(keys[i])))
  const rows = await interleaved(ops, url, { iterations: PACED_ITERATIONS, warmup: 20, paceMs: PACE_MS })
  await Promise.all(impls.map((impl) => impl.close()))
  return Object.fromEntries(kinds.map((kind, i) => [kind, rows[i]]))
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
  const [floor, rawScripts, ...rest] = await interleaved(ops, REDIS)
  await Promise.all([redis.quit(), ...impls.map((impl) => impl.close())])
  return { floor, rawScripts, uncontended: Object.fromEntries(KINDS.map((kind, i) => [kind, rest[i]])) }
}

async function uncontended(kind, url) {
  const impl = await open(kind, url)
  const k = key(`uncontended-${kind}`)
  const [samples] = await interleaved([async () => impl.release(await impl.acquire(k))], url)
  await impl.close()
  return samples
}

// Handoff latency, and the CPU per handoff round (the holder's acquire, the
// waiter blocking, the release, the waiter's grant and release, the hold
// between): both processes' CPU, and the server's.
async function handoff(kind, url) {
  const impl = await open(kind, url)
  const waiter = fork(new URL('./waiter.mjs', import.meta.url), [kind, url])
  const next = async () => (await once(waiter, 'message'))[0]
  await next() // ready
  const k = key(`handoff-${kind}`)
  const samples = []
  const warmup = Math.min(10, Math.ceil(HANDOFFS / 10))
  const cpuNow = async () => {
    waiter.send({ cmd: 'cpu' })
    const { cpu } = await next()
    return [await serverCpu(url), clientCpu() + cpu]
  }
  let start
  for (let i = 0; i < warmup + HANDOFFS; i++) {
    if (i === warmup) start = await cpuNow()
    const held = await impl.acquire(k)
    waiter.send({ cmd: 'wait', key: k })
    await next() // waiting: it is about to block in acquire()
    await sleep(HOLD_MS)
    const releasedAt = now()
    await impl.release(held)
    const { acquiredAt } = await next()
    if (i >= warmup) samples.push(BigInt(acquiredAt) - releasedAt)
  }
  const end = await cpuNow()
  waiter.send({ cmd: 'exit' })
  await once(waiter, 'exit')
  await impl.close()
  const tally = new Tally()
  tally.add(end[1] - start[1], start[0] === null || end[0] === null ? null : end[0] - start[0], HANDOFFS)
  return { ...percentiles(samples), ...tally.perOp() }
}

// One polylock client connected and holding 100 locks (the default lease, so
// its renewals run), making no calls: this process's and the server's CPU
// over IDLE_S, in % of one core.
async function idle(url) {
  const LOCKS = 100
  const impl = await open('polylock', url)
  const prefix = key('idle')
  const guards = []
  for (let i = 0; i < LOCKS; i++) guards.push(await impl.acquire(`${prefix}/${i}`))
  await sleep(1000) // the acquires' aftermath settles
  const t0 = now()
  const [client, server] = await span(url, () => sleep(IDLE_S * 1000))
  const seconds = toMs(now() - t0) / 1000
  for (const g of guards) await impl.release(g)
  await impl.close()
  return {
    locks: LOCKS,
    seconds,
    clientCorePct: (client / 1e6 / seconds) * 100,
    serverCorePct: server === null ? null : (server / 1e6 / seconds) * 100,
  }
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

const results = {
  settings: { QUICK, WARMUP, ITERATIONS, HANDOFFS, HOLD_MS, POLL_MS, PACE_MS, PACED_ITERATIONS, IDLE_S, redis: REDIS, zk: ZK ?? null, zkPid: ZK_PID },
  redis: {},
  zookeeper: {},
  throughput: throughputs,
}
const onRedis = await uncontendedOnRedis()
const pacedRedis = await paced(KINDS, REDIS)
results.floor = onRedis.floor
results.rawScripts = onRedis.rawScripts
for (const kind of KINDS) {
  results.redis[kind] = { uncontended: onRedis.uncontended[kind], paced: pacedRedis[kind], handoff: await handoff(kind, REDIS) }
  console.error(`done: ${kind} on redis`)
}
if (ZK) {
  results.zookeeper.polylock = {
    uncontended: await uncontended('polylock', ZK),
    paced: (await paced(['polylock'], ZK)).polylock,
    handoff: await handoff('polylock', ZK),
  }
  console.error('done: polylock on zookeeper')
}
results.idle = await idle(REDIS)
console.error(`idle: ${JSON.stringify(results.idle)}`)
infoConn.disconnect()

const us = (ms) => (ms * 1000).toFixed(0)
const cpu = (x) => (x === null || x === undefined ? '-' : x.toFixed(1))
const ratio = (a, b) => `${(a / b).toFixed(2)}x`
const lines = [
  `Node ${process.version}; ${ITERATIONS} uncontended acquire+release back to back after ${WARMUP} warm-up (the floor and the Redis implementations interleaved, in batches of ${BATCH}); ${HANDOFFS} cross-process handoffs`,
  `(holder releases -> waiter in another process returns, process.hrtime.bigint()); peers poll every ${POLL_MS} ms. Times in µs.`,
  `Paced: ${PACED_ITERATIONS} acquire+release each after a ${PACE_MS} ms pause (out of the latency, in the CPU), implementations interleaved the same way.`,
  "Client CPU: this process's user + sys (process.cpuUsage(), every thread) over each timed batch, per operation; handoff: the holder's and the waiter's processes per round.",
  "Server CPU: Redis `INFO cpu`, ZooKeeper's JVM threads from /proc.",
  '',
  '| backend | implementation | metric | p50 | p99 | client CPU µs/op | server CPU µs/op | polylock/this p50 | polylock/this client CPU |',
  '| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |',
]
for (const b of ['redis', 'zookeeper']) {
  const poly = results[b].polylock
  for (const [kind, r] of Object.entries(results[b])) {
    for (const metric of ['uncontended', 'paced', 'handoff']) {
      const m = r[metric]
      if (!m) continue
      const peer = kind !== 'polylock' && poly?.[metric]
      lines.push(
        `| ${b} | ${kind} | ${metric === 'uncontended' ? 'back to back' : metric} | ${us(m.p50)} | ${us(m.p99)} | ${cpu(m.clientCpuUs)} | ${cpu(m.serverCpuUs)} | ${peer ? ratio(poly[metric].p50, m.p50) : ''} | ${peer ? ratio(poly[metric].clientCpuUs, m.clientCpuUs) : ''} |`,
      )
    }
  }
}
const floorRow = (label, r, vs) =>
  `| redis | ${label} | back to back | ${us(r.p50)} | ${us(r.p99)} | ${cpu(r.clientCpuUs)} | ${cpu(r.serverCpuUs)} | ${vs} | |`
lines.push(floorRow('floor: ioredis PING', results.floor, ''))
lines.push(floorRow("raw: polylock's two scripts over ioredis", results.rawScripts, ratio(results.redis.polylock.uncontended.p50, results.rawScripts.p50)))
const idleRow = results.idle
lines.push(
  '',
  `Idle: one polylock client holding ${idleRow.locks} Redis locks (default lease, renewals running), no calls, ${idleRow.seconds.toFixed(1)} s: client ${idleRow.clientCorePct.toFixed(3)}% of one core, server ${cpu(idleRow.serverCorePct)}%.`,
)
lines.push('', `Throughput, acquire+release per second across ${TP_LOCKS} distinct locks from one client (${TP_LOOPS} concurrent async loops,`,
  `\`await lock.acquire()\` / \`release()\`, ${TP_MS / 1000} s after 0.5 s warm-up):`, '', '| backend | ops/s |', '| --- | ---: |')
for (const [b, ops] of Object.entries(throughputs)) lines.push(`| ${b} | ${ops} |`)
const table = lines.join('\n') + '\n'
process.stdout.write(table)
const here = new URL('.', import.meta.url)
writeFileSync(new URL('results.md', here), table)
writeFileSync(new URL('results.json', here), JSON.stringify(results, null, 2) + '\n')
process.exit(0)
