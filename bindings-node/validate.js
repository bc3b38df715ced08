'use strict'
// Argument checks done in JS so that bad input fails with a TypeError or
// RangeError naming the argument, before anything reaches the native layer.

function checkOptions(what, options) {
  if (options === undefined) return {}
  if (options === null || typeof options !== 'object') {
    throw new TypeError(`${what} must be an object, got ${describe(options)}`)
  }
  return options
}

/**
 * A duration in milliseconds: a finite number >= min (or undefined when
 * optional). `Infinity` is accepted where `allowInfinity` (it means "no limit").
 */
function checkMs(what, value, { min = 0, allowInfinity = false } = {}) {
  if (value === undefined) return undefined
  if (typeof value !== 'number') throw new TypeError(`${what} must be a number, got ${describe(value)}`)
  if (value === Infinity && allowInfinity) return undefined
  if (!Number.isFinite(value) || value < min) {
    throw new RangeError(`${what} must be a finite number >= ${min}, got ${value}`)
  }
  return value
}

/**
 * A number of permits: a number (or `fallback` when undefined). Whether it
 * is a whole number that fits the semaphore is the native layer's and the
 * runtime's check (a RangeError with code ERR_POLYLOCK_INVALID_OPTION).
 */
function checkCount(what, value, fallback) {
  if (value === undefined && fallback !== undefined) return fallback
  if (typeof value !== 'number') throw new TypeError(`${what} must be a number, got ${describe(value)}`)
  return value
}

function checkString(what, value) {
  if (typeof value !== 'string') throw new TypeError(`${what} must be a string, got ${describe(value)}`)
  return value
}

function checkSignal(value) {
  if (value === undefined) return undefined
  if (!(value instanceof AbortSignal)) throw new TypeError(`signal must be an AbortSignal, got ${describe(value)}`)
  return value
}

function checkFunction(what, value) {
  if (typeof value !== 'function') throw new TypeError(`${what} must be a function, got ${describe(value)}`)
  return value
}

function describe(v) {
  if (v === null) return 'null'
  if (typeof v === 'string') return JSON.stringify(v.length > 40 ? `${v.slice(0, 40)}...` : v)
  if (typeof v === 'object') return v.constructor?.name ?? 'object'
  return `${typeof v} ${String(v)}`
}

module.exports = { checkOptions, checkMs, checkCount, checkString, checkSignal, checkFunction }
