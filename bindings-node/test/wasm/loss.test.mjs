// polylock/wasm: a holder whose lease runs out on the server is told (its
// guard's signal aborts) before anyone else is granted the lock, and a key
// deleted behind its back is reported on the signal and by release().
import assert from 'node:assert/strict'
import { once } from 'node:events'
import { describe, it } from 'node:test'

import { connect, LockLostError } from 'polylock/wasm'
import { freezableRelay, rawRedis, unique } from '../helpers.mjs'

const url = process.env.POLYLOCK_TEST_REDIS
if (!url) throw new Error('POLYLOCK_TEST_REDIS is not set: eval "$(scripts/services env)" first')

describe('polylock/wasm: loss', () => {
  it('a lease that runs out on the server aborts the signal before another client is granted', { timeout: 30_000 }, async () => {
    const relay = await freezableRelay(url)
    const holder = await connect(relay.url, { requestTimeoutMs: 200 })
    const other = await connect(url)
    const name = unique('wasm-lease-runs-out')
    const guard = await holder.lock(name, { leaseMs: 1000 }).acquire()
    let lostAt = null
    guard.signal.addEventListener('abort', () => (lostAt = performance.now()))
    const waiting = other.lock(name).acquire({ timeoutMs: 15_000 })
    // No renewal reaches the server from now on: the key expires there after the lease.
    relay.freeze()
    const next = await waiting
    const grantedAt = performance.now()
    assert.ok(lostAt !== null, 'the holder was not told before the other client was granted')
    assert.ok(lostAt <= grantedAt, `told at ${lostAt}, granted at ${grantedAt}`)
    assert.ok(guard.signal.reason instanceof LockLostError, String(guard.signal.reason))
    assert.equal(guard.signal.reason.code, 'POLYLOCK_LOST')
    assert.ok(next.fencingToken > guard.fencingToken, `${next.fencingToken} > ${guard.fencingToken}`)
    await next.release()
    await assert.rejects(guard.release(), LockLostError)
    await other.close()
    relay.close()
    await holder.close()
  })

  it('a key deleted behind the holder\'s back aborts the signal and release() rejects', { timeout: 30_000 }, async () => {
    const client = await connect(url)
    const name = unique('wasm-deleted')
    const guard = await client.lock(name, { leaseMs: 1000 }).acquire()
    const raw = await rawRedis(url)
    assert.equal(await raw.command('DEL', name), 1, 'the lock is a key at its name')
    raw.close()
    if (!guard.signal.aborted) await once(guard.signal, 'abort')
    const reason = guard.signal.reason
    assert.ok(reason instanceof LockLostError, String(reason))
    assert.equal(reason.lockName, name)
    const released = await guard.release().then(() => null, (e) => e)
    assert.ok(released instanceof LockLostError, String(released))
    assert.equal(released.message, `lock ${JSON.stringify(name)} was lost: ${reason.reason}`)
    await client.close()
  })
})
