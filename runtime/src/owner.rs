//! Who is asking: the default owner of an acquire is the current tokio task,
//! or the current thread outside a task, so reentrancy follows Rust's unit of
//! concurrency. Bindings pass their own (a Python thread or asyncio task, a
//! Java thread, a Node async context).

use std::hash::{Hash, Hasher};

use polylock_core::OwnerId;

/// The owner id of the calling task (or thread).
pub fn current_owner() -> OwnerId {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    match tokio::task::try_id() {
        Some(id) => {
            1u8.hash(&mut h);
            id.hash(&mut h);
        }
        None => {
            2u8.hash(&mut h);
            std::thread::current().id().hash(&mut h);
        }
    }
    OwnerId(h.finish())
}
