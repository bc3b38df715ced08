//! Withdrawing a waiting acquire and knowing when it is gone from the server.
//!
//! Dropping an acquire's future cancels it (cancel-safe), but the server
//! side of that cancel (a Redis queue entry's LEAVE, a ZooKeeper node's
//! delete) finishes in the background, after the drop returned. A caller
//! that promises more, Java's `lockInterruptibly()` throwing only once the
//! acquire is off the server as Curator's and Redisson's do, runs the
//! acquire inside [`Withdrawal::scope`] and calls [`Withdrawal::withdraw`]:
//! the acquire then ends with [`crate::Error::Cancelled`] once the core
//! reports its claim gone (`LockMachine::withdraw`; after a bounded wait if
//! the server does not answer), or with the grant that came first.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::Notify;

tokio::task_local! {
    static CURRENT: Withdrawal;
}

/// A request to withdraw the acquires waiting inside its
/// [`scope`](Self::scope). Cheap to clone; clones are one request.
#[derive(Clone, Default)]
pub struct Withdrawal(Arc<Requested>);

#[derive(Default)]
struct Requested {
    yes: AtomicBool,
    notify: Notify,
    /// Acquires of the scope waiting for their outcome now.
    waiting: AtomicUsize,
}

impl std::fmt::Debug for Withdrawal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Withdrawal").field("requested", &self.is_requested()).finish()
    }
}

impl Withdrawal {
    /// A withdrawal not yet requested.
    pub fn new() -> Self {
        Self::default()
    }

    /// Runs `fut` with this withdrawal: each acquire in it that is still
    /// waiting when [`Self::withdraw`] is called (or that starts after)
    /// withdraws, and ends once the server holds nothing of it.
    pub async fn scope<F: Future>(&self, fut: F) -> F::Output {
        CURRENT.scope(self.clone(), fut).await
    }

    /// Asks the scope's waiting acquires to withdraw. Idempotent.
    pub fn withdraw(&self) {
        self.0.yes.store(true, Ordering::Release);
        self.0.notify.notify_waiters();
    }

    /// Whether [`Self::withdraw`] was called.
    pub fn is_requested(&self) -> bool {
        self.0.yes.load(Ordering::Acquire)
    }

    /// Whether an acquire of the scope waits for its outcome now: after
    /// [`Self::withdraw`], its withdrawal's report is worth waiting for.
    pub fn has_waiting(&self) -> bool {
        self.0.waiting.load(Ordering::Acquire) > 0
    }

    /// Counts an acquire of the scope as waiting until the returned value drops.
    pub(crate) fn waiting(&self) -> Waiting {
        self.0.waiting.fetch_add(1, Ordering::AcqRel);
        Waiting(self.clone())
    }

    /// The scope's withdrawal, if the calling task runs inside one.
    pub(crate) fn current() -> Option<Withdrawal> {
        CURRENT.try_with(Withdrawal::clone).ok()
    }

    /// Ends once [`Self::withdraw`] was called.
    pub(crate) async fn requested(&self) {
        let notified = self.0.notify.notified();
        tokio::pin!(notified);
        // Registered before the flag is read: a withdraw in between wakes it.
        notified.as_mut().enable();
        if !self.is_requested() {
            notified.await;
        }
    }
}

/// An acquire of a [`Withdrawal`]'s scope waiting for its outcome.
pub(crate) struct Waiting(Withdrawal);

impl Drop for Waiting {
    fn drop(&mut self) {
        self.0 .0.waiting.fetch_sub(1, Ordering::AcqRel);
    }
}
