// A second Node process (child_process.fork) contends on the same lock.
import assert from 'node:assert/strict'
import { fork } from 'node:child_process'
import { once } from 'node:events'
import { mkdtemp, readFile, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, it } from 'node:test'
import { setImmediate as yieldToLoop } from 'node:timers/promises'

import { connect } from 'polylock'
import { backends, unique } from './helpers.mjs'

const ROUNDS = 30

for (const [backend, url] of backends()) {
  describe(`two processes on ${backend}`, () => {
    it('a forked process and this one keep a file counter exact', { timeout: 60_000 }, async () => {
      const name = unique('fork')
      const file = join(await mkdtemp(join(tmpdir(), 'polylock-node-')), 'counter')
      await writeFile(file, '0')
      const child = fork(new URL('./fixtures/contender.mjs', import.meta.url), [url, name, file, String(ROUNDS)])
      const exited = once(child, 'exit')
      const messages = []
      child.on('message', (m) => messages.push(m))
      const [ready] = await once(child, 'message')
      assert.ok(ready.ready)

      const client = await connect(url)
      const lock = client.lock(name)
      const mine = []
      child.send('go')
      for (let i = 0; i < ROUNDS; i++) {
        await lock.withLock(async (guard) => {
          const v = Number(await readFile(file, 'utf8'))
          await yieldToLoop()
          await writeFile(file, String(v + 1))
          mine.push(guard.fencingToken)
        })
      }
      const [code] = await exited
      assert.equal(code, 0)
      await client.close()

      assert.equal(Number(await readFile(file, 'utf8')), 2 * ROUNDS, 'lost updates across processes')
      const theirs = messages.find((m) => m.tokens).tokens.map(BigInt)
      const all = new Set([...mine, ...theirs].map(String))
      assert.equal(all.size, 2 * ROUNDS, 'every grant across both processes has its own fencing token')
    })
  })
}
