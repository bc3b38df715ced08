//! One test binary for the runtime's integration tests that use the shared
//! servers politely: each touches only its own lock names, or servers it
//! starts itself. One binary links the runtime's generic code once, where a
//! binary per file linked it ten times over (most of the test build's time).
//!
//! The tests that disturb a shared server or count its work server-wide
//! stay binaries of their own, so that nothing runs beside them but their
//! own file's tests: `cluster.rs` and `sentinel.rs` (kill and fail over
//! nodes), `faults.rs` (restarts a Redis), `transient.rs` (makes a Redis
//! busy, flushes it), `server_work.rs` and `redisson_wake.rs` (count the
//! server's commands). Runtime/Cargo.toml names them all (`autotests = false`).

mod support;

mod conformance;
mod elections;
mod error_fields;
mod holds;
mod lifecycle;
mod locks;
mod redis_keys;
mod rw_locks;
mod semaphores;
mod stop_work;
mod tls;
mod zk_watches;
