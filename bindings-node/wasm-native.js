'use strict'
// The native layer of `polylock/wasm`: the same surface as the napi addon
// (see src/*.rs: connect, NativeClient, NativeLock, NativeGuard, Canceller,
// nextOwnerId), built on the core's lock table compiled to WebAssembly
// (bindings-wasm/, polylock.wasm next to this file) and ioredis. api.js puts
// the public API on top of it exactly as on the addon.
//
// This file decides nothing about locks. It is the driver of the drive
// contract (core/src/lib.rs): it gives the table one input at a time (API
// calls, replies, pub/sub messages, connection changes, the timer) with the
// time from a clock that counts suspend (wasm-clock.js), executes every
// output in order (events to the callers waiting for them, commands to
// Redis, the one timer), gives back grants nobody took, and supplies
// 128-bit nonces from
// crypto.getRandomValues. Errors come from the module as the addon's JSON
// payloads, so errors.js builds the same classes from them.

const { readFileSync } = require('node:fs')
const { join } = require('node:path')
const { SuspendAwareClock, timerDelay } = require('./wasm-clock.js')

const PAYLOAD_PREFIX = 'polylock:'
const noop = () => {}

function nativeError(payload) {
  return new Error(PAYLOAD_PREFIX + JSON.stringify(payload))
}

/**
 * A fresh 128-bit nonce from the OS's generator, in hex. The bytes are drawn
 * 256 nonces at a time: one getRandomValues call cost about 13 µs of an
 * uncontended acquire+release here (3.6% of its profile), and the bytes are
 * no less random for being drawn together. Each is used once and zeroed.
 */
const NONCES_PER_DRAW = 256
const HEX = Array.from({ length: 256 }, (_, b) => b.toString(16).padStart(2, '0'))
let nonceBytes = new Uint8Array(0)
let nonceAt = 0
function nonce() {
  if (nonceAt === nonceBytes.length) {
    nonceBytes = crypto.getRandomValues(new Uint8Array(16 * NONCES_PER_DRAW))
    nonceAt = 0
  }
  let hex = ''
  for (let i = nonceAt; i < nonceAt + 16; i++) hex += HEX[nonceBytes[i]]
  nonceBytes.fill(0, nonceAt, nonceAt + 16)
  nonceAt += 16
  return hex
}

/** The instantiated module and its JSON calls (see bindings-wasm/src/lib.rs, "The ABI"). */
class Module {
  #x
  #enc = new TextEncoder()
  #dec = new TextDecoder()

  constructor(instance) {
    this.#x = instance.exports
  }

  #write(text) {
    const max = text.length * 3
    const ptr = this.#x.input(max)
    return this.#enc.encodeInto(text, new Uint8Array(this.#x.memory.buffer, ptr, max)).written
  }

  #read(len) {
    return JSON.parse(this.#dec.decode(new Uint8Array(this.#x.memory.buffer, this.#x.output(), len)))
  }

  /** A table: `{ handle, endpoint, id }`, or throws the module's error payload. */
  newTable(config) {
    const handle = this.#x.table_new(this.#write(JSON.stringify(config)))
    const answer = this.#read(this.#x.output_len())
    if (handle === 0) throw nativeError(answer.err)
    return { handle, ...answer }
  }

  /** One call on a table: `{ ok | err, out }`. */
  call(handle, request) {
    return this.#read(this.#x.table_call(handle, this.#write(JSON.stringify(request))))
  }

  free(handle) {
    this.#x.table_free(handle)
  }

  nextOwnerId() {
    return this.#x.next_owner_id()
  }
}

let loading
/** Set once the module is instantiated (owner ids are asked for synchronously, after a connect). */
let loaded
/** The module, compiled once per process from polylock.wasm next to this file. */
function loadModule() {
  loading ??= WebAssembly.instantiate(readFileSync(join(__dirname, 'polylock.wasm')), {}).then(
    ({ instance }) => (loaded = new Module(instance)),
  )
  return loading
}

