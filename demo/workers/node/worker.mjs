// The Node demo worker: same protocol and output as the Rust one
// (runtime/examples/demo_worker.rs; demo/README.md).
import { openSync, readFileSync, writeSync } from 'node:fs'
import { join } from 'node:path'
import net from 'node:net'
import { createRequire } from 'node:module'
import { setTimeout as sleep } from 'node:timers/promises'

const require = createRequire(import.meta.url)
const { connect, LockLostError } = require('../../../bindings-node/index.js')

const args = process.argv.slice(2)
const arg = (k, dflt) => {
  const i = args.indexOf(k)
  if (i < 0 || i + 1 >= args.length) {
    if (dflt === undefined) throw new Error(`${k} is required`)
    return dflt
  }
  return args[i + 1]
}
const url = arg('--url')
const name = arg('--lock')
const resourceUrl = arg('--resource-url')
const rounds = Number(arg('--rounds', '5'))
const id = arg('--id', `node-${process.pid}`)
const holdMs = Number(arg('--hold-ms', '2'))
const leaseMs = Number(arg('--lease-ms', '30000'))
const sessionMs = Number(arg('--session-ms', '10000'))
const backend = url.startsWith('zk') ? 'zookeeper' : 'redis'
const resource = `demo:resource:${backend}:${name}`
const script = readFileSync(new URL('../../resource.lua', import.meta.url), 'utf8')
const pid = process.pid
const now = () => process.hrtime.bigint() // CLOCK_MONOTONIC on Linux

/** A minimal RESP client: one command at a time; integer, status, bulk, nil and error replies. */
async function resp(u) {
  const { hostname, port, password, username } = new URL(u)
  const socket = net.connect({ host: hostname, port: Number(port || 6379) })
  await new Promise((resolve, reject) => {
    socket.once('connect', resolve)
    socket.once('error', reject)
  })
  let buf = Buffer.alloc(0)
  let pending = null
  const parse = () => {
    const end = buf.indexOf('\r\n')
    if (end < 0) return undefined
    const line = buf.subarray(0, end).toString()
    if (line[0] === '$') {
      const len = Number(line.slice(1))
      if (len < 0) return { value: null, used: end + 2 }
      if (buf.length < end + 2 + len + 2) return undefined
      return { value: buf.subarray(end + 2, end + 2 + len).toString(), used: end + 2 + len + 2 }
    }
    if (line[0] === '-') return { error: new Error(line.slice(1)), used: end + 2 }
    if (line[0] === ':') return { value: Number(line.slice(1)), used: end + 2 }
    return { value: line.slice(1), used: end + 2 }
  }
  socket.on('data', (chunk) => {
    buf = Buffer.concat([buf, chunk])
    const r = parse()
    if (r === undefined || pending === null) return
    buf = buf.subarray(r.used)
    const p = pending
    pending = null
    if (r.error) p.reject(r.error)
    else p.resolve(r.value)
  })
  socket.on('error', (e) => pending?.reject(e))
  const command = (...a) =>
    new Promise((resolve, reject) => {
      pending = { resolve, reject }
      socket.write(`*${a.length}\r\n${a.map((x) => `$${Buffer.byteLength(String(x))}\r\n${x}\r\n`).join('')}`)
    })
  if (password) await command('AUTH', ...(username ? [decodeURIComponent(username)] : []), decodeURIComponent(password))
  const db = new URL(u).pathname.slice(1)
  if (db) await command('SELECT', db)
  return { command, close: () => socket.end() }
}

const permits = args.includes('--permits') ? Number(arg('--permits')) : undefined

// The operation history for tests/history's histcheck: one JSON line per call,
// return and reported loss, in POLYLOCK_HISTORY_DIR (nothing when unset). Each
// line is one synchronous write, so a killed worker leaves whole lines (a call
// without its return: an outcome unknown). Tokens and times are exact integers.
const historyDir = process.env.POLYLOCK_HISTORY_DIR
const historyFd = historyDir ? openSync(join(historyDir, `${id}-${pid}.jsonl`), 'a') : null
const historyCommon = { client: `${id}/${pid}`, backend, lock: name, resource }
const record = (op, kind, fields = {}) => {
  if (historyFd === null) return
  const line = { ...historyCommon, op, kind, t_ns: now(), ...fields }
  const json = Object.entries(line)
    .map(([k, v]) => `"${k}": ${typeof v === 'bigint' ? v : JSON.stringify(v)}`)
    .join(', ')
  writeSync(historyFd, `{${json}}\n`)
}
const r = await resp(resourceUrl)
const client = await connect(url, { leaseMs, sessionTimeoutMs: sessionMs })
// BigInts (tokens, nanoseconds) are written as exact JSON integers.
const out = (o) =>
  process.stdout.write(`{${Object.entries(o).map(([k, v]) => `"${k}": ${typeof v === 'bigint' ? v : JSON.stringify(v)}`).join(', ')}}\n`)
if (permits !== undefined) {
  // One permit of the semaphore of N: N hold at once, so no resource write.
  const sem = client.semaphore(name, { permits })
  for (let i = 0; i < rounds; i++) {
    record('acquire', 'call', { permits })
    const permit = await sem.acquire({ count: 1 })
    const token = permit.fencingToken
    record('acquire', 'return', { token })
    const start = now()
    out({ event: 'grant', worker: id, lang: 'node', backend, pid, token, t_ns: start })
    await sleep(holdMs)
    const end = now()
    let lost = permit.signal.aborted
    if (lost) record('lost', 'event')
    record('release', 'call', { token })
    try {
      await permit.release()
    } catch (e) {
      if (!(e instanceof LockLostError)) throw e
      lost = true
    }
    record('release', 'return', { ok: !lost })
    out({ worker: id, lang: 'node', backend, pid, token, start_ns: start, end_ns: end, accepted: true, lost })
  }
  await client.close()
  r.close()
  process.exit(0)
}
const lock = client.lock(name)
for (let i = 0; i < rounds; i++) {
  record('acquire', 'call')
  const guard = await lock.acquire()
  const token = guard.fencingToken
  record('acquire', 'return', { token })
  const lostSignal = guard.signal
  const start = now()
  out({ event: 'grant', worker: id, lang: 'node', backend, pid, token, t_ns: start })
  record('read', 'call', { token })
  const count = Number((await r.command('EVAL', script, 1, resource, token.toString())) ?? 0) // the fenced read (-1: refused)
  record('read', 'return', { value: count })
  await sleep(holdMs) // widen the window a lost update would need
  record('write', 'call', { token, value: count + 1 })
  const accepted = await r.command('EVAL', script, 1, resource, token.toString(), count + 1)
  record('write', 'return', { ok: accepted === 1 })
  const end = now()
  // Lost during the section, or found out on release.
  let lost = lostSignal.aborted
  if (lost) record('lost', 'event')
  record('release', 'call', { token })
  try {
    await guard.release()
  } catch (e) {
    if (!(e instanceof LockLostError)) throw e
    lost = true
  }
  record('release', 'return', { ok: !lost })
  out({ worker: id, lang: 'node', backend, pid, token, start_ns: start, end_ns: end, accepted: accepted === 1, lost })
}
await client.close()
r.close()
