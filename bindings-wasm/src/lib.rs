//! # polylock-wasm
//!
//! The core's [`polylock_core::LockTable`] compiled to
//! `wasm32-unknown-unknown`, for JavaScript runtimes that cannot load a
//! native addon. The JavaScript side (`bindings-node/wasm-native.js`) only
//! executes: it sends each command on its Redis connections, feeds back each
//! reply, pub/sub message and connection change, keeps the one timer, and
//! supplies the time and the 128-bit nonces. Every lock decision is the
//! table's, and every call follows the drive contract ([`driver::Driver`]
//! drains `poll_output` after each input and hands the outputs back).
//!
//! ## The ABI: plain functions over linear memory, JSON in and out
//!
//! No wasm-bindgen: no CLI to install and keep in version lockstep with the
//! crate, and the module loads wherever `WebAssembly.instantiate` exists
//! (Node, workerd, browsers) with no import object at all.
//!
//! - `input(len) -> ptr`: room for a request of `len` bytes; JS writes the
//!   UTF-8 JSON there.
//! - `table_new(len) -> handle`: a table from the config in the input
//!   (`{"leaseMs":..,"clientId":"<32 hex digits>"}`); 0 if it is refused
//!   (the error is in the output).
//! - `table_call(handle, len) -> out_len`: one call on a table, the
//!   request in the input (`{"op":"acquire",...}`, see [`wire`]).
//! - `output() -> ptr`, `output_len() -> len`: where the last answer is.
//! - `table_free(handle)`, `next_owner_id() -> f64`.
//!
//! One module instance is single-threaded, so the buffers and the table
//! slots live in thread-locals; no `unsafe` is needed: JS reads and writes
//! the buffers through the memory export.

#![deny(unsafe_code)]

// `#[no_mangle]` counts as unsafe code: the exports, and only they, are allowed it.
#[allow(unsafe_code)]
mod abi;
pub mod driver;
pub mod wire;

// The runtime's error type and URL parser, compiled here as they are: one
// definition of every error kind and message and of the accepted URLs, so
// `polylock/wasm` fails with the same classes, codes and texts as the
// native package. (The runtime crate itself needs tokio, which has no
// wasm32-unknown-unknown build.) Not every variant is made on this side.
#[allow(dead_code)]
#[path = "../../runtime/src/error.rs"]
mod error;
#[allow(dead_code)]
#[path = "../../runtime/src/url.rs"]
mod url;
