// The runner of the language-neutral conformance scenarios
// (tests/conformance/*.json, conformance.test.mjs runs each), run
// through the public API. Owner numbers map to async contexts: an owner's
// first hold is a `withLock` whose callback then serves that owner's later
// steps (re-entries, hold counts) inside its async context; releasing the
// last hold ends the callback. Outcome names map onto the error classes:
// LockTimeoutError is `would_block` for a zero timeout and `timeout`
// otherwise, NotHeldError `not_held`, LockLostError `lost`, TypeError with
// code ERR_POLYLOCK_INVALID_NAME/URL `invalid_name`/`invalid_url`,
// ConnectionError `connect_error`, UpgradeRefusedError `upgrade_refused`,
// PermitsMismatchError `permits_mismatch`, RangeError with code
// ERR_POLYLOCK_INVALID_OPTION `invalid_option`.
//
// Semaphore scenarios (`"permits": N`, steps in mode `permits`): each
// (client, owner) names one grant, the Permits guard its acquire resolved
// to; `release` releases that guard (a spent one again: not_held),
// `await_lost` watches its signal. The semaphore of a step is
// `clients[client].semaphore(name, { permits: step.permits ?? N })`. On
// Redis `server_permits` is `ZCARD {NAME}:timeout` and `server_clean` wants
// that empty and no polylock_semqueue keys (the counter stays); on ZooKeeper
// (Curator's InterProcessSemaphoreV2 layout, NAME with a leading `/`)
// `server_permits` is the number of children of NAME/leases and
// `server_clean` wants none under NAME/locks (Curator's mutex) nor
// NAME/leases (the NAME/polylock_permits record of N stays), read through
// helpers' zkChildren; `expire_lease` is the session expiry, as for a lock.
//
// POLYLOCK_NODE_ENTRY=polylock/wasm runs the same scenarios through the
// WebAssembly package (Redis only: see NOT_IN_WASM for what it cannot express).
//
// Backends `sentinel` and `cluster` (REDIS_VARIANTS): every Redis scenario
// once more through the redis+sentinel:// URL of POLYLOCK_TEST_SENTINEL
// (scripts/services start --sentinel) and the redis+cluster:// URL of
// POLYLOCK_TEST_CLUSTER (scripts/services start --cluster), same expected
// results; the server_* and expire_lease steps look at the master the
// sentinels name, or at the cluster master that serves the lock's slot.
// Every scenario with a `redis` backend is repeated; the `any` ones are not
// (their only steps are connects to URLs of their own, so a repeat would be
// the same run). Skipped, saying why, when the variable is unset.
import assert from 'node:assert/strict'
import { readdirSync, readFileSync } from 'node:fs'
import { setTimeout as sleep } from 'node:timers/promises'

import { History } from './conformance-history.mjs'
import {
  eventually,
  expireRedisPermits,
  rawRedis,
  redisLeftovers,
  redisPermitsHeld,
  semaphoreKeys,
  semaphoreLeftovers,
  unique,
  zkChildren,
} from './helpers.mjs'

const entry = process.env.POLYLOCK_NODE_ENTRY ?? 'polylock'
const { connect, ConnectionError, LockLostError, LockTimeoutError, NotHeldError, PermitsMismatchError, UpgradeRefusedError } =
  await import(entry)
export const wasm = entry === 'polylock/wasm'
/** Scenarios (or backends) polylock/wasm cannot run, and why. */
export const NOT_IN_WASM = {
  zookeeper: 'polylock/wasm speaks Redis only (see docs/wasm.md: no pure-JS ZooKeeper client on npm has what the core needs)',
  'unreachable-zookeeper': 'polylock/wasm refuses a zk:// URL as invalid_url before any connection is tried',
  sentinel: 'polylock/wasm speaks to one Redis server and refuses redis+sentinel:// (bindings-wasm/src/driver.rs)',
  cluster: 'polylock/wasm speaks to one Redis server and refuses redis+cluster:// (bindings-wasm/src/driver.rs)',
}

