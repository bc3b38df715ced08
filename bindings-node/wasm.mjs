// ESM entry of polylock/wasm: the same module instance as the CommonJS one (one owner context).
import polylock from './wasm.js'

export const {
  connect,
  Client,
  Lock,
  Guard,
  Semaphore,
  Permits,
  Election,
  Leadership,
  LockError,
  LockTimeoutError,
  LockUnavailableError,
  LockLostError,
  NotHeldError,
  ConnectionError,
  ClientClosedError,
  UpgradeRefusedError,
  PermitsMismatchError,
} = polylock
export default polylock
