// The lock implementations under test, behind one shape:
//   const impl = await open(kind, url); const h = await impl.acquire(key); await impl.release(h); await impl.close()
// Peers are configured to wait (not fail) when the lock is taken, polling every
// POLL_MS: neither has a server push for handoff; polylock does (pub/sub, watches).
import Redis from 'ioredis'
import Redlock from 'redlock'
import { Mutex } from 'redis-semaphore'

import { connect } from '../../bindings-node/index.mjs'
import { connect as connectWasm } from '../../bindings-node/wasm.mjs'

export const POLL_MS = 10
const LEASE_MS = 30_000

export const KINDS = ['polylock', 'polylock-wasm', 'redlock', 'redis-semaphore']

export async function open(kind, url) {
  switch (kind) {
    case 'polylock':
    case 'polylock-wasm': {
      // polylock-wasm: the same API over the core in WebAssembly and ioredis (polylock/wasm).
      const client = await (kind === 'polylock' ? connect : connectWasm)(url)
      return {
        acquire: (key) => client.lock(key).acquire(),
        release: (guard) => guard.release(),
        close: () => client.close(),
      }
    }
    case 'redlock': {
      const redis = new Redis(url)
      const redlock = new Redlock([redis], { retryCount: -1, retryDelay: POLL_MS, retryJitter: 0 })
      return {
        acquire: (key) => redlock.acquire([key], LEASE_MS),
        release: (lock) => lock.release(),
        close: () => redis.quit(),
      }
    }
    case 'redis-semaphore': {
      const redis = new Redis(url)
      return {
        async acquire(key) {
          const m = new Mutex(redis, key, {
            lockTimeout: LEASE_MS,
            acquireTimeout: 60_000,
            retryInterval: POLL_MS,
            refreshInterval: 0,
          })
          await m.acquire()
          return m
        },
        release: (m) => m.release(),
        close: () => redis.quit(),
      }
    }
    default:
      throw new Error(`unknown implementation ${kind}`)
  }
}
