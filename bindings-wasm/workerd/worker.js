// A Worker that takes and releases a polylock lock on a Redis over TCP
// (cloudflare:sockets): the core's table in polylock.wasm decides, this
// file executes its outputs one command at a time with a minimal RESP
// encoder/decoder of its own. A proof that the module runs in workerd and
// locks on the local Redis (run.sh), not a package: it takes the lock once
// (GET /?redis=URL&timeoutMs=N) and releases it at once, so it needs no
// timer and no pub/sub (a contended wait answers 501 instead of waiting).
import { connect } from 'cloudflare:sockets'
import wasmModule from './polylock.wasm'

const enc = new TextEncoder()
const dec = new TextDecoder()

function resp(args) {
  let s = `*${args.length}\r\n`
  for (const a of args) s += `$${enc.encode(a).length}\r\n${a}\r\n`
  return enc.encode(s)
}

/** Reads one RESP value from a byte reader; returns the module's reply JSON. */
class Reader {
  constructor(stream) { this.r = stream.getReader(); this.buf = new Uint8Array(0) }
  async fill() { const { value, done } = await this.r.read(); if (done) throw new Error('closed'); const b = new Uint8Array(this.buf.length + value.length); b.set(this.buf); b.set(value, this.buf.length); this.buf = b }
  async line() { for (;;) { const i = this.buf.findIndex((c, k) => c === 13 && this.buf[k + 1] === 10); if (i >= 0) { const l = dec.decode(this.buf.slice(0, i)); this.buf = this.buf.slice(i + 2); return l } await this.fill() } }
  async value() {
    const l = await this.line()
    const t = l[0], rest = l.slice(1)
    if (t === ':') return { i: rest }
    if (t === '+') return { s: rest }
    if (t === '-') throw Object.assign(new Error(rest), { refused: true })
    if (t === '$') { const n = Number(rest); if (n < 0) return null; while (this.buf.length < n + 2) await this.fill(); const b = this.buf.slice(0, n); this.buf = this.buf.slice(n + 2); return { b: String.fromCharCode(...b) } }
    if (t === '*') { const n = Number(rest); if (n < 0) return null; const a = []; for (let k = 0; k < n; k++) a.push(await this.value()); return a }
    throw new Error('bad RESP ' + l)
  }
}

export default {
  async fetch(request) {
    const { exports: x } = await WebAssembly.instantiate(wasmModule, {})
    const write = (s) => { const max = s.length * 3; const p = x.input(max); return enc.encodeInto(s, new Uint8Array(x.memory.buffer, p, max)).written }
    const read = (n) => JSON.parse(dec.decode(new Uint8Array(x.memory.buffer, x.output(), n)))
    const id = [...crypto.getRandomValues(new Uint8Array(16))].map((b) => b.toString(16).padStart(2, '0')).join('')
    const url = new URL(request.url).searchParams.get('redis')
    const h = x.table_new(write(JSON.stringify({ url, clientId: id })))
    const created = read(x.output_len())
    if (h === 0) return new Response(JSON.stringify(created), { status: 500 })
    const [host, port] = created.endpoint.addr.split(':')
    const sock = connect({ hostname: host, port: Number(port) })
    const writer = sock.writable.getWriter()
    const reader = new Reader(sock.readable)
    const scripts = new Map()
    const log = []
    const t0 = performance.now()
    const call = (r) => read(x.table_call(h, write(JSON.stringify({ now: performance.now() - t0, ...r }))))
    // Runs the table's outputs: Redis commands one at a time (the table's order), events into the log.
    async function run(out) {
      for (const o of out) {
        if (o.k === 'eval') {
          // Always with the source (`o.sha` is the table's offer to go by SHA1): never NOSCRIPT.
          if (o.source) scripts.set(o.script, o.source)
          await writer.write(resp(['EVAL', scripts.get(o.script), String(o.keys.length), ...o.keys, ...o.args]))
          let reply
          try { reply = { v: await reader.value() } } catch (e) { reply = e.refused ? { refused: e.message } : { failed: e.message } }
          await run(call({ op: 'reply', id: o.id, reply }).out)
        } else if (o.k === 'subscribe') {
          throw new Error('a contended wait needs pub/sub, which this proof does not have')
        } else log.push(o)
      }
    }
    const owner = x.next_owner_id()
    const timeoutMs = Number(new URL(request.url).searchParams.get('timeoutMs') ?? 2000)
    const a = call({ op: 'acquire', name: 'workerd/demo', owner, timeoutMs, nonce: id })
    try {
      await run(a.out)
    } catch (e) {
      return new Response(e.message, { status: 501 })
    }
    const granted = log.find((o) => o.k === 'granted')
    if (!granted) return new Response(JSON.stringify({ events: log }))
    const r = call({ op: 'release', name: 'workerd/demo', owner, token: granted?.token })
    await run(r.out)
    await sock.close()
    return new Response(JSON.stringify({ granted, released: log.find((o) => o.k === 'released'), events: log.map((o) => o.k) }))
  },
}
