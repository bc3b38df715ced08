// The lock implementations under test, behind one shape:
//   const impl = await open(kind, url); const h = await impl.acquire(key); await impl.release(h); await impl.close()
// Peers are configured to wait (not fail) when the lock is taken, polling every
// POLL_MS: neither has a server push for handoff; polylock does (pub/sub, watches).
import Redis from 'ioredis'
import Redlock from 'redlock'
import { Mutex } from 'redis-semaphore'

import { connect } from '../../bindings-node/index.mjs'

export const POLL_MS = 10
const LEASE_MS = 30_000

export const KINDS = ['polylock', 'redlock', 'redis-semaphore']

export async function open(kind, url) {
  switch (kind) {
    case 'polylock': {
      const client = await connect(url)
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
