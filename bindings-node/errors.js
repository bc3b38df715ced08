'use strict'
// The error classes, and the translation of the native layer's errors into
// them. A native error's message is "polylock:" and a JSON object (see
// src/errors.rs): its kind, its message and its structured fields, so no
// field is ever recovered from the English message.

/** Base class of every polylock error. */
class LockError extends Error {
  constructor(message, options) {
    super(message, options)
    this.name = new.target.name
    /** Stable machine-readable code, e.g. `POLYLOCK_TIMEOUT`. */
    this.code = 'POLYLOCK_ERROR'
    /** The lock concerned, when there is one. */
    this.lockName = options?.lockName
  }
}

/** The acquire deadline passed (or `timeoutMs: 0` found the lock held). */
class LockTimeoutError extends LockError {
  constructor(message, options) {
    super(message, options)
    this.code = 'POLYLOCK_TIMEOUT'
  }
}

/**
 * The acquire's timeout passed while the server kept refusing with a transient
 * error (Redis `BUSY`, `LOADING`, `READONLY`, ...; ZooKeeper throttling). A
 * `LockTimeoutError` too: the timeout did pass, and a handler of timeouts
 * handles this one; check for this class first to tell a refusing server from
 * a held lock.
 */
class LockUnavailableError extends LockTimeoutError {
  constructor(message, options) {
    super(message, options)
    this.code = 'POLYLOCK_UNAVAILABLE'
    /** The server's last reply, e.g. `BUSY Redis is busy running a script...`. */
    this.reply = options?.reply
  }
}

/** The lock was lost while held (lease expired, session expired, ...). */
class LockLostError extends LockError {
  constructor(message, options) {
    super(message, options)
    this.code = 'POLYLOCK_LOST'
    /** Why, as the runtime reported it. */
    this.reason = options?.reason
  }
}

/** Release of a hold that this guard (or owner) does not have. */
class NotHeldError extends LockError {
  constructor(message, options) {
    super(message, options)
    this.code = 'POLYLOCK_NOT_HELD'
  }
}

/** The server could not be reached or refused the handshake. */
class ConnectionError extends LockError {
  constructor(message, options) {
    super(message, options)
    this.code = 'POLYLOCK_CONNECT'
    /** The address that failed, e.g. `127.0.0.1:6379`. */
    this.address = options?.address
  }
}

/** The client was closed. */
class ClientClosedError extends LockError {
  constructor(message, options) {
    super(message, options)
    this.code = 'POLYLOCK_CLOSED'
  }
}

/**
 * An owner holding the read half of a read-write lock asked for its write
 * half: refused at once (it would wait for itself). Release the read hold first.
 */
class UpgradeRefusedError extends LockError {
  constructor(message, options) {
    super(message, options)
    this.code = 'POLYLOCK_UPGRADE_REFUSED'
  }
}

/**
 * A semaphore's clients disagree on its number of permits: the server records
 * `server`, this client's semaphore was made with `ours`. Nothing was taken.
 * The semaphore's name is `lockName`, as on every polylock error.
 */
class PermitsMismatchError extends LockError {
  constructor(message, options) {
    super(message, options)
    this.code = 'POLYLOCK_PERMITS_MISMATCH'
    /** The number of permits the server records for this semaphore. */
    this.server = options?.server
    /** The number of permits this client's semaphore was made with. */
    this.ours = options?.ours
  }
}

/** What starts the message of every native polylock error. */
const PAYLOAD_PREFIX = 'polylock:'

/** The native layer's payload of `err`, or null when it carries none. */
function payloadOf(err) {
  const message = err?.message
  if (typeof message !== 'string' || !message.startsWith(PAYLOAD_PREFIX)) return null
  try {
    return JSON.parse(message.slice(PAYLOAD_PREFIX.length))
  } catch {
    return null
  }
}

/** A DOMException named AbortError, carrying the signal's reason as `cause`. */
function abortError(signal) {
  const reason = signal?.reason
  if (reason instanceof DOMException && reason.name === 'AbortError') return reason
  const e = new DOMException('The lock acquire was aborted', 'AbortError')
  Object.defineProperty(e, 'cause', { value: reason, configurable: true, writable: true })
  return e
}

function withCode(e, code) {
  e.code = code
  return e
}

/**
 * Translates an error thrown by the native layer. Errors that carry no
 * polylock payload (a bug, or napi's own argument checks) pass through unchanged.
 */
function fromNative(err, lockName) {
  const p = payloadOf(err)
  if (!p) return err
  const message = p.message
  const opts = { lockName: p.lockName ?? lockName }
  switch (p.kind) {
    case 'invalid_url':
      return withCode(new TypeError(message), 'ERR_POLYLOCK_INVALID_URL')
    case 'invalid_name':
      return withCode(new TypeError(message), 'ERR_POLYLOCK_INVALID_NAME')
    case 'invalid_option':
      return withCode(new RangeError(message), 'ERR_POLYLOCK_INVALID_OPTION')
    case 'connect':
      return new ConnectionError(message, { ...opts, address: p.address ?? undefined })
    case 'timeout':
    case 'would_block':
      return new LockTimeoutError(message, opts)
    case 'unavailable':
      return new LockUnavailableError(message, { ...opts, reply: p.reply ?? undefined })
    case 'not_held':
      return new NotHeldError(message, opts)
    case 'lost':
      return new LockLostError(message, { ...opts, reason: p.reason ?? undefined })
    case 'closed':
      return new ClientClosedError(message, opts)
    case 'upgrade_refused':
      return new UpgradeRefusedError(message, opts)
    case 'permits_mismatch':
      return new PermitsMismatchError(message, { ...opts, server: p.permits?.server, ours: p.permits?.ours })
    case 'cancelled':
      return abortError(undefined)
    default:
      return new LockError(message, opts)
  }
}

module.exports = {
  LockError,
  LockTimeoutError,
  LockUnavailableError,
  LockLostError,
  NotHeldError,
  ConnectionError,
  ClientClosedError,
  UpgradeRefusedError,
  PermitsMismatchError,
  abortError,
  fromNative,
}
