/**
 * polylock: distributed locks on Redis and ZooKeeper, with fencing tokens,
 * reentrancy per async context, and a signal that aborts when a lock is lost.
 * The lock logic is the Rust runtime's; this package binds it with napi-rs.
 *
 * @example
 * ```ts
 * import { connect } from 'polylock'
 * const client = await connect('redis://127.0.0.1:6379') // or 'zk://127.0.0.1:2181'
 * const lock = client.lock('orders/42', { leaseMs: 30_000 })
 * await lock.withLock(async (guard) => {
 *   await db.write(order, { fencingToken: guard.fencingToken, signal: guard.signal })
 * })
 * await client.close()
 * ```
 */

/** Options of {@link connect}. Durations in milliseconds. */
export interface ConnectOptions {
  /** How long connecting may take before it fails naming the address. Default 5000. */
  connectTimeoutMs?: number
  /** Redis: how long one command may take before it counts as unanswered. Default 5000. */
  requestTimeoutMs?: number
  /** ZooKeeper: the session timeout asked of the server (it may clamp it). Default 10000. */
  sessionTimeoutMs?: number
  /** Redis: the default lease of this client's locks, renewed every third of it. Default 30000. */
  leaseMs?: number
  /** @internal Tests only: route the ZooKeeper connection through a fault proxy. */
  _debugFaults?: boolean
}

/**
 * Connects to one Redis server or ZooKeeper ensemble. URLs:
 * `redis://[user:pass@]host:port[/db]`, `rediss://...?ca=PATH`,
 * `redis+sentinel://[user:pass@]h1:26379,h2:26379/MASTER[?replicas=K]` (or `rediss+sentinel://`),
 * `redis+cluster://[user:pass@]h1:7000,h2:7001[?replicas=K]` (or `rediss+cluster://`),
 * `zk://[user:pass@]h1:2181,h2:2181[/chroot]`, `zks://...?ca=PATH`.
 *
 * @throws {TypeError} a malformed URL (`code: 'ERR_POLYLOCK_INVALID_URL'`) or a non-string.
 * @throws {RangeError} an out-of-range option.
 * @throws {ConnectionError} the server is unreachable (the message and `address` name it).
 */
export function connect(url: string, options?: ConnectOptions): Promise<Client>

/** Options of {@link Client.lock}. */
export interface LockOptions {
  /** Redis: this lock's lease in ms (renewed every third of it). Default: the client's. */
  leaseMs?: number
}

/** Options of {@link Lock.acquire} and {@link Lock.withLock}. */
export interface AcquireOptions {
  /**
   * Give up after this many ms with {@link LockTimeoutError}. `0` tries once
   * without waiting. Absent (or `Infinity`): wait as long as it takes.
   */
  timeoutMs?: number
  /**
   * Aborting it while waiting rejects with a `DOMException` named
   * `AbortError` (the signal's reason as `cause`) and leaves nothing on the server.
   */
  signal?: AbortSignal
}

/** Options of {@link Client.semaphore}. */
export interface SemaphoreOptions {
  /**
   * How many permits the semaphore has (at least 1). Every client of one name
   * must agree on it: the first acquire records it on the server, and an
   * acquire by a semaphore made with another number rejects with {@link PermitsMismatchError}.
   */
  permits: number
  /** Redis: the lease of each grant in ms (renewed every third of it). Default: the client's. */
  leaseMs?: number
}

/** Options of {@link Semaphore.acquire} and {@link Semaphore.withPermits}. */
export interface PermitsAcquireOptions extends AcquireOptions {
  /** How many permits to take at once, from 1 to {@link Semaphore.permits}. Default 1. */
  count?: number
}

/** Options of {@link Client.election}. */
export interface ElectionOptions {
  /** Redis: the leadership's lease in ms (renewed every third of it). Default: the client's. */
  leaseMs?: number
}

/** Options of {@link Election.campaign} and {@link Election.withLeadership}. */
export interface CampaignOptions {
  /**
   * Give up after this many ms with {@link LockTimeoutError}. `0` leads only
   * if nobody leads or waits. Absent (or `Infinity`): wait as long as it takes.
   */
  timeoutMs?: number
  /**
   * Aborting it while waiting rejects with a `DOMException` named
   * `AbortError` (the signal's reason as `cause`) once the participant is
   * withdrawn: nothing is left on the server.
   */
  signal?: AbortSignal
}

/** Who leads an election, as the server records it (see {@link Election.leader}). */
export interface Leader {
  /** The leader's participant id ({@link Leadership.participant}; for a Curator `LeaderLatch`, the id it was given). */
  participant: string
  /** The leadership's term: ZooKeeper always; Redis while the grant's first lease lives, else null. */
  term: bigint | null
}

