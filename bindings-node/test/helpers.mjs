// Shared test helpers: server URLs from the environment, unique lock names,
// a raw RESP client (to touch Redis behind polylock's back), polling, and a
// relay that can freeze a client's connection.
import { once } from 'node:events'
import net from 'node:net'
import { setTimeout as sleep } from 'node:timers/promises'

function requireEnv(name) {
  const v = process.env[name]
  if (!v) {
    throw new Error(`${name} is not set: start the servers and run eval "$(scripts/services env)" first`)
  }
  return v
}

/** [backend, url] for every backend the suite runs against (see testsBackend). */
export function backends() {
  const all = [
    ['redis', () => requireEnv('POLYLOCK_TEST_REDIS')],
    ['zookeeper', () => requireEnv('POLYLOCK_TEST_ZK')],
  ]
  return all.filter(([b]) => testsBackend(b)).map(([b, url]) => [b, url()])
}

/**
 * Whether this run covers `backend`: all of them, unless POLYLOCK_TEST_BACKENDS
 * names some (`redis` for polylock/wasm, which speaks Redis only).
 */
export function testsBackend(backend) {
  const only = process.env.POLYLOCK_TEST_BACKENDS?.split(',')
  return !only || only.includes(backend)
}

let counter = 0
/** A lock name no other suite (or run) uses. */
export function unique(prefix) {
  counter += 1
  return `/polylock-test/node-${prefix}-${process.pid}-${counter}-${Date.now()}`
}

/** Polls `check` until it returns true or `ms` pass; returns the last result. */
export async function eventually(check, ms = 5000) {
  const deadline = Date.now() + ms
  for (;;) {
    if (await check()) return true
    if (Date.now() > deadline) return false
    await sleep(20)
  }
}

/** A minimal RESP2 client: enough for DEL, EXISTS, PING (integer, status and bulk replies). */
export async function rawRedis(url) {
  const { hostname, port } = new URL(url)
  const socket = net.connect({ host: hostname, port: Number(port) })
  await new Promise((resolve, reject) => {
    socket.once('connect', resolve)
    socket.once('error', reject)
  })
  let buffer = ''
  const waiting = []
  socket.setEncoding('utf8')
  socket.on('data', (chunk) => {
    buffer += chunk
    for (;;) {
      const end = buffer.indexOf('\r\n')
      if (end < 0 || waiting.length === 0) return
      const line = buffer.slice(0, end)
      if (line[0] === '$') {
        const len = Number(line.slice(1))
        if (len < 0) {
          buffer = buffer.slice(end + 2)
          waiting.shift().resolve(null)
          continue
        }
        if (buffer.length < end + 2 + len + 2) return
        const value = buffer.slice(end + 2, end + 2 + len)
        buffer = buffer.slice(end + 2 + len + 2)
        waiting.shift().resolve(value)
        continue
      }
      buffer = buffer.slice(end + 2)
      const w = waiting.shift()
      if (line[0] === '-') w.reject(new Error(line.slice(1)))
      else if (line[0] === ':') w.resolve(Number(line.slice(1)))
      else w.resolve(line.slice(1))
    }
  })
  return {
    command(...args) {
      return new Promise((resolve, reject) => {
        waiting.push({ resolve, reject })
        socket.write(`*${args.length}\r\n${args.map((a) => `$${Buffer.byteLength(String(a))}\r\n${a}\r\n`).join('')}`)
      })
    },
    close() {
      socket.end()
    },
  }
}

/** Redis keys polylock keeps for `name` that still exist. */
export async function redisLeftovers(url, name) {
  const raw = await rawRedis(url)
  try {
    const left = []
    const mutex = [name, `polylock_queue:{${name}}`, `polylock_queue_deadline:{${name}}`]
    const rw = [`polylock_rwqueue:{${name}}`, `polylock_rwqueue_deadline:{${name}}`]
    for (const key of [...mutex, ...rw]) {
      if ((await raw.command('EXISTS', key)) > 0) left.push(key)
    }
    return left
  } finally {
    raw.close()
  }
}

/**
 * Redis keys of the semaphore `name` (a name without braces, as `unique`
 * makes them): Redisson's permit ids by expiry, and polylock's waiter queue.
 */
export function semaphoreKeys(name) {
  return {
    timeouts: `{${name}}:timeout`,
    queue: `polylock_semqueue:{${name}}`,
    queueDeadline: `polylock_semqueue_deadline:{${name}}`,
  }
}

/** Permits of semaphore `name` held on the Redis server at `url` (`ZCARD {NAME}:timeout`). */
export async function redisPermitsHeld(url, name) {
  const raw = await rawRedis(url)
  try {
    return await raw.command('ZCARD', semaphoreKeys(name).timeouts)
  } finally {
    raw.close()
  }
}

/**
 * What the semaphore `name` still has on the Redis server at `url` that a
 * free semaphore does not: held permit ids, its waiter queue keys. (The
 * counter of free permits at `name` stays, as Redisson's does.)
 */
export async function semaphoreLeftovers(url, name) {
  const raw = await rawRedis(url)
  try {
    const { timeouts, queue, queueDeadline } = semaphoreKeys(name)
    const left = []
    const held = await raw.command('ZCARD', timeouts)
    if (held > 0) left.push(`${timeouts} (${held} permit ids)`)
    for (const key of [queue, queueDeadline]) {
      if ((await raw.command('EXISTS', key)) > 0) left.push(key)
    }
    return left
  } finally {
    raw.close()
  }
}

