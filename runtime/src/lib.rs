//! # polylock
//!
//! Distributed locks on Redis and ZooKeeper for tokio, with fencing tokens,
//! reentrancy per task, loss notification and no herd effect. The lock
//! logic lives in [`polylock_core`]; this crate runs it over real servers.
//!
//! ```no_run
//! # async fn demo() -> polylock::Result<()> {
//! let client = polylock::Client::connect("redis://127.0.0.1:6379").await?; // or "zk://127.0.0.1:2181"
//! let lock = client.lock("orders/42")?;
//! let guard = lock.acquire().await?;
//! let token = guard.fencing_token(); // hand it to the resource you protect
//! // Err(Lost) if the lock is lost first: the work is dropped at its next .await.
//! guard.while_held(async { /* the critical section */ }).await?;
//! guard.release().await?;
//! # let _ = token; Ok(()) }
//! ```

#![warn(missing_docs)]

mod backend;
#[doc(hidden)]
pub mod blocking;
mod client;
mod clock;
#[cfg(doctest)]
mod doc_examples;
mod election;
mod error;
mod executor;
#[cfg(feature = "test-hooks")]
#[doc(hidden)]
pub mod fault;
mod lock;
mod options;
mod owner;
mod semaphore;
mod timer;
#[doc(hidden)]
pub mod trace;
mod url;
mod withdrawal;

pub use client::{Client, ClientOptions, LockOptions, Status};
pub use election::{Election, Leader, Leadership};
pub use error::{Error, ErrorKind, Result};
pub use lock::{Guard, HoldInfo, Lock, LossWatch, RwLock};
pub use owner::current_owner;
pub use polylock_core::{Backend, LockMode, LossReason, OwnerId};
pub use semaphore::{Permits, Semaphore};
pub use withdrawal::Withdrawal;

/// What a binding's test hook (`debug_faults`, `debug_expire_session`)
/// answers in a build without the `test-hooks` feature, as release
/// packages are: a typed error in the caller's language, not a crash.
#[doc(hidden)]
pub fn test_hooks_missing(hook: &str) -> Error {
    Error::InvalidOption(format!(
        "{hook} is a test hook: this build of polylock has none (built without the test-hooks feature)"
    ))
}
