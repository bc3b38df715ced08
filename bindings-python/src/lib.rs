//! `polylock._native`: the Python binding's native half. It maps the
//! polylock runtime onto Python's conventions (blocking calls that release
//! the GIL and answer Ctrl-C, asyncio futures, exceptions, fork safety).
//! The `polylock` Python package wraps it; owner ids (thread or asyncio
//! task) are chosen there and passed in explicitly.

mod client;
mod errors;
mod lock;
mod process;
mod runtime;

use pyo3::prelude::*;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(client::connect, m)?)?;
    m.add_class::<client::Client>()?;
    m.add_class::<lock::Lock>()?;
    m.add_class::<lock::AsyncOp>()?;
    Ok(())
}
