// Forked by bench.mjs for the handoff measurement: on each "wait" message,
// blocks in acquire() on the key, stamps the moment it returned with the
// machine's monotonic clock, releases, and reports the stamp. On "cpu",
// reports this process's CPU time so far (µs, user + sys).
import { open } from './impls.mjs'

const [kind, url] = process.argv.slice(2)
const impl = await open(kind, url)
process.on('message', async (msg) => {
  if (msg.cmd === 'wait') {
    process.send({ waiting: true })
    const h = await impl.acquire(msg.key)
    const acquiredAt = process.hrtime.bigint()
    await impl.release(h)
    process.send({ acquiredAt: String(acquiredAt) })
  } else if (msg.cmd === 'cpu') {
    const u = process.cpuUsage()
    process.send({ cpu: u.user + u.system })
  } else if (msg.cmd === 'exit') {
    await impl.close()
    process.disconnect()
  }
})
process.send({ ready: true })
