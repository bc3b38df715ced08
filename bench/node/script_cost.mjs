// Where the Redis server's time goes when it runs polylock's uncontended
// acquire and release scripts: the scripts themselves, the same commands in
// two minimal scripts with no Lua around them, empty scripts with the same
// keys and arguments, and empty scripts with one key and one argument. Each
// row is the server's own count (`INFO commandstats` deltas, `EVALSHA`'s
// usec and, apart, that of the commands run inside), per acquire+release
// pair; the counts are server-wide, so run it on a server no other client
// uses meanwhile. The variants take turns, round by round, and each figure
// is the median of the rounds.
//
// The differences between the rows separate what a command costs when
// called from Lua (beyond its own usec), what each further key and argument
// costs, and what the Lua around the commands costs. Its figures, like every
// figure, belong in bench/REPORT.md.
//
// A tool for a change to the scripts, not part of bench/run:
//   node bench/node/script_cost.mjs [PAIRS=1500] [ROUNDS=9] [PACE_MS=0]
// with POLYLOCK_TEST_REDIS set and the Rust benchmark binary built
// (cargo build --release -p polylock-bench).
import { execFileSync } from 'node:child_process'
import { setTimeout as sleep } from 'node:timers/promises'
import Redis from 'ioredis'

const url = process.env.POLYLOCK_TEST_REDIS
if (!url) throw new Error('POLYLOCK_TEST_REDIS is not set: eval "$(scripts/services env)" first')
const [pairs, rounds, paceMs] = [1500, 9, 0].map((d, i) => Number(process.argv[2 + i] ?? d))
const bin = `${process.env.CARGO_TARGET_DIR ?? new URL('../../target', import.meta.url).pathname}/release/polylock-bench`
const [acquire, release] = JSON.parse(
  execFileSync(bin, ['--print-raw-scripts', `/polylock-bench/script-cost-${process.pid}`], { encoding: 'utf8' }),
)

// The commands an uncontended acquire and release run (acquire: EXISTS of
// the lock and its queue, TIME, the token's SET .. GET, HSET, PEXPIRE;
// release: HDEL, the queue's head, PUBLISH on Redisson's channel), with the
// same keys and arguments as polylock's scripts and nothing else.
const COMMANDS_ONLY = [
  `if redis.call('EXISTS', KEYS[1], KEYS[3]) == 0 then
local t = redis.call('TIME')
local us = t[1] .. string.rep('0', 6 - #t[2]) .. t[2]
redis.call('SET', KEYS[2], us, 'PX', ARGV[2], 'GET')
redis.call('HSET', KEYS[1], ARGV[1], 1)
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {1, us}
end
return {0}`,
  `if redis.call('HDEL', KEYS[1], ARGV[1]) == 1 and not redis.call('ZRANGE', KEYS[2], 0, 0)[1] then
redis.call('PUBLISH', ARGV[2], '0')
return 1
end
return 0`,
]
const keysAndArgs = (call) => [call.keys.length, ...call.keys, ...call.args]
const full = [keysAndArgs(acquire), keysAndArgs(release)]
const one = [1, acquire.keys[0], acquire.args[0]]
const variants = [
  ["polylock's scripts", [acquire.source, release.source], full],
  ['the same commands, no Lua around them', COMMANDS_ONLY, full],
  ['empty scripts, the same keys and arguments', ['return 0', 'return 1'], full],
  ['empty scripts, one key and one argument', ['return 0', 'return 1'], [one, one]],
]

const redis = new Redis(url)
const shas = []
for (const [, sources] of variants) shas.push(await Promise.all(sources.map((s) => redis.script('LOAD', s))))

/** Every command's calls and usec so far (INFO itself left out). */
async function commandStats() {
  const stats = new Map()
  for (const line of (await redis.info('commandstats')).split('\n')) {
    const m = line.match(/^cmdstat_([^:]+):calls=\d+,usec=(\d+)/)
    if (m && m[1] !== 'info') stats.set(m[1], Number(m[2]))
  }
  return stats
}

const samples = variants.map(() => ({ scripts: [], inside: [] }))
for (let r = 0; r < rounds; r++) {
  for (let v = 0; v < variants.length; v++) {
    const [a, b] = shas[v]
    const [argsA, argsB] = variants[v][2]
    const before = await commandStats()
    for (let i = 0; i < pairs; i++) {
      await redis.evalsha(a, ...argsA)
      await redis.evalsha(b, ...argsB)
      if (paceMs) await sleep(paceMs)
    }
    const after = await commandStats()
    let inside = 0
    for (const [cmd, usec] of after) if (cmd !== 'evalsha') inside += usec - (before.get(cmd) ?? 0)
    samples[v].scripts.push((after.get('evalsha') - before.get('evalsha')) / pairs)
    samples[v].inside.push(inside / pairs)
  }
}
await redis.del(...acquire.keys)
await redis.quit()

const median = (xs) => [...xs].sort((x, y) => x - y)[xs.length >> 1]
console.log(`usec per acquire+release pair, median of ${rounds} rounds of ${pairs} pairs${paceMs ? `, ${paceMs} ms apart` : ''}`)
console.log('| variant | EVALSHA usec (commands inside included) | the commands inside |')
console.log('|---|---:|---:|')
variants.forEach(([name], v) => {
  console.log(`| ${name} | ${median(samples[v].scripts).toFixed(1)} | ${median(samples[v].inside).toFixed(1)} |`)
})