/** The module's own errors for things only this layer sees (a connect failure, a closed client). */
function failure(mod, handle, fields) {
  return nativeError(mod.call(handle, { op: 'fail', ...fields }).err)
}

/** An ioredis reply as the module reads it (bindings-wasm/src/wire.rs). */
function value(v) {
  if (v === null || v === undefined) return null
  if (Buffer.isBuffer(v)) return { b: v.toString('latin1') }
  if (Array.isArray(v)) return v.map(value)
  if (typeof v === 'string' || typeof v === 'number') return { i: String(v) }
  return { s: String(v) }
}

const redisReply = (v) => ({ v: value(v) })
/** Subscribe and unsubscribe: confirmed, nothing to report. */
const DONE = () => ({ done: true })

let ioredis
function loadIoredis() {
  if (ioredis === undefined) {
    try {
      ioredis = require('ioredis')
    } catch (e) {
      throw new Error('polylock/wasm needs the ioredis package: npm install ioredis', { cause: e })
    }
  }
  return ioredis
}

/** A request that got no answer (`failed`) or the server's refusal (`refused`, its text). */
function replyOfError(e) {
  const { ReplyError } = loadIoredis()
  return e instanceof ReplyError ? { refused: e.message } : { failed: e?.message ?? String(e) }
}

class Canceller {
  #onCancel = null
  #cancelled = false

  cancel() {
    if (this.#cancelled) return
    this.#cancelled = true
    this.#onCancel?.()
  }

  /** @internal */
  set onCancel(fn) {
    this.#onCancel = fn
  }
}

/** The loss signal of one grant, shared by its re-entries (the runtime's HoldState). */
class Hold {
  reason = null
  listeners = []
}

const holdKey = (name, owner) => `${owner}\u0000${name}`

/** Frees a table once its client (and so every lock and guard of it) is garbage. */
const tables = new FinalizationRegistry(({ mod, handle }) => mod.free(handle))

async function connect(url, options = {}) {
  const Redis = loadIoredis()
  const mod = await loadModule()
  const { handle, endpoint, id } = mod.newTable({ url, leaseMs: options.leaseMs, clientId: nonce() })
  const client = new WasmClient(mod, handle, id)
  tables.register(client, { mod, handle })
  try {
    await client._open(Redis, endpoint, options)
  } catch (e) {
    await client.close()
    throw e
  }
  return client
}

class WasmClient {
  #mod
  #handle
  #id
  #cmd
  #sub
  #scripts = new Map()
  #acquires = new Map()
  #releases = new Map()
  #statuses = new Map()
  #holds = new Map()
  /** Outputs not executed yet, in order: an input given while executing appends (the drive contract). */
  #queue = []
  #pumping = false
  #timer
  /** The table's time: counts a suspend, so deadlines that passed asleep are seen at the resume. */
  #clock = new SuspendAwareClock()
  #closed = false
  #quiet = null
  /** Pending calls keep the process alive as a napi promise does; idle connections do not. */
  #busy = 0
  #keepAlive = setInterval(noop, 0x3fffffff)

  constructor(mod, handle, id) {
    this.#mod = mod
    this.#handle = handle
    this.#id = id
    this.#keepAlive.unref()
  }

  get backend() {
    return 'redis'
  }

  get id() {
    return this.#id
  }

