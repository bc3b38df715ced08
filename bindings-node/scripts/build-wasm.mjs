// Builds the core's lock table for WebAssembly (bindings-wasm, release,
// wasm32-unknown-unknown, in the workspace's shared target dir) and copies
// it next to wasm.js as polylock.wasm; then shrinks it with binaryen's
// wasm-opt -Oz when that is installed (it is optional). Prints the sizes.
import { execFileSync } from 'node:child_process'
import { copyFileSync, renameSync, statSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'

const pkgDir = join(dirname(fileURLToPath(import.meta.url)), '..')
const repoRoot = join(pkgDir, '..')
const targetDir = process.env.CARGO_TARGET_DIR || join(repoRoot, 'target')

// A fresh rustup toolchain lacks the target (bench/run on a new machine
// failed here): add it, a no-op when present.
try {
  execFileSync('rustup', ['target', 'add', 'wasm32-unknown-unknown'], { stdio: 'ignore' })
} catch {
  // No rustup: the build below says what is missing.
}
execFileSync('cargo', ['build', '--release', '-p', 'polylock-wasm', '--target', 'wasm32-unknown-unknown'], {
  cwd: pkgDir,
  stdio: 'inherit',
})
const built = join(targetDir, 'wasm32-unknown-unknown', 'release', 'polylock_wasm.wasm')
const dest = join(pkgDir, 'polylock.wasm')
const kib = (file) => `${(statSync(file).size / 1024).toFixed(1)} KiB`
console.error(`polylock: ${built}: ${kib(built)}`)
let optimized = false
try {
  execFileSync('wasm-opt', ['-Oz', built, '-o', `${dest}.tmp`], { stdio: 'inherit' })
  optimized = true
} catch (e) {
  if (e.code !== 'ENOENT') throw e
  copyFileSync(built, `${dest}.tmp`)
}
renameSync(`${dest}.tmp`, dest)
console.error(`polylock: ${dest}: ${kib(dest)}${optimized ? ' (wasm-opt -Oz)' : ' (wasm-opt not installed)'}`)
