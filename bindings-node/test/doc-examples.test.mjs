// Runs every ```js example of the documentation (README.md, docs/,
// bindings-node/README.md) against the test servers, so a renamed method
// breaks this suite rather than the docs.
//
// The blocks of one Markdown file form one ES module, in order (a page's
// later examples may use what its earlier ones made; their `import` lines
// are hoisted, as ES modules hoist them anyway). A block preceded by
// `<!-- fragment: reason -->` is skipped (code that needs another library,
// or that is not a whole statement). The module is written inside this
// package, so `import ... from 'polylock'` and 'polylock/wasm' resolve to
// this package itself, and run in a child `node`. The documented URLs (the
// local servers' ports, or the default ones) are pointed at
// POLYLOCK_TEST_REDIS and POLYLOCK_TEST_ZK.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import { mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs'
import { dirname, join, relative } from 'node:path'
import { fileURLToPath } from 'node:url'

const pkg = join(dirname(fileURLToPath(import.meta.url)), '..')
const root = join(pkg, '..')
const outDir = join(pkg, 'test', 'build', 'doc-examples')
const LANGUAGES = new Set(['js', 'javascript', 'mjs'])
const FRAGMENT = /^<!--\s*fragment:\s*\S.*-->\s*$/
const DOCUMENTED_URLS = {
  redis: ['redis://127.0.0.1:6390', 'redis://127.0.0.1:6379'],
  zk: ['zk://127.0.0.1:2191', 'zk://127.0.0.1:2181'],
}

function markdownUnder(dir) {
  return readdirSync(dir)
    .map((name) => join(dir, name))
    .flatMap((path) => (statSync(path).isDirectory() ? markdownUnder(path) : path.endsWith('.md') ? [path] : []))
    .sort()
}

/** The runnable ```js blocks of a file, fragments left out, each with its first line number. */
export function examples(path) {
  const lines = readFileSync(path, 'utf8').split('\n')
  const blocks = []
  for (let i = 0; i < lines.length; i++) {
    const fence = /^```(\S*)\s*$/.exec(lines[i])
    if (!fence) continue
    const language = fence[1].split(',')[0]
    let end = i + 1
    while (end < lines.length && lines[end].trimEnd() !== '```') end++
    const before = lines.slice(0, i).reverse().find((line) => line.trim() !== '') ?? ''
    if (LANGUAGES.has(language) && !FRAGMENT.test(before.trim())) {
      blocks.push({ line: i + 2, code: lines.slice(i + 1, end).join('\n') })
    }
    i = end
  }
  return blocks
}

function moduleOf(path, blocks) {
  const imports = []
  const body = []
  for (const { line, code } of blocks) {
    let text = code
    for (const url of DOCUMENTED_URLS.redis) text = text.replaceAll(url, process.env.POLYLOCK_TEST_REDIS)
    for (const url of DOCUMENTED_URLS.zk) text = text.replaceAll(url, process.env.POLYLOCK_TEST_ZK)
    body.push(`// --- ${relative(root, path)}:${line}`)
    for (const l of text.split('\n')) (/^import\s/.test(l) ? imports : body).push(l)
  }
  return [...imports, ...body].join('\n') + '\n'
}

const files = [join(root, 'README.md'), join(pkg, 'README.md'), ...markdownUnder(join(root, 'docs'))].filter(
  (f) => examples(f).length > 0,
)

test('the documentation has js examples', () => {
  assert.ok(files.length > 0, 'no ```js example found: the extractor or the docs moved')
})

for (const path of files) {
  const name = relative(root, path)
  const skip = process.env.POLYLOCK_NODE_ENTRY
    ? 'the wasm run resolves polylock to polylock/wasm, which speaks Redis only; the native run covers the docs'
    : false
  test(`js examples of ${name} run`, { skip, timeout: 120_000 }, async () => {
    assert.ok(process.env.POLYLOCK_TEST_REDIS && process.env.POLYLOCK_TEST_ZK, 'POLYLOCK_TEST_REDIS/_ZK not set')
    mkdirSync(outDir, { recursive: true })
    const file = join(outDir, name.replaceAll('/', '__').replace(/\.md$/, '.mjs'))
    writeFileSync(file, moduleOf(path, examples(path)))
    const outcome = await new Promise((resolve) => {
      execFile(process.execPath, [file], { cwd: pkg, timeout: 110_000 }, (error, stdout, stderr) =>
        resolve({ error, stderr }),
      )
    })
    assert.equal(
      outcome.error,
      null,
      `a js example of ${name} failed (the '// --- file:line' comment above the failing line in ${relative(root, file)} says which block):\n${outcome.stderr}`,
    )
  })
}