  /** @internal Opens the command connection and the pub/sub connection. */
  async _open(Redis, endpoint, options) {
    const connectTimeout = options.connectTimeoutMs ?? 5000
    const settings = {
      lazyConnect: true,
      connectTimeout,
      // Unanswered within the request timeout: the table retries (Reply::Failed).
      commandTimeout: options.requestTimeoutMs ?? 5000,
      // No resending by ioredis: a command sent again after later ones would
      // break the order the table relies on; the table retries itself.
      maxRetriesPerRequest: 0,
      enableOfflineQueue: false,
      autoResendUnfulfilledCommands: false,
      // Integers as strings, bulk strings as Buffers (callBuffer): exact.
      stringNumbers: true,
      retryStrategy: (attempt) => Math.min(50 * attempt, 500),
      // No CLIENT SETINFO at connect: a server before 7.2 refuses it, and
      // ioredis then leaves its command timer running (the process would
      // stay alive a request timeout after close()).
      disableClientInfo: true,
      tls: endpoint.tls ? { ca: endpoint.ca ? readFileSync(endpoint.ca) : undefined } : undefined,
    }
    const open = async (conn) => {
      conn.on('error', noop) // reported through replies and connection changes
      conn.on('connect', () => conn.stream?.unref?.())
      let timer
      const timedOut = new Promise((_, reject) => {
        timer = setTimeout(() => reject(new Error('timed out')), connectTimeout)
      })
      try {
        await Promise.race([conn.connect(), timedOut])
      } catch (e) {
        conn.disconnect()
        throw failure(this.#mod, this.#handle, { kind: 'connect', addr: endpoint.addr, reason: e?.message ?? String(e) })
      } finally {
        clearTimeout(timer)
      }
    }
    this.#cmd = new Redis(endpoint.url, settings)
    await open(this.#cmd)
    // Subscriber mode: ioredis resubscribes by itself after a reconnect.
    this.#sub = new Redis(endpoint.url, { ...settings, autoResubscribe: true })
    await open(this.#sub)
    let down = false
    this.#sub.on('message', (channel, payload) => this.#input({ op: 'message', channel, payload }))
    this.#sub.on('close', () => {
      if (down || this.#closed) return
      down = true
      this.#input({ op: 'connection', up: false })
    })
    // Ready again: ioredis resends the subscriptions right after 'ready'; the
    // PING's answer comes after theirs, so Connected means resubscribed (as
    // the runtime reports it). Messages may have been missed meanwhile.
    this.#sub.on('ready', () => {
      if (!down) return
      this.#sub.ping().then(
        () => {
          if (!down || this.#closed) return
          down = false
          this.#input({ op: 'connection', up: true })
        },
        noop, // dropped again: the next 'ready' tries again
      )
    })
  }

  // ---- the table ------------------------------------------------------

  /** One call; its outputs join the queue (run them with #pump). Returns `ok`, throws `err`. */
  #call(request) {
    request.now = this.#clock.now()
    const answer = this.#mod.call(this.#handle, request)
    if (answer.out.length) this.#queue.push(...answer.out)
    if (answer.err) {
      this.#pump()
      throw nativeError(answer.err)
    }
    return answer.ok
  }

