//! JNI side of polylock for the JVM (`io.polylock.Native` in the Java sources).
//!
//! Java holds opaque `long` handles to boxed Rust values: a client, a lock,
//! a semaphore, a pending acquire. Every blocking call runs on one process-wide tokio
//! runtime; the Java side waits in short slices so that it can honour
//! `Thread.interrupt()`. Each export goes through [`errors::guarded`], which
//! catches panics and turns every failure into exactly one Java exception.

mod acquire;
mod campaign;
mod elections;
mod errors;
mod exports;
mod handles;
mod permits;
mod runtime;
mod upcalls;