/** A read-write lock: many readers or one writer (see {@link Client.rwLock}). */
export interface ReadWriteLock {
  /** The read-write lock's name. */
  readonly name: string
  /** The shared half. */
  readonly read: Lock
  /** The exclusive half; a waiting writer blocks new readers. */
  readonly write: Lock
}

/** A lock as the server sees it (read-only, see {@link Client.status}). */
export interface LockStatus {
  /** Held by anyone, in any process. */
  held: boolean
  /** The holder's id (Redis: `<client id>:<owner>`; ZooKeeper: the holder node's data). */
  holder?: string | null
  /** Redis: the last fencing token issued; ZooKeeper: the holder node's czxid. */
  fencingToken?: bigint | null
  /** Contenders waiting, where the backend can tell. */
  waiters?: number | null
  /** Redis: ms until the lease expires without renewal. */
  ttlMs?: number | null
}

/**
 * A connection to one Redis server or ZooKeeper ensemble, shared by every
 * lock made from it. Close it when done: an idle, closed client does not keep
 * the process alive.
 */
export declare class Client implements AsyncDisposable {
  private constructor()
  /** `'redis'` or `'zookeeper'`. */
  readonly backend: 'redis' | 'zookeeper'
  /** This client's random id (a UUID), as stored on the server. */
  readonly id: string
  /**
   * A handle on the lock `name` (no I/O). Names are `/`-separated paths.
   * @throws {TypeError} a non-string or invalid name (`code: 'ERR_POLYLOCK_INVALID_NAME'`).
   * @throws {RangeError} a bad `leaseMs`.
   * @throws {ClientClosedError} after {@link Client.close}.
   */
  lock(name: string, options?: LockOptions): Lock
  /**
   * The read-write lock `name` (no I/O): `read` and `write` are its halves,
   * each a {@link Lock}. Inside `read.withLock`, `write.acquire()` rejects with
   * {@link UpgradeRefusedError}; inside `write.withLock`, `read.acquire()` is
   * granted at once (downgrade). Not in `polylock/wasm` (a RangeError there).
   */
  rwLock(name: string, options?: LockOptions): ReadWriteLock
  /**
   * The counting semaphore `name` of `options.permits` permits (no I/O); on
   * Redis, Redisson's `RPermitExpirableSemaphore` layout; on ZooKeeper,
   * Curator's `InterProcessSemaphoreV2` layout (leases under `NAME/leases`,
   * Curator's mutex at `NAME/locks`). Not in `polylock/wasm` (a RangeError there).
   * @throws {TypeError} a non-string or invalid name (`code: 'ERR_POLYLOCK_INVALID_NAME'`), a non-number `permits`.
   * @throws {RangeError} `permits` not a whole number >= 1, a bad `leaseMs` (`code: 'ERR_POLYLOCK_INVALID_OPTION'` for the former).
   * @throws {ClientClosedError} after {@link Client.close}.
   */
  semaphore(name: string, options: SemaphoreOptions): Semaphore
  /**
   * The leader election `name` (no I/O). On ZooKeeper, Curator's
   * `LeaderLatch` layout; on Redis the leader holds the name's mutex, so use
   * a name either as a lock or as an election. Not in `polylock/wasm` (a RangeError there).
   * @throws {TypeError} a non-string or invalid name (`code: 'ERR_POLYLOCK_INVALID_NAME'`).
   * @throws {RangeError} a bad `leaseMs`.
   * @throws {ClientClosedError} after {@link Client.close}.
   */
  election(name: string, options?: ElectionOptions): Election
  /** Reads who holds `name` right now, from the server. */
  status(name: string): Promise<LockStatus>
  /**
   * Releases every lock this client holds, fails pending acquires with
   * {@link ClientClosedError}, and waits for the server-side cleanup. Idempotent.
   */
  close(): Promise<void>
  /** Same as {@link Client.close}, for `await using`. */
  [Symbol.asyncDispose](): Promise<void>
  /**
   * @internal Test hook: makes the ZooKeeper server expire this client's
   * session (needs `connect(url, { _debugFaults: true })`, takes about the
   * session timeout plus a second); rejects with a RangeError on Redis.
   */
  _debugExpireSession(): Promise<void>
}

/**
 * One lock name of one client. Reentrant per async context: inside a
 * {@link Lock.withLock} callback (and everything it awaits or starts), another
 * `withLock` or `acquire` on the same lock is granted at once and needs its own
 * release; a concurrent async chain waits. Outside any `withLock`, each
 * `acquire()` runs as a fresh owner.
 */
