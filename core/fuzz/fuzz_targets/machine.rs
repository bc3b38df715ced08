#![no_main]
//! Arbitrary input sequences against a lock machine: it must never panic.
//! Run: `cargo +nightly fuzz run machine` in core/.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| polylock_core::fuzzing::run(data));
