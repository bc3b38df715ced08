'use strict'
// The JavaScript face of polylock, over either native layer. All lock logic
// is in Rust (the runtime, or the core's table in WebAssembly); this file
// only maps it onto Node conventions: options objects, promises,
// AbortSignal, error classes, Symbol.asyncDispose, and reentrancy per async
// context (the one decision made here: which owner id an acquire runs as;
// semaphores have none: each grant is its own).

const { AsyncLocalStorage } = require('node:async_hooks')
const errors = require('./errors.js')
const { checkOptions, checkMs, checkCount, checkString, checkSignal, checkFunction } = require('./validate.js')

const { fromNative, abortError, LockLostError } = errors

/**
 * The public API over one native layer: the napi addon (index.js) or the
 * core's lock table in WebAssembly (wasm.js, `polylock/wasm`). Both have the
 * same surface (see src/*.rs), so the API, the error classes and their
 * codes are the same by construction. Each build has its own owner context:
 * owner ids come from its native layer's allocator.
 */
function build(native) {
  /**
   * The owner id of the current async context, set by `withLock` for the
   * callback's whole async chain. Outside any `withLock` there is none, and
   * each `acquire()` runs as a fresh owner (so two top-level acquires contend).
   */
  const ownerContext = new AsyncLocalStorage()

  function currentOrFreshOwner() {
    return ownerContext.getStore() ?? native.nextOwnerId()
  }

  /** Runs a native call, turning its tagged errors into polylock's classes. */
  async function call(lockName, fn) {
    try {
      return await fn()
    } catch (e) {
      throw fromNative(e, lockName)
    }
  }

  function callSync(lockName, fn) {
    try {
      return fn()
    } catch (e) {
      throw fromNative(e, lockName)
    }
  }

  /**
   * One native acquire of lock (or semaphore) `name`, wrapped by `wrap` into
   * its guard. `plain()` starts it without a signal (the common path: no
   * canceller, no listener), `cancellable(canceller)` with one: aborting
   * `signal` cancels the native acquire, which leaves nothing on the server.
   */
  async function acquireNative(name, signal, plain, cancellable, wrap) {
    if (signal === undefined) {
      let nativeHold
      try {
        nativeHold = await plain()
      } catch (e) {
        throw fromNative(e, name)
      }
      return wrap(nativeHold)
    }
    if (signal.aborted) throw abortError(signal)

    const canceller = new native.Canceller()
    const onAbort = () => canceller.cancel()
    signal.addEventListener('abort', onAbort, { once: true })
    let nativeHold
    try {
      nativeHold = await cancellable(canceller)
    } catch (e) {
      throw signal.aborted ? abortError(signal) : fromNative(e, name)
    } finally {
      signal.removeEventListener('abort', onAbort)
    }
    const hold = wrap(nativeHold)
    if (signal.aborted) {
      // The grant won the race against the abort: give it back.
      await hold.release().catch(() => {})
      throw abortError(signal)
    }
    return hold
  }

  /** Runs `fn()` while `hold` is held, then releases it, even when `fn` throws (then `fn`'s error wins). */
  async function runAndRelease(hold, fn) {
    let result
    try {
      result = await fn()
    } catch (e) {
      // The callback's error is the one to report; a failed release (the
      // hold was lost meanwhile) is visible on hold.signal already.
      await hold.release().catch(() => {})
      throw e
    }
    await hold.release()
    return result
  }

  /**
   * Connects to a Redis server (`redis://`, `rediss://`), a Redis master
   * through Sentinel (`redis+sentinel://`, `rediss+sentinel://`), a Redis
   * Cluster (`redis+cluster://`, `rediss+cluster://`) or a ZooKeeper
   * ensemble (`zk://`, `zks://`).
   */
  async function connect(url, options) {
    checkString('url', url)
    const o = checkOptions('options', options)
    const nativeOptions = {
      connectTimeoutMs: checkMs('connectTimeoutMs', o.connectTimeoutMs, { min: 1 }),
      requestTimeoutMs: checkMs('requestTimeoutMs', o.requestTimeoutMs, { min: 1 }),
      sessionTimeoutMs: checkMs('sessionTimeoutMs', o.sessionTimeoutMs, { min: 1 }),
      leaseMs: checkMs('leaseMs', o.leaseMs, { min: 1 }),
      // Test hook (see Client._debugExpireSession), deliberately undocumented.
      debugFaults: o._debugFaults === true,
    }
    return new Client(await call(undefined, () => native.connect(url, nativeOptions)))
  }

  /** Internal: a guard of this client was granted / ended (keeps the process alive meanwhile). */
  const kHold = Symbol('polylock.hold')
  const kUnhold = Symbol('polylock.unhold')
  const noop = () => {}

  class Client {
    #native
    #liveGuards = 0
    #closed = false
    /**
     * One timer handle per client, ref'd while the client has unreleased
     * guards: a held lock is work in progress (renewed in the background) and
     * keeps the process alive like an open socket would. Pending native calls
     * keep it alive by themselves (each napi promise holds a ref until settled).
     */
    #keepAlive = undefined

    /** @internal Use `connect()`. */
    constructor(nativeClient) {
      this.#native = nativeClient
    }

    [kHold]() {
      if (this.#closed) return
      if (this.#liveGuards++ === 0) (this.#keepAlive ??= setInterval(noop, 0x3fffffff)).ref()
    }

    [kUnhold]() {
      if (this.#liveGuards > 0 && --this.#liveGuards === 0) this.#keepAlive?.unref()
    }

    /** `'redis'` or `'zookeeper'`. */
    get backend() {
      return this.#native.backend
    }

    /** This client's random id (a UUID), as stored on the server. */
    get id() {
      return this.#native.id
    }

    lock(name, options) {
      checkString('name', name)
      const o = checkOptions('options', options)
      const leaseMs = checkMs('leaseMs', o.leaseMs, { min: 1 })
      return new Lock(callSync(name, () => this.#native.lock(name, leaseMs)), this)
    }

    /**
     * The read-write lock `name`: `.read` and `.write` are Locks (shared and
     * exclusive halves). Inside `withLock` of `.read`, `.write` is refused
     * with UpgradeRefusedError; inside `withLock` of `.write`, `.read` is
     * granted at once (downgrade).
     */
    rwLock(name, options) {
      checkString('name', name)
      const o = checkOptions('options', options)
      const leaseMs = checkMs('leaseMs', o.leaseMs, { min: 1 })
      const half = (write) => new Lock(callSync(name, () => this.#native.rwLockHalf(name, leaseMs, write)), this)
      return Object.freeze({ name, read: half(false), write: half(true) })
    }

    /**
     * The counting semaphore `name` of `options.permits` permits (every
     * client of one name must agree on it). Not reentrant: each grant counts.
     */
    semaphore(name, options) {
      checkString('name', name)
      const o = checkOptions('options', options)
      const permits = checkCount('permits', o.permits)
      const leaseMs = checkMs('leaseMs', o.leaseMs, { min: 1 })
      return new Semaphore(callSync(name, () => this.#native.semaphore(name, permits, leaseMs)), this)
    }

    /**
     * The leader election `name` (no I/O): `campaign()` waits to lead and
     * resolves to a Leadership (its `term` a fencing token, its `signal`
     * aborted on loss); `leader()` says who leads.
     */
    election(name, options) {
      checkString('name', name)
      const o = checkOptions('options', options)
      const leaseMs = checkMs('leaseMs', o.leaseMs, { min: 1 })
      return new Election(callSync(name, () => this.#native.election(name, leaseMs)), this)
    }

    status(name) {
      checkString('name', name)
      return call(name, () => this.#native.status(name))
    }

    close() {
      this.#closed = true
      this.#liveGuards = 0
      if (this.#keepAlive !== undefined) clearInterval(this.#keepAlive)
      return call(undefined, () => this.#native.close())
    }

    [Symbol.asyncDispose]() {
      return this.close()
    }

    /** Test hook: forces a ZooKeeper session expiry. Not part of the API. */
    _debugExpireSession() {
      return call(undefined, () => this.#native.debugExpireSession())
    }
  }

  class Lock {
    #native

    /** @internal Use `client.lock()`. */
    constructor(nativeLock, client) {
      this.#native = nativeLock
      this.client = client
      this.name = nativeLock.name
    }

    acquire(options) {
      return this.#acquireAs(currentOrFreshOwner(), options)
    }

    async withLock(fn, options) {
      checkFunction('fn', fn)
      const owner = currentOrFreshOwner()
      const guard = await this.#acquireAs(owner, options)
      return runAndRelease(guard, () => ownerContext.run(owner, () => fn(guard)))
    }

    /** How many holds the current async context has on this lock (in this client). */
    get holdCount() {
      const owner = ownerContext.getStore()
      return owner === undefined ? 0 : this.#native.holdCount(owner)
    }

    /** Whether any owner of this client holds the lock. */
    get isHeldLocally() {
      return this.#native.isHeldLocally()
    }

    async #acquireAs(owner, options) {
      let timeoutMs
      let signal
      if (options !== undefined) {
        const o = checkOptions('options', options)
        timeoutMs = checkMs('timeoutMs', o.timeoutMs, { allowInfinity: true })
        signal = checkSignal(o.signal)
      }
      return acquireNative(
        this.name,
        signal,
        () => this.#native.acquire(owner, timeoutMs),
        (canceller) => this.#native.acquireCancellable(owner, timeoutMs, canceller),
        (nativeGuard) => new Guard(nativeGuard, this),
      )
    }
  }

  /**
   * What a lock's Guard and a semaphore's Permits share: one grant of
   * `holder` (a Lock or a Semaphore) with its loss signal, released once;
   * it keeps the client's process alive while unreleased.
   */
  class Hold {
    #native
    #holder
    #released = false
    /** Created on the first read of `signal` (most guards never need one). */
    #lost = undefined

    /** `holder`: its Lock or Semaphore (`.name`, `.client`). */
    constructor(nativeHold, holder) {
      this.#native = nativeHold
      this.#holder = holder
      holder.client[kHold]()
    }

    /** An AbortSignal that aborts (with a LockLostError) if the hold is lost while held. */
    get signal() {
      if (this.#lost === undefined) {
        this.#lost = new AbortController()
        if (!this.#released) {
          const reason = this.#native.lostReason
          if (reason != null) this.#abortLost(reason)
          else this.#native.onLost((r) => this.#abortLost(r))
        }
      }
      return this.#lost.signal
    }

    #abortLost(reason) {
      if (this.#released || this.#lost.signal.aborted) return
      const name = this.#holder.name
      const what = lostSubject(this.#holder)
      this.#lost.abort(new LockLostError(`${what} lost: ${reason}`, { lockName: name, reason }))
    }

    async release() {
      const alreadyReleased = this.#released
      this.#released = true
      if (!alreadyReleased) this.#holder.client[kUnhold]()
      try {
        return await this.#native.release()
      } catch (err) {
        const e = fromNative(err, this.#holder.name)
        // A loss the runtime saw before the loss callback reached us: report it on the signal too.
        if (!alreadyReleased && e instanceof LockLostError) {
          this.#lost ??= new AbortController()
          if (!this.#lost.signal.aborted) this.#lost.abort(e)
        }
        throw e
      }
    }

    async [Symbol.asyncDispose]() {
      if (!this.#released) await this.release()
    }
  }

  /** What a loss message says was lost, e.g. `lock "x" was`. */
  function lostSubject(holder) {
    const name = JSON.stringify(holder.name)
    if (holder instanceof Semaphore) return `permits of semaphore ${name} were`
    if (holder instanceof Election) return `leadership of election ${name} was`
    return `lock ${name} was`
  }

  /** One hold of a lock. */
  class Guard extends Hold {
    /** @internal Returned by `lock.acquire()`. */
    constructor(nativeGuard, lock) {
      super(nativeGuard, lock)
      this.lock = lock
      this.fencingToken = nativeGuard.fencingToken
    }
  }

  /**
   * A counting semaphore of one client (`client.semaphore()`). Not
   * reentrant: every acquire is a grant of its own, counted apart, so one
   * async context can hold several.
   */
  class Semaphore {
    #native

    /** @internal Use `client.semaphore()`. */
    constructor(nativeSemaphore, client) {
      this.#native = nativeSemaphore
      this.client = client
      this.name = nativeSemaphore.name
      this.permits = nativeSemaphore.permits
    }

    async acquire(options) {
      let count = 1
      let timeoutMs
      let signal
      if (options !== undefined) {
        const o = checkOptions('options', options)
        count = checkCount('count', o.count, 1)
        timeoutMs = checkMs('timeoutMs', o.timeoutMs, { allowInfinity: true })
        signal = checkSignal(o.signal)
      }
      return acquireNative(
        this.name,
        signal,
        () => this.#native.acquire(count, timeoutMs),
        (canceller) => this.#native.acquireCancellable(count, timeoutMs, canceller),
        (nativePermits) => new Permits(nativePermits, this),
      )
    }

    /** Acquires, runs `fn(permits)` with them held, and releases, even when `fn` throws. */
    async withPermits(fn, options) {
      checkFunction('fn', fn)
      const permits = await this.acquire(options)
      return runAndRelease(permits, () => fn(permits))
    }
  }

  /** One grant of `count` permits of a semaphore. */
  class Permits extends Hold {
    /** @internal Returned by `semaphore.acquire()`. */
    constructor(nativePermits, semaphore) {
      super(nativePermits, semaphore)
      this.semaphore = semaphore
      this.fencingToken = nativePermits.fencingToken
      this.count = nativePermits.count
    }
  }

  /**
   * A leader election of one client (`client.election()`). Each campaign is
   * a participant of its own (no reentrancy): one leads at a time, the
   * others wait in line.
   */
  class Election {
    #native

    /** @internal Use `client.election()`. */
    constructor(nativeElection, client) {
      this.#native = nativeElection
      this.client = client
      this.name = nativeElection.name
    }

    /** Waits until a new participant leads; `signal` withdraws it from the server. */
    async campaign(options) {
      let timeoutMs
      let signal
      if (options !== undefined) {
        const o = checkOptions('options', options)
        timeoutMs = checkMs('timeoutMs', o.timeoutMs, { allowInfinity: true })
        signal = checkSignal(o.signal)
      }
      return acquireNative(
        this.name,
        signal,
        () => this.#native.campaign(timeoutMs),
        (canceller) => this.#native.campaignCancellable(timeoutMs, canceller),
        (nativeLeadership) => new Leadership(nativeLeadership, this),
      )
    }

    /** Campaigns, runs `fn(leadership)` while leading, and resigns, even when `fn` throws. */
    async withLeadership(fn, options) {
      checkFunction('fn', fn)
      const leadership = await this.campaign(options)
      return runAndRelease(leadership, () => fn(leadership))
    }

    /** Who leads now (`{ participant, term }`, term a bigint or null), or null: one read of the server. */
    async leader() {
      const leader = await call(this.name, () => this.#native.leader())
      return leader == null ? null : { participant: leader.participant, term: leader.term ?? null }
    }
  }

  /** One participant's leadership of an election. */
  class Leadership extends Hold {
    /** @internal Returned by `election.campaign()`. */
    constructor(nativeLeadership, election) {
      super(nativeLeadership, election)
      this.election = election
      this.term = nativeLeadership.term
      this.participant = nativeLeadership.participant
    }

    /** Ends the leadership and waits for the server; the next participant leads after it. */
    resign() {
      return this.release()
    }
  }

  const api = { connect, Client, Lock, Guard, Semaphore, Permits, Election, Leadership, ...errors }
  delete api.fromNative
  delete api.abortError
  return api
}

module.exports = build