/**
 * Ends every permit of semaphore `name` held on the Redis server at `url`,
 * as a lapsed lease would: each permit id's expiry set to 0, so the next
 * script reclaims it. Returns how many there were.
 */
export async function expireRedisPermits(url, name) {
  const raw = await rawRedis(url)
  try {
    const script =
      "local ids = redis.call('ZRANGE', KEYS[1], 0, -1) " +
      "for _, id in ipairs(ids) do redis.call('ZADD', KEYS[1], 0, id) end return #ids"
    return await raw.command('EVAL', script, 1, semaphoreKeys(name).timeouts)
  } finally {
    raw.close()
  }
}

/** True once the server shows `name` free with no waiter (and, on Redis, no key left). */
export async function serverIsClean(client, backend, url, name) {
  return eventually(async () => {
    const s = await client.status(name)
    if (s.held || (s.waiters ?? 0) > 0) return false
    return backend !== 'redis' || (await redisLeftovers(url, name)).length === 0
  })
}

/**
 * The children of the ZooKeeper node `path` (a leading `/` added if missing)
 * on the server of `url` (`zk://host:port[,...]`, the first host), [] when
 * the node does not exist. A one-shot session speaking just enough of the
 * ZooKeeper protocol (connect, getChildren, close): npm has no ZooKeeper
 * client the suite could lean on, and polylock's own API shows a lock, not
 * the nodes of a semaphore.
 */
export async function zkChildren(url, path) {
  const hostport = url.replace(/^zk:\/\//, '').split(/[,/]/)[0]
  const [host, port] = [hostport.slice(0, hostport.lastIndexOf(':')), Number(hostport.slice(hostport.lastIndexOf(':') + 1))]
  const full = path.startsWith('/') ? path : `/${path}`
  const socket = net.connect({ host, port })
  await new Promise((resolve, reject) => {
    socket.once('connect', resolve)
    socket.once('error', reject)
  })
  let buffer = Buffer.alloc(0)
  const frames = []
  let wake = null
  let failed = null
  socket.on('data', (chunk) => {
    buffer = Buffer.concat([buffer, chunk])
    while (buffer.length >= 4 && buffer.length >= 4 + buffer.readInt32BE(0)) {
      const len = buffer.readInt32BE(0)
      frames.push(buffer.subarray(4, 4 + len))
      buffer = buffer.subarray(4 + len)
    }
    wake?.()
  })
  socket.on('error', (e) => {
    failed = e
    wake?.()
  })
  const next = async () => {
    while (frames.length === 0) {
      if (failed) throw failed
      await new Promise((resolve) => (wake = resolve))
    }
    return frames.shift()
  }
  const send = (body) => {
    const len = Buffer.alloc(4)
    len.writeInt32BE(body.length)
    socket.write(Buffer.concat([len, body]))
  }
  const int32 = (v) => {
    const b = Buffer.alloc(4)
    b.writeInt32BE(v)
    return b
  }
  const int64 = (v) => {
    const b = Buffer.alloc(8)
    b.writeBigInt64BE(BigInt(v))
    return b
  }
  const str = (s) => Buffer.concat([int32(Buffer.byteLength(s)), Buffer.from(s)])
  try {
    // ConnectRequest: protocolVersion, lastZxidSeen, timeOut, sessionId, passwd; readOnly.
    send(Buffer.concat([int32(0), int64(0), int32(10_000), int64(0), int32(16), Buffer.alloc(16), Buffer.from([0])]))
    await next()
    // GetChildrenRequest (op 8): path, watch = false.
    send(Buffer.concat([int32(1), int32(8), str(full), Buffer.from([0])]))
    let reply
    do reply = await next()
    while (reply.readInt32BE(0) !== 1) // xid 1; skip pings and notifications
    const err = reply.readInt32BE(12) // after xid and zxid
    if (err === -101) return [] // NoNode
    if (err !== 0) throw new Error(`ZooKeeper getChildren ${full}: error ${err}`)
    const children = []
    let at = 20
    const count = reply.readInt32BE(16)
    for (let i = 0; i < count; i++) {
      const n = reply.readInt32BE(at)
      children.push(reply.subarray(at + 4, at + 4 + n).toString('utf8'))
      at += 4 + n
    }
    send(Buffer.concat([int32(2), int32(-11)])) // closeSession
    return children
  } finally {
    socket.destroy()
  }
}

/**
 * A TCP relay to the server of `target` (`redis://host:port`, `zk://host:port`)
 * that can go silent: once frozen it drops every byte both ways and keeps
 * the sockets open (new connections too), as a stalled network does, so the
 * client's requests time out instead of failing fast. `url` is `target`
 * through the relay.
 */
export async function freezableRelay(target) {
  const { protocol, hostname, port, pathname, search } = new URL(target)
  let frozen = false
  const server = net.createServer((down) => {
    const up = net.connect({ host: hostname, port: Number(port) })
    down.on('data', (d) => frozen || up.write(d))
    up.on('data', (d) => frozen || down.write(d))
    for (const s of [up, down]) s.on('error', () => {})
    down.on('close', () => up.destroy())
    up.on('close', () => down.destroy())
    server.on('close', () => down.destroy())
  })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  return {
    url: `${protocol}//127.0.0.1:${server.address().port}${pathname}${search}`,
    freeze: () => (frozen = true),
    close: () => {
      server.close()
      server.emit('close')
    },
  }
}
