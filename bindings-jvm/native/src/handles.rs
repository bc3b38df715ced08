//! The Rust values behind Java's `long` handles.
//!
//! A handle is `Box::into_raw` of an `Arc<T>`; the Java object that owns it
//! frees it exactly once (`close()` or a `Cleaner`), and never uses it after.
//! Tasks that outlive the Java call keep their own `Arc` clone.

use std::sync::Arc;

use jni::sys::jlong;
use polylock::{Client, Lock, Semaphore};

use crate::errors::{Failure, Outcome};

pub(crate) struct ClientHandle {
    pub(crate) client: Client,
}

pub(crate) struct LockHandle {
    pub(crate) lock: Lock,
}

impl LockHandle {
    pub(crate) fn new(lock: Lock) -> Self {
        LockHandle { lock }
    }
}

/// A semaphore and the grants taken through it (shared by every Java
/// thread that uses the one `DistributedSemaphore`).
pub(crate) struct SemaphoreHandle {
    pub(crate) sem: Semaphore,
}

pub(crate) fn into_handle<T>(value: T) -> jlong {
    Box::into_raw(Box::new(Arc::new(value))) as jlong
}

/// Borrows the value behind a live handle.
pub(crate) fn get<T>(handle: jlong) -> Outcome<Arc<T>> {
    if handle == 0 {
        return Err(Failure::Illegal("use of a freed polylock handle".into()));
    }
    // SAFETY: the Java side passes only handles made by `into_handle::<T>`
    // and not yet given to `free` (it zeroes its copy when it frees).
    Ok(unsafe { (*(handle as *const Arc<T>)).clone() })
}

/// Frees a handle; later uses are the Java side's bug.
pub(crate) fn free<T>(handle: jlong) -> Option<Arc<T>> {
    if handle == 0 {
        return None;
    }
    // SAFETY: as for `get`; the Java side frees each handle once.
    Some(*unsafe { Box::from_raw(handle as *mut Arc<T>) })
}
