// Bad input gives a typed error before anything reaches the server; an
// unreachable server names its address.
import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'

import { connect, ConnectionError, LockError } from 'polylock'
import { backends, testsBackend, unique, serverIsClean } from './helpers.mjs'

const [[, redisUrl]] = backends()

describe('bad input', () => {
  let client
  before(async () => {
    client = await connect(redisUrl)
  })
  after(() => client?.close())

  const connectCases = [
    ['a number url', () => connect(6379), TypeError],
    ['undefined url', () => connect(), TypeError],
    ['an empty url', () => connect(''), TypeError],
    ['no scheme', () => connect('localhost:6379'), TypeError],
    ['an http url', () => connect('http://h'), TypeError],
    ['a bad port', () => connect('redis://h:port'), TypeError],
    ['an empty zk host', () => connect('zk://a:1,,b:2'), TypeError],
    ['a bad db', () => connect('redis://h/notadb'), TypeError],
    ['options not an object', () => connect(redisUrl, 5), TypeError],
    ['a negative connectTimeoutMs', () => connect(redisUrl, { connectTimeoutMs: -1 }), RangeError],
    ['a zero requestTimeoutMs', () => connect(redisUrl, { requestTimeoutMs: 0 }), RangeError],
    ['a string leaseMs', () => connect(redisUrl, { leaseMs: '30s' }), TypeError],
    ['a NaN sessionTimeoutMs', () => connect(redisUrl, { sessionTimeoutMs: NaN }), RangeError],
  ]
  for (const [what, run, type] of connectCases) {
    it(`connect with ${what} rejects with ${type.name}`, async () => {
      await assert.rejects(run(), (e) => e instanceof type && e.message.length > 0)
    })
  }

  const lockCases = [
    ['a number name', (c) => c.lock(42), TypeError],
    ['no name', (c) => c.lock(), TypeError],
    ['an empty name', (c) => c.lock(''), TypeError],
    ['a NUL in the name', (c) => c.lock('a\0b'), TypeError],
    ['an empty path segment', (c) => c.lock('a//b'), TypeError],
    ['a trailing slash', (c) => c.lock('trailing/'), TypeError],
    ['a name too long', (c) => c.lock('x'.repeat(1025)), TypeError],
    ['a negative leaseMs', (c) => c.lock('x', { leaseMs: -5 }), RangeError],
    ['a lease too short for the runtime', (c) => c.lock('x', { leaseMs: 10 }), RangeError],
    ['an Infinity leaseMs', (c) => c.lock('x', { leaseMs: Infinity }), RangeError],
    ['options that are a string', (c) => c.lock('x', 'fast'), TypeError],
  ]
  for (const [what, run, type] of lockCases) {
    it(`lock with ${what} throws ${type.name}`, () => {
      assert.throws(() => run(client), type)
    })
  }

  it('acquire and withLock with bad options reject before touching the server', async () => {
    const name = unique('bad-acquire')
    const lock = client.lock(name)
    const cases = [
      [() => lock.acquire({ timeoutMs: -1 }), RangeError],
      [() => lock.acquire({ timeoutMs: NaN }), RangeError],
      [() => lock.acquire({ timeoutMs: '1s' }), TypeError],
      [() => lock.acquire({ signal: 'stop' }), TypeError],
      [() => lock.acquire(null), TypeError],
      [() => lock.withLock('not a function'), TypeError],
      [() => lock.withLock(async () => {}, { timeoutMs: -1 }), RangeError],
    ]
    for (const [run, type] of cases) await assert.rejects(run(), type)
    assert.equal(lock.isHeldLocally, false)
    assert.ok(await serverIsClean(client, 'redis', redisUrl, name), 'bad input left something on the server')
    // Infinity means "wait as long as it takes".
    const g = await lock.acquire({ timeoutMs: Infinity })
    await g.release()
  })

  it('status with a non-string name throws TypeError', () => {
    assert.throws(() => client.status(7), TypeError)
  })
})

describe('unreachable servers', () => {
  const unreachable = [['redis', 'redis://127.0.0.1:1'], ['zookeeper', 'zk://127.0.0.1:1']]
  for (const [, url] of unreachable.filter(([b]) => testsBackend(b))) {
    it(`${url} rejects with a ConnectionError naming the address`, async () => {
      const err = await connect(url, { connectTimeoutMs: 500 }).then(
        () => null,
        (e) => e,
      )
      assert.ok(err instanceof ConnectionError, String(err))
      assert.ok(err instanceof LockError)
      assert.equal(err.code, 'POLYLOCK_CONNECT')
      assert.equal(err.address, '127.0.0.1:1')
      assert.ok(err.message.startsWith('cannot connect to 127.0.0.1:1: '), err.message)
    })
  }
})
