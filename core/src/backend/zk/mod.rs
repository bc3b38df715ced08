//! The ZooKeeper protocol: Curator `InterProcessMutex`'s node layout and
//! predecessor choice, and one claim's life as a state machine.
//!
//! - A contender creates `P/_c_<uuid>-lock-<seq>` EPHEMERAL_SEQUENTIAL
//!   (Curator's "protected" name: the uuid prefix lets us find our node if
//!   the create reply is lost), with CONTAINER parents made on demand.
//! - The create and a getChildren of `P` go out together: one session's
//!   requests are answered in order, so the list already holds our node and
//!   an uncontended acquire costs one round trip.
//! - Children sort by the text after the last `lock-` (Curator's rule), so
//!   Curator and polylock contenders on one path form one queue.
//! - Index 0 holds the lock; anyone else watches only its immediate
//!   predecessor (getData with a watch), so a release wakes one waiter.
//! - The waiter at index 1 also watches its own node (sent with the
//!   predecessor's watch). When the predecessor is deleted it holds the
//!   lock without listing again: sequence numbers only grow, so nobody can
//!   sort between them, and its own node is known to be there (a deletion
//!   of it comes first, in order, and sends it back to listing).
//! - While held, our own node is watched (the watch goes out with the
//!   grant, or earlier for the waiter next in line, above), so a holder
//!   whose node someone else deletes is told at once.
//! - Fencing token: the czxid of our node, which grows across the ensemble
//!   and survives the parent's deletion (the sequence number does not).
//!
//! A counting semaphore is Curator's `InterProcessSemaphoreV2`: the mutex
//! above at `P/locks`, whose holder creates its leases under `P/leases`
//! and waits until they number at most the permits (`permits`).
//!
//! The pieces: [`paths`] (node names and their order), `claim` (one
//! claim's life), `permits` (a semaphore claim), [`status`] (reading a lock's state).

mod claim;
pub mod paths;
mod permits;
pub mod status;
mod watchdog;

pub(crate) use claim::{ZkClaim, ZkRole};
pub use paths::{
    is_writer, lock_path, node_prefix, node_prefix_with, sort_key, sorted_contenders, LEASE_MARKER, LOCK_MARKER,
    READ_MARKER, SEMAPHORE_LEASES, SEMAPHORE_LOCKS, SEMAPHORE_PERMITS, WRITE_MARKER,
};
pub(crate) use permits::ZkPermitsClaim;
