//! One module per backend protocol. Each holds everything that backend
//! decides: its claim (a state machine behind [`crate::claim::Claim`]), where
//! a lock lives on the server (keys or paths), its scripts, and how a lock's
//! status is read and decoded. A third backend is one more module here, one
//! more [`crate::Backend`] variant and its arm in `LockMachine`'s claim
//! factory; nothing else in core changes.

pub mod redis;
pub mod zk;
