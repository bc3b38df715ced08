//! Interpreter exit: the runtime's threads stop entering Python before the
//! interpreter finalizes.
//!
//! The runtime thread delivers outcomes into Python (an asyncio future's
//! result, a loss callback). Should it take the GIL while the interpreter
//! finalizes, CPython aborts the process (`PyGILState_Release: thread state
//! must be current when releasing`). So every entry from a runtime thread
//! goes through [`attach`], and an `atexit` hook ([`close_for_exit`],
//! registered by the package at import) shuts the gate: atexit hooks run
//! before finalization begins, while threads may still take the GIL, and
//! the hook waits for entries already inside to finish. After it, an
//! outcome that cannot be delivered is dropped the way an undeliverable
//! one always is (a grant nobody will release is given back).

use std::sync::{Condvar, Mutex};
use std::time::Duration;

use pyo3::prelude::*;

/// How long the exit hook waits for callbacks already running (a user's
/// loss callback may take its time) before letting the exit go on.
const EXIT_WAIT: Duration = Duration::from_secs(5);

struct Gate {
    closed: bool,
    /// Runtime-thread entries into Python now running.
    inside: usize,
}

static GATE: Mutex<Gate> = Mutex::new(Gate { closed: false, inside: 0 });
static LEFT: Condvar = Condvar::new();

/// Runs `f` with the GIL from a thread Python does not own, unless the
/// interpreter is exiting (the gate is shut) or gone: then `None`.
pub(crate) fn attach<R>(f: impl for<'py> FnOnce(Python<'py>) -> R) -> Option<R> {
    {
        let mut gate = GATE.lock().unwrap_or_else(|p| p.into_inner());
        if gate.closed {
            return None;
        }
        gate.inside += 1;
    }
    let out = Python::try_attach(f);
    let mut gate = GATE.lock().unwrap_or_else(|p| p.into_inner());
    gate.inside -= 1;
    LEFT.notify_all();
    out
}

/// The package's `atexit` hook: shuts the gate, then waits (without the
/// GIL, which the entries inside need) until none is inside.
#[pyfunction]
pub(crate) fn close_for_exit(py: Python<'_>) {
    py.detach(|| {
        let mut gate = GATE.lock().unwrap_or_else(|p| p.into_inner());
        gate.closed = true;
        let _ = LEFT.wait_timeout_while(gate, EXIT_WAIT, |g| g.inside > 0);
    });
}
