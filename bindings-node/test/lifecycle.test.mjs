// Process lifetime: a closed client lets the process exit by itself; the
// addon works in worker_threads (it is context-aware) next to the main thread.
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { describe, it } from 'node:test'
import { Worker } from 'node:worker_threads'

import { connect } from 'polylock'
import { backends, unique, serverIsClean } from './helpers.mjs'

const EXIT_WITHIN_MS = 5000

for (const [backend, url] of backends()) {
  describe(`lifecycle on ${backend}`, () => {
    it('the process exits by itself after close', { timeout: 30_000 }, async () => {
      const name = unique('exit')
      const child = spawn(process.execPath, [new URL('./fixtures/exit-after-close.mjs', import.meta.url).pathname, url, name], {
        stdio: ['ignore', 'pipe', 'inherit'],
      })
      let out = ''
      child.stdout.on('data', (d) => (out += d))
      // Time only the exit after close (connecting under a loaded CI is not the point).
      while (!out.includes('closed') && child.exitCode === null) await once(child.stdout, 'data').catch(() => {})
      const started = Date.now()
      const timer = setTimeout(() => child.kill('SIGKILL'), EXIT_WITHIN_MS)
      const [code, signal] = child.exitCode !== null ? [child.exitCode, null] : await once(child, 'exit')
      clearTimeout(timer)
      assert.equal(signal, null, `the process did not exit within ${EXIT_WITHIN_MS} ms of close (${Date.now() - started} ms)`)
      assert.equal(code, 0)
      const client = await connect(url)
      assert.ok(await serverIsClean(client, backend, url, name), 'close did not release the held lock')
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
        const [msg] = await once(w, 'message')
        assert.equal(msg, 'done')
        const [code] = await once(w, 'exit')
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