  /** An input from the connection or the timer. */
  #input(request) {
    try {
      this.#call(request)
    } catch (e) {
      process.emitWarning(`polylock/wasm: the lock table refused an input: ${e.message}`)
    }
    this.#pump()
  }

  #pump() {
    if (this.#pumping) return
    this.#pumping = true
    try {
      while (this.#queue.length) this.#execute(this.#queue.shift())
    } finally {
      this.#pumping = false
    }
    if (this.#quiet && !this.#mod.call(this.#handle, { op: 'hasServerWork' }).ok) this.#quiet()
  }

  #execute(o) {
    switch (o.k) {
      case 'granted': {
        const key = holdKey(o.name, o.owner)
        let hold = this.#holds.get(key)
        if (!hold) this.#holds.set(key, (hold = new Hold()))
        const waiting = this.#acquires.get(o.ticket)
        if (waiting) {
          this.#acquires.delete(o.ticket)
          waiting.resolve(new WasmGuard(this, o.name, o.owner, o.token, hold))
        } else {
          // Nobody takes it (cancelled meanwhile): the table gives it back.
          const stillHeld = this.#call({ op: 'grantUnwanted', name: o.name, owner: o.owner, token: o.token })
          if (!stillHeld) this.#holds.delete(key)
        }
        break
      }
      case 'failed': {
        const waiting = this.#acquires.get(o.ticket)
        this.#acquires.delete(o.ticket)
        waiting?.reject(nativeError(o.err))
        break
      }
      case 'lost': {
        const key = holdKey(o.name, o.owner)
        const hold = this.#holds.get(key)
        if (!hold) break
        this.#holds.delete(key)
        hold.reason = o.reason
        for (const cb of hold.listeners.splice(0)) cb(o.reason)
        break
      }
      case 'released':
        this.#releases.get(o.id)?.()
        this.#releases.delete(o.id)
        break
      case 'status': {
        const waiting = this.#statuses.get(o.id)
        this.#statuses.delete(o.id)
        if (!waiting) break
        if (o.err) waiting.reject(nativeError(o.err))
        else {
          const s = o.ok
          waiting.resolve({ ...s, fencingToken: s.fencingToken == null ? null : BigInt(s.fencingToken) })
        }
        break
      }
      case 'eval': {
        if (o.source !== undefined) this.#scripts.set(o.script, o.source)
        // By SHA1 when the table asks (a NOSCRIPT refusal goes back to it as any refusal does).
        const script = o.sha !== undefined ? ['EVALSHA', o.sha] : ['EVAL', this.#scripts.get(o.script)]
        this.#send(o.id, this.#cmd.callBuffer(...script, o.keys.length, ...o.keys, ...o.args))
        break
      }
      case 'subscribe':
        this.#send(o.id, this.#sub.subscribe(...o.channels), DONE)
        break
      case 'unsubscribe':
        this.#send(o.id, this.#sub.unsubscribe(...o.channels), DONE)
        break
      case 'timeout': {
        clearTimeout(this.#timer)
        // At most a second: the timer does not count a suspend, the table does.
        this.#timer = setTimeout(() => this.#input({ op: 'timeout' }), timerDelay(o.at, this.#clock.now()))
        // A held lock keeps the process alive through api.js's keep-alive handle.
        this.#timer.unref()
        break
      }
      default:
        process.emitWarning(`polylock/wasm: unknown output ${JSON.stringify(o)}`)
    }
  }

  /** Feeds the reply of command `id` back once it comes. */
  #send(id, promise, ok = redisReply) {
    promise.then(
      (v) => this.#input({ op: 'reply', id, reply: ok(v) }),
      (e) => this.#input({ op: 'reply', id, reply: replyOfError(e) }),
    )
  }

  async #busyWhile(promise) {
    if (this.#busy++ === 0) this.#keepAlive.ref()
    try {
      return await promise
    } finally {
      if (--this.#busy === 0) this.#keepAlive.unref()
    }
  }

  // ---- the addon's surface --------------------------------------------

  lock(name, leaseMs) {
    if (this.#closed) throw failure(this.#mod, this.#handle, { kind: 'closed' })
    this.#call({ op: 'lock', name, leaseMs })
    return new WasmLock(this, name, leaseMs)
  }

  rwLockHalf(name) {
    // The table in WebAssembly runs the mutex only, for now.
    throw nativeError({
      kind: 'invalid_option',
      message: `read-write lock ${JSON.stringify(name)}: not supported in polylock/wasm; use the polylock package`,
    })
  }

  semaphore(name) {
    // The table in WebAssembly runs the mutex only, for now.
    throw nativeError({
      kind: 'invalid_option',
      message: `semaphore ${JSON.stringify(name)}: not supported in polylock/wasm; use the polylock package`,
    })
  }

  election(name) {
    // The table in WebAssembly runs the mutex only, for now.
    throw nativeError({
      kind: 'invalid_option',
      message: `election ${JSON.stringify(name)}: not supported in polylock/wasm; use the polylock package`,
    })
  }

  status(name) {
    if (this.#closed) return Promise.reject(failure(this.#mod, this.#handle, { kind: 'closed' }))
    const id = this.#call({ op: 'status', name })
    const answered = new Promise((resolve, reject) => this.#statuses.set(id, { resolve, reject }))
    this.#pump()
    return this.#busyWhile(answered)
  }

  async close() {
    if (this.#closed) return
    this.#closed = true
    const quiet = new Promise((resolve) => (this.#quiet = resolve))
    this.#input({ op: 'close' })
    // As the runtime: wait (at most 5 s) for the server-side cleanup.
    let cap
    await this.#busyWhile(Promise.race([quiet, new Promise((r) => (cap = setTimeout(r, 5000)))]))
    clearTimeout(cap)
    clearTimeout(this.#timer)
    clearInterval(this.#keepAlive)
    await Promise.all([this.#cmd, this.#sub].map((c) => c?.quit().catch(() => c.disconnect())))
  }

  debugExpireSession() {
    return Promise.reject(failure(this.#mod, this.#handle, { kind: 'invalid_option', message: 'debugExpireSession is for ZooKeeper; polylock/wasm speaks Redis only' }))
  }

  /** @internal */
  _acquire(name, leaseMs, owner, timeoutMs, canceller) {
    const ticket = this.#call({ op: 'acquire', name, owner, timeoutMs, leaseMs, nonce: nonce() })
    const outcome = new Promise((resolve, reject) => {
      this.#acquires.set(ticket, { resolve, reject })
      if (canceller) {
        // Withdrawn, the acquire fails `cancelled` once the server holds
        // nothing of it (or is granted, if that came first): the outcome
        // comes as any other.
        canceller.onCancel = () => {
          if (!this.#acquires.has(ticket)) return
          this.#call({ op: 'withdraw', name, ticket })
          this.#pump()
        }
      }
    })
    this.#pump()
    return this.#busyWhile(outcome)
  }

  /** @internal */
  _release(name, owner, token) {
    const progress = this.#call({ op: 'release', name, owner, token })
    if (progress.releasing === undefined) {
      this.#pump()
      return Promise.resolve()
    }
    // The grant's loss signal ends with its release (as the runtime drops its sender).
    this.#holds.delete(holdKey(name, owner))
    const released = new Promise((resolve) => this.#releases.set(progress.releasing, resolve))
    this.#pump()
    return this.#busyWhile(released)
  }

  /** @internal */
  _query(request) {
    return this.#mod.call(this.#handle, request).ok
  }
}

class WasmLock {
  #client
  #leaseMs

  constructor(client, name, leaseMs) {
    this.#client = client
    this.#leaseMs = leaseMs
    this.name = name
  }

  acquire(owner, timeoutMs) {
    return this.#client._acquire(this.name, this.#leaseMs, owner, timeoutMs, null)
  }

  acquireCancellable(owner, timeoutMs, canceller) {
    return this.#client._acquire(this.name, this.#leaseMs, owner, timeoutMs, canceller)
  }

  holdCount(owner) {
    return this.#client._query({ op: 'hold', name: this.name, owner })?.count ?? 0
  }

  isHeldLocally() {
    return this.#client._query({ op: 'isHeldHere', name: this.name })
  }
}

class WasmGuard {
  #client
  #name
  #owner
  #token
  #hold
  #released = false

  constructor(client, name, owner, token, hold) {
    this.#client = client
    this.#name = name
    this.#owner = owner
    this.#token = token
    this.#hold = hold
  }

  get fencingToken() {
    return BigInt(this.#token)
  }

  get lostReason() {
    return this.#hold.reason
  }

  onLost(callback) {
    if (this.#hold.reason == null) this.#hold.listeners.push(callback)
  }

  release() {
    if (this.#released) {
      return Promise.reject(
        nativeError({ kind: 'not_held', message: `this guard of lock ${JSON.stringify(this.#name)} was already released`, lockName: this.#name }),
      )
    }
    this.#released = true
    return this.#client._release(this.#name, this.#owner, this.#token)
  }
}

module.exports = {
  connect,
  Canceller,
  nextOwnerId: () => {
    if (!loaded) throw new Error('polylock/wasm: owner ids come from the module: connect() first')
    return loaded.nextOwnerId()
  },
}
