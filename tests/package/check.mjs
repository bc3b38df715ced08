// Install test of the npm packages (scripts/package test): takes and releases
// a lock on every server URL given, with polylock from node_modules.
import { createRequire } from 'node:module'
import { connect } from 'polylock'

const resolved = createRequire(import.meta.url).resolve('polylock')
if (!resolved.includes('/node_modules/polylock/')) throw new Error(`polylock not from node_modules: ${resolved}`)
for (const url of process.argv.slice(2)) {
  const name = `package-test/node-${process.pid}`
  const client = await connect(url)
  const lock = client.lock(name)
  const guard = await lock.acquire({ timeoutMs: 10_000 })
  const token = guard.fencingToken
  if (!(token > 0n)) throw new Error(`fencing token ${token}`)
  if (!(await client.status(name)).held) throw new Error('the server does not see the lock held')
  await guard.release()
  if ((await client.status(name)).held) throw new Error('the server still sees the lock held')
  await client.close()
  console.log(`node ${url.split(':')[0]}: acquired (fencing token ${token}) and released`)
}

// A release package is built without the test hooks: asking for one is a
// clear error, before any connection is made.
const hooks = await connect(process.argv[2], { _debugFaults: true }).then(
  (c) => c.close().then(() => 'compiled in'),
  (e) => (String(e.message).includes('test-hooks') ? null : `unclear error: ${e.message}`),
)
if (hooks) throw new Error(`the release npm package's test hooks: ${hooks}`)
console.log('node: no test hooks in the release package')
