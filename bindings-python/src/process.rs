//! Fork safety for native objects. After `os.fork()` only the forking
//! thread survives in the child: the parent's tokio workers, connections
//! and timers are gone, so touching a parent's client would hang. Every
//! native object remembers the pid that made it, refuses to work in another
//! process, and is leaked rather than dropped there (its destructor would
//! talk to a runtime that no longer runs).

use std::mem::ManuallyDrop;

use pyo3::PyResult;

use crate::errors::lock_error;

pub(crate) struct ProcessBound<T> {
    pid: u32,
    value: ManuallyDrop<T>,
}

impl<T> ProcessBound<T> {
    pub(crate) fn new(value: T) -> Self {
        ProcessBound { pid: std::process::id(), value: ManuallyDrop::new(value) }
    }

    /// The value, or a clear `LockError` in a forked child.
    pub(crate) fn get(&self) -> PyResult<&T> {
        if self.pid == std::process::id() {
            Ok(&self.value)
        } else {
            Err(lock_error(format!(
                "this polylock object was created in another process (pid {}); connect again in this process",
                self.pid
            )))
        }
    }
}

impl<T> Drop for ProcessBound<T> {
    fn drop(&mut self) {
        if self.pid == std::process::id() {
            // SAFETY: dropped exactly once, here, and never used afterwards.
            unsafe { ManuallyDrop::drop(&mut self.value) }
        }
    }
}
