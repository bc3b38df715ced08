//! polylock errors as Python exceptions. The classes live in
//! `polylock._errors` (pure Python, so they can have several bases such as
//! `LockError` + `ConnectionError`); this module instantiates them.

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyNone;

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

fn text(py: Python<'_>, s: impl Into<String>) -> Bound<'_, PyAny> {
    s.into().into_pyobject(py).expect("a str").into_any()
}

pub(crate) fn lock_error(msg: String) -> PyErr {
    raise("LockError", |py| vec![text(py, msg)])
}

pub(crate) fn not_held(msg: String) -> PyErr {
    raise("NotHeldError", |py| vec![text(py, msg)])
}

/// A structured field as a constructor argument: its text, or None.
fn field<'py>(py: Python<'py>, v: Option<&str>) -> Bound<'py, PyAny> {
    v.map_or_else(|| PyNone::get(py).to_owned().into_any(), |v| text(py, v))
}

fn number(py: Python<'_>, n: u32) -> Bound<'_, PyAny> {
    n.into_pyobject(py).expect("an int").into_any()
}

/// Maps a runtime `Result` onto pyo3's, once per call site.
pub(crate) trait PythonErrorExt<T> {
    fn py_err(self) -> PyResult<T>;
}

impl<T> PythonErrorExt<T> for polylock::Result<T> {
    fn py_err(self) -> PyResult<T> {
        self.map_err(to_py)
    }
}

/// The binding's one error table: each runtime error kind to the exception
/// a Python user expects, its fields passed as constructor arguments.
pub(crate) fn to_py(e: polylock::Error) -> PyErr {
    use polylock::ErrorKind as K;
    let msg = e.to_string();
    match e.kind() {
        K::InvalidUrl | K::InvalidName | K::InvalidOption => PyValueError::new_err(msg),
        K::Connect => raise("LockConnectionError", |py| vec![text(py, msg), field(py, e.address())]),
        K::Timeout | K::WouldBlock => raise("LockTimeout", |py| vec![text(py, msg)]),
        K::NotHeld => raise("NotHeldError", |py| vec![text(py, msg)]),
        K::Lost => {
            raise("LockLostError", |py| vec![text(py, msg), field(py, e.lock_name()), field(py, e.reason().as_deref())])
        }
        K::UpgradeRefused => raise("UpgradeRefused", |py| vec![text(py, msg), field(py, e.lock_name())]),
        K::PermitsMismatch => {
            let (server, ours) = e.permits().unwrap_or_default();
            raise("PermitsMismatch", |py| {
                vec![text(py, msg), field(py, e.lock_name()), number(py, server), number(py, ours)]
            })
        }
        K::Closed => raise("ClientClosedError", |py| vec![text(py, msg)]),
        K::Unavailable => {
            raise("LockUnavailableError", |py| vec![text(py, msg), field(py, e.lock_name()), field(py, e.reply())])
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
