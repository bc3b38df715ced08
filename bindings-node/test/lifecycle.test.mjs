// Process lifetime: a closed client lets the process exit by itself; the
// addon works in worker_threads (it is context-aware) next to the main thread.
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { describe, it } from 'node:test'
import { Worker } from 'node:worker_threads'

import { connect } from 'polylock'
import { backends, unique, serverIsClean, eventually } from './helpers.mjs'

const EXIT_WITHIN_MS = 5000

for (const [backend, url] of backends()) {
  describe(`lifecycle on ${backend}`, () => {
    it('the process exits by itself after close', { timeout: 30_000 }, async () => {
      const name = unique('exit')
      const child = spawn(process.execPath, [new URL('./fixtures/exit-after-close.mjs', import.meta.url).pathname, url, name], {
        stdio: ['ignore', 'pipe', 'inherit'],
      })
      // Listen for the exit from the start: 'exit' may be emitted in the same
      // tick as the last 'data', before a later once(child, 'exit') would listen.
      const exited = once(child, 'exit')
      let out = ''
      const closed = new Promise((resolve) => {
        child.stdout.on('data', (d) => {
          out += d
          if (out.includes('closed')) resolve()
        })
      })
      // Time only the exit after close (connecting under a loaded CI is not the point).
      // A child that dies before printing 'closed' settles `exited` instead.
      await Promise.race([closed, exited])
      const started = Date.now()
      const timer = setTimeout(() => child.kill('SIGKILL'), EXIT_WITHIN_MS)
      const [code, signal] = await exited
      clearTimeout(timer)
      assert.ok(out.includes('closed'), `the child exited (code ${code}, signal ${signal}) before closing its client`)
      assert.equal(signal, null, `the process did not exit within ${EXIT_WITHIN_MS} ms of close (${Date.now() - started} ms)`)
      assert.equal(code, 0)
      const client = await connect(url)
      assert.ok(await serverIsClean(client, backend, url, name), 'close did not release the held lock')
      await client.close()
    })

    it('a pending acquire keeps the process alive until it is granted', { timeout: 60_000 }, async () => {
      const name = unique('pending')
      const client = await connect(url)
      const held = await client.lock(name).acquire()
      const child = spawn(process.execPath, [new URL('./fixtures/wait-for-grant.mjs', import.meta.url).pathname, url, name], {
        stdio: ['ignore', 'pipe', 'inherit'],
      })
      const exited = once(child, 'exit')
      let out = ''
      child.stdout.on('data', (d) => (out += d))
      // Release only once the child waits on the server (nothing else keeps it alive then).
      const waiting = await eventually(async () => ((await client.status(name)).waiters ?? 0) > 0 || child.exitCode !== null, 30_000)
      assert.ok(waiting && child.exitCode === null, `the child exited (code ${child.exitCode}) while its acquire was pending`)
      await new Promise((r) => setTimeout(r, 200))
      await held.release()
      const [code] = await exited
      assert.equal(code, 0)
      assert.match(out, /granted/)
      assert.ok(await serverIsClean(client, backend, url, name))
      await client.close()
    })

    it('works in worker_threads, contending with the main thread', { timeout: 60_000 }, async () => {
      const name = unique('worker')
      const shared = new SharedArrayBuffer(4)
      const counter = new Int32Array(shared)
      const rounds = 20
      const workers = [1, 2].map(
        () => new Worker(new URL('./fixtures/worker.mjs', import.meta.url), { workerData: { url, name, rounds, shared } }),
      )
      const done = workers.map(async (w) => {
        // Both listeners go on before anything is awaited: a worker that exits
        // right after posting has its message drained and 'exit' emitted in one
        // tick, so a once(w, 'exit') added after the message would never settle.
        const messages = []
        w.on('message', (m) => messages.push(m))
        const [code] = await once(w, 'exit')
        assert.deepEqual(messages, ['done'])
        assert.equal(code, 0)
      })
      const client = await connect(url)
      const lock = client.lock(name)
      for (let i = 0; i < rounds; i++) {
        await lock.withLock(async () => {
          const v = Atomics.load(counter, 0)
          await new Promise((r) => setImmediate(r))
          Atomics.store(counter, 0, v + 1)
        })
      }
      await Promise.all(done)
      assert.equal(Atomics.load(counter, 0), 3 * rounds)
      // The main thread's module still works after the workers' environments are gone.
      const g = await lock.acquire({ timeoutMs: 5000 })
      await g.release()
      await client.close()
    })
  })
}