const dir = new URL('../../tests/conformance/', import.meta.url)
export const scenarios = readdirSync(dir)
  .filter((f) => f.endsWith('.json'))
  .sort()
  .map((f) => JSON.parse(readFileSync(new URL(f, dir), 'utf8')))
const urls = {
  redis: process.env.POLYLOCK_TEST_REDIS,
  zookeeper: process.env.POLYLOCK_TEST_ZK,
}
/**
 * The Redis deployments besides the single server on which every Redis
 * scenario runs once more: its URL (unset: skipped, saying `unset`), and
 * `direct(url, name)`, the redis:// URL of the server that holds lock `name`.
 */
export const REDIS_VARIANTS = {
  sentinel: {
    url: process.env.POLYLOCK_TEST_SENTINEL,
    unset: 'POLYLOCK_TEST_SENTINEL is unset: run scripts/services start --sentinel',
    direct: (url) => sentinelMaster(url),
  },
  cluster: {
    url: process.env.POLYLOCK_TEST_CLUSTER,
    unset: 'POLYLOCK_TEST_CLUSTER is unset: run scripts/services start --cluster',
    direct: (url, name) => slotMaster(url, name),
  },
}

/** redis:// URL of the master, as the first answering sentinel's INFO names it. */
async function sentinelMaster(url) {
  const [, rest] = url.split('://')
  const [hosts, path] = rest.split('/')
  const master = path.split('?')[0]
  for (const host of hosts.split('@').pop().split(',')) {
    let raw
    try {
      raw = await rawRedis(`redis://${host}`)
      const info = await raw.command('INFO', 'sentinel')
      const line = info.split('\r\n').find((l) => l.includes(`name=${master},`))
      const address = line?.match(/address=([^,]+)/)?.[1]
      if (address) return `redis://${address}`
    } catch {
      // this sentinel does not answer: ask the next
    } finally {
      raw?.close()
    }
  }
  throw new Error(`no sentinel of ${url} names a master`)
}

/**
 * redis:// URL of the master that serves `key`'s slot in the cluster of a
 * redis+cluster:// URL: the node the first seed redirects a read of `key`
 * to (MOVED, as `redis-cli -c` follows it), or that seed if it serves the slot.
 */
async function slotMaster(url, key) {
  const seed = `redis://${url.split('://')[1].split('@').pop().split(/[/?,]/)[0]}`
  const raw = await rawRedis(seed)
  try {
    await raw.command('EXISTS', key)
    return seed
  } catch (e) {
    const moved = e.message.match(/^MOVED \d+ (\S+)$/)
    if (!moved) throw e
    return `redis://${moved[1]}`
  } finally {
    raw.close()
  }
}

/** A step's lock: the mutex, or a half of the read-write lock (`mode`). */
function modeOf(step) {
  return step.mode ?? 'mutex'
}

function outcome(e, timeoutMs) {
  if (e instanceof LockTimeoutError) return timeoutMs === 0 ? 'would_block' : 'timeout'
  if (e instanceof NotHeldError) return 'not_held'
  if (e instanceof LockLostError) return 'lost'
  if (e instanceof ConnectionError) return 'connect_error'
  if (e instanceof UpgradeRefusedError) return 'upgrade_refused'
  if (e instanceof PermitsMismatchError) return 'permits_mismatch'
  if (e instanceof RangeError && e.code === 'ERR_POLYLOCK_INVALID_OPTION') return 'invalid_option'
  if (e instanceof TypeError && e.code === 'ERR_POLYLOCK_INVALID_NAME') return 'invalid_name'
  if (e instanceof TypeError && e.code === 'ERR_POLYLOCK_INVALID_URL') return 'invalid_url'
  if (e?.name === 'AbortError') return 'cancelled'
  throw e
}

/**
 * One owner: an async context, entered by its first hold's withLock. Its
 * locks by step mode: `mutex`, and the read-write lock's `read` and `write`
 * (one owner across both halves, so upgrade and downgrade are its own).
 */
