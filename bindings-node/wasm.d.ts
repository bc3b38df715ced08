/**
 * polylock/wasm: the same API and types as `polylock`, running the lock core
 * compiled to WebAssembly over ioredis (a peer dependency). Redis only: a
 * `zk://` URL is refused; `rwLock`, `semaphore` and `election` throw a `RangeError`.
 */
export * from './index'
