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
//! - While held, our own node is watched (the watch goes out with the
//!   grant, not before it), so a holder whose node someone else deletes is
//!   told at once.
//! - Fencing token: the czxid of our node, which grows across the ensemble
//!   and survives the parent's deletion (the sequence number does not).
//!
//! The pieces: [`paths`] (node names and their order), `claim` (one
//! claim's life), [`status`] (reading a lock's state).

mod claim;
pub mod paths;
pub mod status;

pub(crate) use claim::ZkClaim;
pub use paths::{lock_path, node_prefix, sort_key, sorted_contenders, LOCK_MARKER};
