'use strict'
// The error classes, and the translation of the native layer's tagged
// messages ("[polylock:<Kind>] message") into them.

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

const TAG = /^\[polylock:(\w+)\] ([\s\S]*)$/

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
 * Translates an error thrown by the native layer. Errors that do not carry a
 * polylock tag (a bug, or napi's own argument checks) pass through unchanged.
 */
function fromNative(err, lockName) {
  const m = typeof err?.message === 'string' ? TAG.exec(err.message) : null
  if (!m) return err
  const [, kind, message] = m
  const opts = { lockName }
  switch (kind) {
    case 'InvalidUrl':
      return withCode(new TypeError(message), 'ERR_POLYLOCK_INVALID_URL')
    case 'InvalidName':
      return withCode(new TypeError(message), 'ERR_POLYLOCK_INVALID_NAME')
    case 'InvalidOption':
      return withCode(new RangeError(message), 'ERR_POLYLOCK_INVALID_OPTION')
    case 'Connect': {
      const address = /^cannot connect to (\S+?): /.exec(message)?.[1]
      return new ConnectionError(message, { ...opts, address })
    }
    case 'Timeout':
    case 'WouldBlock':
      return new LockTimeoutError(message, opts)
    case 'Unavailable': {
      const reply = /the server is unavailable: ([\s\S]*)$/.exec(message)?.[1]
      return new LockUnavailableError(message, { ...opts, reply })
    }
    case 'NotHeld':
      return new NotHeldError(message, opts)
    case 'Lost':
      return new LockLostError(message, { ...opts, reason: /was lost: ([\s\S]*)$/.exec(message)?.[1] })
    case 'Closed':
      return new ClientClosedError(message, opts)
    case 'Cancelled':
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
  abortError,
  fromNative,
}
