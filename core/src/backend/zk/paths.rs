//! Where a ZooKeeper lock lives and how its contenders sort (Curator's rules).

use crate::LockName;

/// The lock's parent node; contenders are its children. The name itself
/// if it starts with `/`, else `/` + name.
pub fn lock_path(name: &LockName) -> String {
    crate::name::zk_path_of(name.as_str())
}

/// Curator's lock node marker (`InterProcessMutex`).
pub const LOCK_MARKER: &str = "lock-";
/// Curator's `LeaderLatch` participant marker (`_c_<uuid>-latch-<seq>`):
/// the first in sequence order leads, as with the mutex; Curator sorts a
/// latch's children by the text after it.
pub const LATCH_MARKER: &str = "latch-";
/// Curator's `InterProcessReadWriteLock` markers: a reader's and a writer's
/// node. Of equal length on purpose, so the sequences line up.
pub const READ_MARKER: &str = "__READ__";
/// Curator's writer node marker (see [`READ_MARKER`]).
pub const WRITE_MARKER: &str = "__WRIT__";

/// Curator's `InterProcessSemaphoreV2` layout under the semaphore's path:
/// the internal mutex's parent, the leases' parent and the lease marker
/// (`leases/_c_<uuid>-lease-<seq>`). Curator's constants, so its clients
/// and ours count the same leases and queue on the same mutex.
pub const SEMAPHORE_LOCKS: &str = "locks";
/// The parent of a semaphore's lease nodes (see [`SEMAPHORE_LOCKS`]).
pub const SEMAPHORE_LEASES: &str = "leases";
/// The marker of a lease node's name (see [`SEMAPHORE_LOCKS`]).
pub const LEASE_MARKER: &str = "lease-";
/// polylock's record of a semaphore's number of permits (decimal text), a
/// persistent child of its path. Curator keeps none (maxLeases is each
/// client's own) and never looks at this node, so it costs compatibility nothing.
pub const SEMAPHORE_PERMITS: &str = "polylock_permits";

/// The text a child sorts by: after the last marker, or the whole name.
/// Curator's mutex strips `lock-`; its read-write lock strips `__READ__`,
/// then `__WRIT__`, so readers and writers of one lock sort by sequence.
pub fn sort_key(child: &str) -> &str {
    let mut key = child;
    for marker in [LOCK_MARKER, READ_MARKER, WRITE_MARKER, LATCH_MARKER] {
        if let Some(i) = key.rfind(marker) {
            key = &key[i + marker.len()..];
        }
    }
    key
}

/// Is this child a writer's node of a read-write lock?
pub fn is_writer(child: &str) -> bool {
    child.contains(WRITE_MARKER)
}

/// Children in lock order (a stable sort, as Java's `Collections.sort`).
pub fn sorted_contenders(mut children: Vec<String>) -> Vec<String> {
    children.sort_by(|a, b| sort_key(a).cmp(sort_key(b)));
    children
}

/// The prefix of our node's name for a given protection uuid (a mutex's).
pub fn node_prefix(uuid: &str) -> String {
    node_prefix_with(uuid, LOCK_MARKER)
}

/// The prefix of our node's name for a protection uuid and a marker.
pub fn node_prefix_with(uuid: &str, marker: &str) -> String {
    format!("_c_{uuid}-{marker}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sorts_like_curator() {
        let kids = vec![
            "_c_b-lock-0000000003".to_owned(),
            "_c_a-lock-0000000010".to_owned(),
            "_c_c-lock-0000000001".to_owned(),
        ];
        let sorted = sorted_contenders(kids);
        assert_eq!(sorted[0], "_c_c-lock-0000000001");
        assert_eq!(sorted[2], "_c_a-lock-0000000010");
        assert_eq!(sort_key("no-marker"), "no-marker");
        assert_eq!(sort_key("x-lock-lock-0001"), "0001");
    }

    /// Curator's read-write lock: readers and writers sort by sequence
    /// together, whatever their uuids.
    #[test]
    fn readers_and_writers_sort_by_sequence() {
        let kids = vec![
            "_c_a-__READ__0000000004".to_owned(),
            "_c_b-__WRIT__0000000002".to_owned(),
            "_c_c-__READ__0000000003".to_owned(),
        ];
        let sorted = sorted_contenders(kids);
        assert_eq!(sorted[0], "_c_b-__WRIT__0000000002");
        assert_eq!(sorted[2], "_c_a-__READ__0000000004");
        assert!(is_writer(&sorted[0]) && !is_writer(&sorted[1]));
    }

    #[test]
    fn a_name_without_a_slash_is_under_the_root() {
        assert_eq!(lock_path(&LockName::new("orders/42").unwrap()), "/orders/42");
        assert_eq!(lock_path(&LockName::new("/locks/orders-42").unwrap()), "/locks/orders-42");
    }
}
