// polylock/wasm: the same API and types as polylock (Redis only; needs ioredis).
export * from './index'
