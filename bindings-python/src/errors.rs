//! polylock errors as Python exceptions. The classes live in
//! `polylock._errors` (pure Python, so they can have several bases such as
//! `LockError` + `ConnectionError`); this module instantiates them.

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;

const ERRORS_MODULE: &str = "polylock._errors";

/// An instance of `polylock._errors.<class>(*args)`, as a `PyErr`.
fn raise(class: &str, args: impl for<'py> FnOnce(Python<'py>) -> Vec<Bound<'py, PyAny>>) -> PyErr {
    Python::attach(|py| {
        let made = py
            .import(ERRORS_MODULE)
            .and_then(|m| m.getattr(class))
            .and_then(|cls| cls.call1(pyo3::types::PyTuple::new(py, args(py))?));
        match made {
            Ok(exc) => PyErr::from_value(exc),
            // The package is broken if its errors module is missing: say so.
            Err(e) => PyRuntimeError::new_err(format!("polylock: cannot raise {class}: {e}")),
        }
    })
}

fn text(py: Python<'_>, s: String) -> Bound<'_, PyAny> {
    s.into_pyobject(py).expect("a str").into_any()
}

pub(crate) fn lock_error(msg: String) -> PyErr {
    raise("LockError", |py| vec![text(py, msg)])
}

/// Maps each runtime error to the exception a Python user expects.
pub(crate) fn to_py(e: polylock::Error) -> PyErr {
    use polylock::Error as E;
    let msg = e.to_string();
    match e {
        E::InvalidUrl { .. } | E::InvalidName(_) | E::InvalidOption(_) => PyValueError::new_err(msg),
        E::Connect { addr, .. } => raise("LockConnectionError", |py| vec![text(py, msg), text(py, addr)]),
        E::Timeout(_) | E::WouldBlock(_) => raise("LockTimeout", |py| vec![text(py, msg)]),
        E::NotHeld(_) => raise("NotHeldError", |py| vec![text(py, msg)]),
        E::Lost { name, reason } => {
            raise("LockLostError", |py| vec![text(py, msg), text(py, name), text(py, reason.to_string())])
        }
        E::Closed => raise("ClientClosedError", |py| vec![text(py, msg)]),
        E::Unavailable { name, reply } => {
            raise("LockUnavailableError", |py| vec![text(py, msg), text(py, name), text(py, reply)])
        }
        _ => raise("LockError", |py| vec![text(py, msg)]),
    }
}

/// Seconds from Python as a Duration (`None` stays `None`: no limit).
pub(crate) fn seconds(what: &str, value: Option<f64>) -> PyResult<Option<std::time::Duration>> {
    value
        .map(|s| {
            std::time::Duration::try_from_secs_f64(s).map_err(|_| {
                PyValueError::new_err(format!("{what} must be a finite, non-negative number of seconds, got {s}"))
            })
        })
        .transpose()
}
