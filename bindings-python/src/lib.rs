//! `polylock._native`: the Python binding's native half. It maps the
//! polylock runtime onto Python's conventions (blocking calls that release
//! the GIL and answer Ctrl-C, asyncio futures, exceptions, fork safety).
//! The `polylock` Python package wraps it; owner ids (thread or asyncio
//! task) are chosen there, taken from [`fresh_owner_id`], and passed in explicitly.

mod client;
mod election;
mod errors;
mod exit_gate;
mod lock;
mod loss;
mod process;
mod runtime;
mod semaphore;

use pyo3::prelude::*;

/// A new owner id from the runtime's one process-wide allocator: never 0,
/// never reused (a finished thread's id may still hold a lock), and never
/// one another binding in this process was given.
#[pyfunction]
fn fresh_owner_id() -> u64 {
    polylock::OwnerId::fresh().0
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(client::connect, m)?)?;
    m.add_function(wrap_pyfunction!(exit_gate::close_for_exit, m)?)?;
    m.add_function(wrap_pyfunction!(fresh_owner_id, m)?)?;
    m.add_class::<client::Client>()?;
    m.add_class::<lock::Lock>()?;
    m.add_class::<lock::AsyncOp>()?;
    m.add_class::<loss::Loss>()?;
    m.add_class::<semaphore::Semaphore>()?;
    m.add_class::<semaphore::SemOp>()?;
    m.add_class::<semaphore::Permits>()?;
    m.add_class::<election::Election>()?;
    m.add_class::<election::CampaignOp>()?;
    m.add_class::<election::Leadership>()?;
    Ok(())
}