export declare class Lock {
  private constructor()
  /** The lock's name. */
  readonly name: string
  /** The client this lock belongs to. */
  readonly client: Client
  /** How many holds the current async context has on this lock (0 outside `withLock`). */
  readonly holdCount: number
  /** Whether any owner of this client holds the lock. */
  readonly isHeldLocally: boolean
  /**
   * Waits until the lock is granted. Release the guard (or use `await using`).
   * @throws {LockTimeoutError} `timeoutMs` passed.
   * @throws {DOMException} named `AbortError` when `signal` aborts.
   * @throws {ClientClosedError} the client was closed meanwhile.
   * @throws {TypeError | RangeError} bad options (e.g. a negative `timeoutMs`).
   */
  acquire(options?: AcquireOptions): Promise<Guard>
  /**
   * Acquires, runs `fn(guard)` with the lock held, and releases, even when
   * `fn` throws (then `fn`'s error is rethrown). Resolves to `fn`'s result.
   * @throws {LockLostError} from the release, when the lock was lost while `fn` ran.
   */
  withLock<T>(fn: (guard: Guard) => T | PromiseLike<T>, options?: AcquireOptions): Promise<T>
}

/** One hold of a lock. Release it exactly once. */
export declare class Guard implements AsyncDisposable {
  private constructor()
  /** The lock held. */
  readonly lock: Lock
  /**
   * The grant's fencing token: larger than any earlier grant's of this lock.
   * Pass it to the resource you protect and have it refuse smaller ones.
   */
  readonly fencingToken: bigint
  /**
   * Aborts, with a {@link LockLostError} as `reason`, when the lock is lost
   * while held (lease or session expired); never on a release. Pass it to the
   * work done under the lock (timers, `fetch`, streams, drivers that take one)
   * so that the work stops itself, rejecting with an `AbortError` whose `cause`
   * is the `LockLostError`, before another holder is granted the lock.
   * The same for both halves of a read-write lock.
   */
  readonly signal: AbortSignal
  /**
   * Ends this hold and waits for the server.
   * @throws {LockLostError} the lock was lost while held: the work was not protected.
   * @throws {NotHeldError} this guard was already released.
   */
  release(): Promise<void>
  /** Releases unless already released, for `await using`. */
  [Symbol.asyncDispose](): Promise<void>
}

/**
 * A counting semaphore of one client (see {@link Client.semaphore}). Not
 * reentrant: every acquire is a grant of its own, counted apart, so one async
 * context may hold several, and a grant is never shared.
 */
export declare class Semaphore {
  private constructor()
  /** The semaphore's name. */
  readonly name: string
  /** Its number of permits. */
  readonly permits: number
  /** The client this semaphore belongs to. */
  readonly client: Client
  /**
   * Waits until `count` permits are free and takes them. Waiters are served in
   * order: a large ask is not overtaken by later, smaller ones. Release the
   * grant (or use `await using`).
   * @throws {LockTimeoutError} `timeoutMs` passed.
   * @throws {DOMException} named `AbortError` when `signal` aborts (nothing is left on the server).
   * @throws {PermitsMismatchError} the server records another number of permits for this name.
   * @throws {RangeError} `count` is not a whole number from 1 to {@link Semaphore.permits}
   *   (`code: 'ERR_POLYLOCK_INVALID_OPTION'`), or another bad option.
   * @throws {ClientClosedError} the client was closed meanwhile.
   */
  acquire(options?: PermitsAcquireOptions): Promise<Permits>
  /**
   * Acquires, runs `fn(permits)` with them held, and releases, even when `fn`
   * throws (then `fn`'s error is rethrown). Resolves to `fn`'s result.
   * @throws {LockLostError} from the release, when the permits were lost while `fn` ran.
   */
  withPermits<T>(fn: (permits: Permits) => T | PromiseLike<T>, options?: PermitsAcquireOptions): Promise<T>
}

/** One grant of `count` permits of a semaphore. Release it exactly once. */
export declare class Permits implements AsyncDisposable {
  private constructor()
  /** The semaphore these permits are of. */
  readonly semaphore: Semaphore
  /** How many permits this grant holds. */
  readonly count: number
  /** The grant's fencing token: larger than any earlier grant's of this semaphore. */
  readonly fencingToken: bigint
  /**
   * Aborts, with a {@link LockLostError} as `reason`, when the permits are lost
   * while held (Redis: their lease expired on the server; ZooKeeper: the session
   * expired or a lease node was deleted); never on a release. Pass it to the
   * work done under the permits so that it stops itself, as {@link Guard.signal}.
   */
  readonly signal: AbortSignal
  /**
   * Gives the permits back and waits for the server.
   * @throws {LockLostError} the permits were lost while held.
   * @throws {NotHeldError} this grant was already released.
   * @throws {ClientClosedError} the client was closed (which released them).
   */
  release(): Promise<void>
  /** Releases unless already released, for `await using`. */
  [Symbol.asyncDispose](): Promise<void>
}

