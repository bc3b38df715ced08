// Builds the native addon with cargo (release, in the workspace's shared
// target dir) and copies it next to index.js as polylock.<platform>-<arch>.node.
// Idempotent and fast when nothing changed: cargo does the up-to-date check.
import { execFileSync } from 'node:child_process'
import { copyFileSync, renameSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'

const pkgDir = join(dirname(fileURLToPath(import.meta.url)), '..')
const repoRoot = join(pkgDir, '..')
const targetDir = process.env.CARGO_TARGET_DIR || join(repoRoot, 'target')

// `--test-hooks` (npm test): with the fault-injection hooks the suite uses;
// without it (npm install, npm run build) they are left out, as in releases.
const features = process.argv.includes('--test-hooks') ? ['--features', 'test-hooks'] : []
execFileSync('cargo', ['build', '--release', '-p', 'polylock-node', ...features], { cwd: pkgDir, stdio: 'inherit' })

const libName = {
  linux: 'libpolylock_node.so',
  darwin: 'libpolylock_node.dylib',
  win32: 'polylock_node.dll',
}[process.platform]
if (!libName) throw new Error(`polylock: unsupported platform ${process.platform}`)

// Copy then rename: a process that has the old addon loaded keeps its mapping intact.
const dest = join(pkgDir, `polylock.${process.platform}-${process.arch}.node`)
copyFileSync(join(targetDir, 'release', libName), `${dest}.tmp`)
renameSync(`${dest}.tmp`, dest)
console.error(`polylock: native addon at ${dest}`)