class Owner {
  #tasks = []
  #wake = null
  base = null // { end(), done: Promise, mode } while the withLock callback runs
  guards = [] // { mode, guard }: holds taken inside the base's context, innermost last
  spent = {} // per mode: a guard already released (releasing it again is not_held)
  lastGuard = null

  #locks = {}

  /** `make(mode)` makes the owner's handle for a mode, on first use. */
  constructor(make) {
    this.make = make
  }

  lock(mode) {
    return (this.#locks[mode] ??= this.make(mode))
  }

  /**
   * Runs `fn` inside this owner's async context (or outside if it holds
   * nothing). Its outcome, a throw included, is the returned promise's; if
   * the context ends before `fn` has run (its withLock settled, or the
   * scenario was abandoned), the promise rejects with why.
   */
  run(fn) {
    if (!this.base) return Promise.resolve().then(fn)
    return new Promise((resolve, reject) => {
      this.#tasks.push({ start: () => Promise.resolve().then(fn).then(resolve, reject), fail: reject })
      this.#wake?.()
    })
  }

  /** The context ended: the steps queued for it fail with `cause` instead of waiting forever. */
  #failQueued(cause) {
    for (const task of this.#tasks.splice(0)) task.fail(cause)
  }

  /**
   * Ends the owner's context whatever step is under way: its withLock
   * callback returns (releasing the hold) and every step queued for it
   * fails. The runner calls it when a scenario stops, passed or failed, so
   * that no callback is left waiting for steps that will never come.
   */
  abandon(cause = new Error('the scenario ended while this owner held the lock')) {
    const base = this.base
    this.base = null
    this.#failQueued(cause)
    base?.end()
  }

  async acquire(mode, timeoutMs, signal) {
    const options = { timeoutMs, signal }
    const lock = this.lock(mode)
    if (this.base) {
      const g = await this.run(() => lock.acquire(options))
      this.guards.push({ mode, guard: g })
      this.lastGuard = g
      return g
    }
    return new Promise((resolve, reject) => {
      let end
      const ended = new Promise((r) => (end = r))
      let granted = false
      // The callback runs after withLock's own awaited acquire, so `done` is set by then.
      const done = lock.withLock(async (guard) => {
        granted = true
        this.base = { end, done, guard, mode }
        this.lastGuard = guard
        resolve(guard)
        for (;;) {
          while (this.#tasks.length) await this.#tasks.shift().start()
          const next = await Promise.race([ended.then(() => 'end'), new Promise((r) => (this.#wake = r))])
          this.#wake = null
          if (next === 'end' && this.#tasks.length === 0) return
        }
      }, options)
      done.then(
        () => this.#contextEnded(done, new Error('the owner\'s withLock returned without a release step')),
        (e) => {
          if (!granted) reject(e)
          this.#contextEnded(done, e)
        },
      )
    })
  }

  /**
   * The withLock `done` settled. After a release step that is the end of
   * the context; otherwise (its callback failed) the owner holds nothing any
   * more, and the steps queued for it fail with `cause`.
   */
  #contextEnded(done, cause) {
    if (this.base?.done !== done) return
    this.base = null
    this.#failQueued(cause)
  }

  async release(mode) {
    const i = this.guards.findLastIndex((g) => g.mode === mode)
    if (i >= 0) {
      const [{ guard }] = this.guards.splice(i, 1)
      this.spent[mode] = guard
      return guard.release()
    }
    if (this.base?.mode === mode) {
      // Holds of other modes taken inside it (a downgrade's read) outlive it.
      const { end, done, guard } = this.base
      this.base = null
      this.spent[mode] = guard
      end()
      return done
    }
    if (this.spent[mode]) return this.spent[mode].release()
    return null // never held: nothing to call release on
  }

  /** The hold count in `mode`, or null when Node cannot ask it (see the caller). */
  holdCount(mode) {
    if (this.base) return this.run(() => this.lock(mode).holdCount)
    // A guard that outlived its owner's context (a downgrade's read after the
    // write's withLock ended): holdCount answers for the current async
    // context only, and that context is gone.
    if (this.guards.some((g) => g.mode === mode)) return Promise.resolve(null)
    return Promise.resolve(0)
  }
}

/**
 * The longest one step may take: the longest a scenario waits in one step
 * is 10 s (`within_ms`), and a scenario's test gives up at 60 s.
 */
export const STEP_DEADLINE_MS = 30_000

/**
 * `step`'s promise, or a failure naming the step once `ms` pass. A step
 * that never settles (waiting on an owner's context that will not serve
 * it, a server that does not answer) fails the scenario with its name, and
 * the scenario's cleanup runs: its test's own timeout would only say the
 * test ran out, with the clients still open and a withLock still holding.
 */
function withinStepDeadline(step, ms, at) {
  let timer
  const late = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${at}: did not settle within ${ms} ms`)), ms)
  })
  return Promise.race([step, late]).finally(() => clearTimeout(timer))
}

/**
 * Runs scenario `sc` on `backend`; resolves with its findings (what Node
 * cannot express), rejects with the first failing step's error.
 * `stepDeadlineMs`: see STEP_DEADLINE_MS.
 */
export async function runScenario(sc, backend, { stepDeadlineMs = STEP_DEADLINE_MS } = {}) {
  const variant = REDIS_VARIANTS[backend]
  const url = variant?.url ?? urls[backend]
  const name = unique(`conf-${sc.name}`)
  // The lock steps' operation history (POLYLOCK_HISTORY_DIR), for histcheck.
  const history = new History(wasm ? 'wasm' : 'node', backend, name)
  // Where the server_* steps look: the URL itself, or the server of a variant that holds the lock.
  const direct = variant ? await variant.direct(url, name) : url
  const redis = backend === 'redis' || variant !== undefined
  const findings = []
  // Aborted when the scenario ends, passed or failed: a step cut short by its
  // deadline must not leave its own timers keeping the process alive.
  const scenarioOver = new AbortController()
  const clients = []
  const options = { _debugFaults: backend === 'zookeeper', sessionTimeoutMs: 2000 }
  if (sc.lease_ms) options.leaseMs = sc.lease_ms
  for (let i = 0; i < (backend === 'any' ? 0 : sc.clients); i++) clients.push(await connect(url, options))
  const observer = backend === 'any' ? null : await connect(url)
  const owners = new Map()
  const owner = (c, o) => {
    const k = `${c}/${o}`
    if (!owners.has(k)) {
      owners.set(k, new Owner((mode) => (mode === 'mutex' ? clients[c].lock(name) : clients[c].rwLock(name)[mode])))
    }
    return owners.get(k)
  }
  // Semaphore scenarios: one Semaphore per (client, permits), one grant per (client, owner).
  const semaphores = new Map()
  const semaphore = (c, permits) => {
    const k = `${c}/${permits}`
    if (!semaphores.has(k)) semaphores.set(k, clients[c].semaphore(name, { permits }))
    return semaphores.get(k)
  }
  const grants = new Map() // `${client}/${owner}` -> { held: Permits | null, last: Permits }
  const acquirePermits = async (step, signal) => {
    const sem = semaphore(step.client, step.permits ?? sc.permits)
    const g = await sem.acquire({ count: step.count, timeoutMs: step.timeout_ms, signal })
    const k = `${step.client}/${step.owner}`
    assert.ok(!grants.get(k)?.held, `owner ${k} was granted a second grant while holding one`)
    grants.set(k, { held: g, last: g })
    return g
  }
  const releasePermits = (step) => {
    const grant = grants.get(`${step.client}/${step.owner}`)
    if (!grant) return null // never granted: nothing to call release on
    const g = grant.held ?? grant.last // a spent guard again: not_held
    grant.held = null
    return g.release()
  }
  const permitsMode = (step) => modeOf(step) === 'permits'
  const tokens = {}
  const background = new Map()
  const checkToken = (step, token) => {
    if (step.save_token) tokens[step.save_token] = token
    if (step.token_eq) assert.equal(token, tokens[step.token_eq], `token ${token} != ${step.token_eq}`)
    if (step.token_gt) assert.ok(token > tokens[step.token_gt], `token ${token} not > ${step.token_gt}`)
  }
  const serverWaiters = async () => {
    if (redis) {
      const raw = await rawRedis(direct)
      try {
        return await raw.command('ZCARD', sc.permits ? semaphoreKeys(name).queue : `polylock_queue:{${name}}`)
      } finally {
        raw.close()
      }
    }
    return (await observer.status(name)).waiters ?? 0
  }
  // The permits held on the server: Redis, Redisson's set of permit ids;
  // ZooKeeper, Curator's lease nodes under NAME/leases.
  const permitsHeld = async () =>
    redis ? await redisPermitsHeld(direct, name) : (await zkChildren(direct, `${name}/leases`)).length
  // What a free semaphore does not have: on Redis held permit ids and the
  // waiter queue (the counter stays); on ZooKeeper Curator's mutex nodes
  // (NAME/locks) and lease nodes (NAME/leases) (the polylock_permits record of N stays).
  const semaphoreLeft = async () => {
    if (redis) return semaphoreLeftovers(direct, name)
    const left = []
    for (const sub of ['locks', 'leases']) {
      for (const child of await zkChildren(direct, `${name}/${sub}`)) left.push(`${sub}/${child}`)
    }
    return left
  }
  const serverHeld = async () => {
    if (sc.permits) return (await permitsHeld()) > 0
    if (redis) {
      const raw = await rawRedis(direct)
      try {
        return (await raw.command('EXISTS', name)) === 1
      } finally {
        raw.close()
      }
    }
    return (await observer.status(name)).held
  }
  try {
    const runStep = async (at, step) => {
      switch (step.op) {
        case 'acquire': {
          const t0 = Date.now()
          let got
          history.acquireCall(step, sc.permits)
          try {
            const g = await (permitsMode(step)
              ? acquirePermits(step)
              : owner(step.client, step.owner).acquire(modeOf(step), step.timeout_ms))
            got = 'granted'
            history.acquireReturn(step, g.fencingToken)
            checkToken(step, g.fencingToken)
          } catch (e) {
            got = outcome(e, step.timeout_ms)
            history.acquireReturn(step, undefined, got)
          }
          assert.equal(got, step.expect, at)
          if (step.min_elapsed_ms) assert.ok(Date.now() - t0 >= step.min_elapsed_ms - 5, `${at}: returned too early`)
          break
        }
        case 'release': {
          let got = 'ok'
          history.releaseCall(step)
          try {
            const r = permitsMode(step) ? releasePermits(step) : owner(step.client, step.owner).release(modeOf(step))
            if ((await r) === null) {
              findings.push(`${at}: owner ${step.owner} never held a guard, so there is nothing to release through the API`)
              break
            }
          } catch (e) {
            got = outcome(e)
          }
          history.releaseReturn(step, got)
          assert.equal(got, step.expect, at)
          break
        }
        case 'start_acquire': {
          const ac = new AbortController()
          history.acquireCall(step, sc.permits)
          const p = permitsMode(step)
            ? acquirePermits(step, ac.signal)
            : owner(step.client, step.owner).acquire(modeOf(step), undefined, ac.signal)
          p.then(
            (g) => history.acquireReturn(step, g.fencingToken),
            (e) => history.acquireReturn(step, undefined, e?.name === 'AbortError' ? 'cancelled' : String(e?.name)),
          )
          background.set(step.id, { p, ac })
          break
        }
        case 'await': {
          const { p } = background.get(step.id)
          let got
          const timer = sleep(step.within_ms ?? 10_000, undefined, { signal: scenarioOver.signal }).then(() => 'not within')
          try {
            const r = await Promise.race([p, timer])
            if (r === 'not within') got = r
            else {
              got = 'granted'
              checkToken(step, r.fencingToken)
            }
          } catch (e) {
            got = outcome(e)
          }
          assert.equal(got, step.expect, at)
          break
        }
        case 'cancel': {
          const { p, ac } = background.get(step.id)
          ac.abort()
          assert.equal(await p.then(() => 'granted', (e) => outcome(e)), 'cancelled', at)
          break
        }
        case 'hold_count': {
          if (permitsMode(step)) {
            findings.push(`${at}: a semaphore has no hold count (one grant per owner, not reentrant)`)
            break
          }
          const n = await owner(step.client, step.owner).holdCount(modeOf(step))
          if (n === null) {
            findings.push(`${at}: not expressible in Node: the hold outlived the withLock context it was taken in`)
            break
          }
          assert.equal(n, step.expect_count, at)
          break
        }
        case 'server_state':
          assert.equal((await serverHeld()) ? 'held' : 'free', step.expect, at)
          break
        case 'server_clean': {
          const clean = await eventually(async () => {
            if (sc.permits) return (await semaphoreLeft()).length === 0
            if (redis) return (await redisLeftovers(direct, name)).length === 0
            const s = await observer.status(name)
            return !s.held && (s.waiters ?? 0) === 0
          }, step.within_ms ?? 5000)
          const left = sc.permits ? await semaphoreLeft() : redis && (await redisLeftovers(direct, name))
          assert.ok(clean, `${at}: something left on the server${left ? `: ${left.join(', ')}` : ''}`)
          break
        }
        case 'server_permits': {
          const ok = await eventually(async () => (await permitsHeld()) === step.expect_count, step.within_ms ?? 5000)
          assert.ok(ok, `${at}: server permits != ${step.expect_count} (${await permitsHeld()})`)
          break
        }
        case 'server_waiters': {
          const ok = await eventually(async () => (await serverWaiters()) === step.expect_count, step.within_ms ?? 5000)
          assert.ok(ok, `${at}: server waiters != ${step.expect_count} (${await serverWaiters()})`)
          break
        }
        case 'expire_lease':
          if (redis && sc.permits) {
            await expireRedisPermits(direct, name)
          } else if (redis) {
            const raw = await rawRedis(direct)
            await raw.command('DEL', name)
            raw.close()
          } else {
            await clients[step.client]._debugExpireSession()
          }
          break
        case 'await_lost': {
          const g = permitsMode(step)
            ? grants.get(`${step.client}/${step.owner}`)?.last
            : owner(step.client, step.owner).lastGuard
          assert.ok(g, `${at}: that owner was never granted`)
          const lost = await eventually(() => g.signal.aborted, step.within_ms ?? 10_000)
          assert.ok(lost && g.signal.reason instanceof LockLostError, `${at}: not told of the loss`)
          history.lost(step)
          break
        }
        case 'lock_name': {
          const c = clients[0] ?? observer
          let got = 'ok'
          try {
            c.lock(step.name)
          } catch (e) {
            got = outcome(e)
          }
          assert.equal(got, step.expect, at)
          break
        }
        case 'connect': {
          let got = 'ok'
          const t0 = Date.now()
          try {
            const c = await connect(step.url)
            await c.close()
          } catch (e) {
            got = outcome(e)
          }
          assert.equal(got, step.expect, at)
          if (step.within_ms) assert.ok(Date.now() - t0 <= step.within_ms, `${at}: took ${Date.now() - t0} ms`)
          break
        }
        case 'sleep':
          await sleep(step.ms, undefined, { signal: scenarioOver.signal })
          break
        default:
          throw new Error(`unknown op ${step.op}`)
      }
    }
    for (const [i, step] of sc.steps.entries()) {
      const at = `step ${i} (${step.op})`
      await withinStepDeadline(runStep(at, step), stepDeadlineMs, at)
    }
  } finally {
    scenarioOver.abort()
    // Every withLock callback returns (its hold released) before the
    // clients close, whether the scenario passed or a step failed.
    for (const o of owners.values()) o.abandon()
    await Promise.all(clients.map((c) => c.close()))
    await observer?.close()
  }
  return findings
}