/**
 * A leader election of one client (see {@link Client.election}). Each
 * campaign is a participant of its own (not reentrant): one leads at a time,
 * the others wait in line, and a leader is told it may have lost its
 * leadership before another participant can lead.
 */
export declare class Election {
  private constructor()
  /** The election's name. */
  readonly name: string
  /** The client this election belongs to. */
  readonly client: Client
  /**
   * Waits until a new participant leads. Resign the leadership (or use `await using`).
   * @throws {LockTimeoutError} `timeoutMs` passed.
   * @throws {DOMException} named `AbortError` when `signal` aborts (nothing is left on the server).
   * @throws {ClientClosedError} the client was closed meanwhile.
   * @throws {TypeError | RangeError} bad options (e.g. a negative `timeoutMs`).
   */
  campaign(options?: CampaignOptions): Promise<Leadership>
  /**
   * Campaigns, runs `fn(leadership)` while leading, and resigns, even when
   * `fn` throws (then `fn`'s error is rethrown). Resolves to `fn`'s result.
   * @throws {LockLostError} from the resign, when the leadership was lost while `fn` ran.
   */
  withLeadership<T>(fn: (leadership: Leadership) => T | PromiseLike<T>, options?: CampaignOptions): Promise<T>
  /**
   * Who leads now, by every client (one read of the server), or null.
   * Stale the moment it resolves: to act as the leader, campaign, and check
   * the term where the leader writes.
   */
  leader(): Promise<Leader | null>
}

/** One participant's leadership of an election. Resign it exactly once. */
export declare class Leadership implements AsyncDisposable {
  private constructor()
  /** The election led. */
  readonly election: Election
  /**
   * The term, a fencing token: larger than every earlier leadership's of this
   * election. Pass it to what the leader writes to and have that refuse smaller ones.
   */
  readonly term: bigint
  /** This participant's id, as {@link Election.leader} reports it while it leads. */
  readonly participant: string
  /**
   * Aborts, with a {@link LockLostError} as `reason`, when the leadership is
   * lost (lease or session expired). Stop acting as the leader then.
   */
  readonly signal: AbortSignal
  /**
   * Ends the leadership and waits for the server; the next participant leads after it.
   * @throws {LockLostError} the leadership was lost meanwhile.
   * @throws {NotHeldError} it was already resigned.
   * @throws {ClientClosedError} the client was closed (which resigned it).
   */
  resign(): Promise<void>
  /** Resigns unless already resigned, for `await using`. */
  [Symbol.asyncDispose](): Promise<void>
}

/** Base class of polylock's errors. */
export declare class LockError extends Error {
  /** Stable machine-readable code, e.g. `'POLYLOCK_TIMEOUT'`. */
  code: string
  /** The lock concerned, when there is one. */
  lockName?: string
}
/** The acquire's `timeoutMs` passed (or `timeoutMs: 0` found the lock held). */
export declare class LockTimeoutError extends LockError {}
/**
 * The acquire's `timeoutMs` passed while the server kept refusing with a transient error
 * (Redis `BUSY`, `LOADING`, `READONLY`, ...; ZooKeeper throttling); `code: 'POLYLOCK_UNAVAILABLE'`.
 * A `LockTimeoutError` too: check for this class first to tell a refusing server from a held lock.
 */
export declare class LockUnavailableError extends LockTimeoutError {
  /** The server's last reply, e.g. `'BUSY Redis is busy running a script. ...'`. */
  reply?: string
}
/** The lock was lost while held. */
export declare class LockLostError extends LockError {
  /** Why, as the runtime reported it (e.g. the lease expired). */
  reason?: string
}
/** Release of a hold that is not held (e.g. a guard released twice). */
export declare class NotHeldError extends LockError {}
/** The server could not be reached or refused the handshake. */
export declare class ConnectionError extends LockError {
  /** The address that failed, e.g. `'127.0.0.1:6379'`. */
  address?: string
}
/** The client was closed. */
export declare class ClientClosedError extends LockError {}
/** An owner holding the read half asked for the write half: refused at once (`code: 'POLYLOCK_UPGRADE_REFUSED'`). */
export declare class UpgradeRefusedError extends LockError {}
/**
 * A semaphore's clients disagree on its number of permits (`code: 'POLYLOCK_PERMITS_MISMATCH'`):
 * nothing was taken. The semaphore's name is `lockName`.
 */
export declare class PermitsMismatchError extends LockError {
  /** The number of permits the server records for this semaphore. */
  server?: number
  /** The number this client's semaphore was made with. */
  ours?: number
}
