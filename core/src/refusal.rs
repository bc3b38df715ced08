//! Which server refusals are passing states of the server rather than
//! answers: protocol knowledge, so it lives here and not in a driver. The
//! driver hands over the server's own text ([`Reply::Refused`]); a claim
//! treats a transient refusal as "no answer yet" and retries with backoff
//! inside the caller's deadline, remembering the text so that a deadline
//! that passes meanwhile can name it ([`crate::Error::Unavailable`]).

use crate::io::{Reply, TransportError};
use crate::Backend;

/// Redis error codes (the first word of the error reply) that a server
/// gives while it cannot serve for a while, each without running the
/// command: a script or module call is blocking it (`BUSY`), it is loading
/// its dataset (`LOADING`), it was made a replica (`READONLY`), it is full
/// (`OOM`), it cannot persist (`MISCONF`), its primary or cluster is down
/// (`MASTERDOWN`, `CLUSTERDOWN`), a slot is migrating (`TRYAGAIN`), it
/// lacks the replicas `min-replicas-to-write` asks for (`NOREPLICAS`), or
/// the slot is served elsewhere (`MOVED`, `ASK`: the runtime's cluster
/// transport sends each request once and follows no redirect, so the core
/// sends it again, after a `MOVED` to the owner the refreshed slot map names).
const REDIS_TRANSIENT: &[&str] = &[
    "BUSY",
    "LOADING",
    "READONLY",
    "OOM",
    "MISCONF",
    "MASTERDOWN",
    "CLUSTERDOWN",
    "TRYAGAIN",
    "NOREPLICAS",
    "MOVED",
    "ASK",
];

/// ZooKeeper codes (the driver names `KeeperException.Code`s this way) of a
/// server that refuses for now: request throttling under load, and a
/// read-only server of a partitioned ensemble refusing a write.
const ZK_TRANSIENT: &[&str] = &["THROTTLEDOP", "NOTREADONLY"];

/// Whether `reply` is Redis's refusal of an `EVALSHA` whose script it does
/// not have: the script did not run, and runs if sent with its source.
pub(crate) fn is_noscript(reply: &Reply) -> bool {
    matches!(reply, Reply::Refused(text) if text.split([' ', ':']).next() == Some("NOSCRIPT"))
}

/// Is `text`, the server's refusal, a transient state of the server?
pub fn is_transient(backend: Backend, text: &str) -> bool {
    let code = text.split([' ', ':']).next().unwrap_or_default();
    match backend {
        Backend::Redis => REDIS_TRANSIENT.contains(&code),
        Backend::ZooKeeper => ZK_TRANSIENT.contains(&code),
    }
}

/// A claim's memory of whether the server's latest answer was a transient
/// refusal.
#[derive(Debug, Default, Clone)]
pub(crate) struct Refusals {
    latest: Option<String>,
}

impl Refusals {
    /// Passes `reply` through, except that a transient refusal becomes an
    /// unanswered request (the claim's retry path: the command did not run,
    /// and treating it as "may have run" is the safe superset) and is
    /// remembered; any other reply forgets the last refusal.
    pub(crate) fn filter(&mut self, backend: Backend, reply: Reply) -> Reply {
        match reply {
            Reply::Refused(text) if is_transient(backend, &text) => {
                let failed = Reply::Failed(TransportError { message: text.clone() });
                self.latest = Some(text);
                failed
            }
            other => {
                self.latest = None;
                other
            }
        }
    }

    /// The server's text if its latest answer was a transient refusal.
    pub(crate) fn latest(&self) -> Option<&str> {
        self.latest.as_deref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_by_the_error_code() {
        let redis = |t| is_transient(Backend::Redis, t);
        assert!(redis("BUSY Redis is busy running a script."));
        assert!(redis("READONLY You can't write against a read only replica. script: 1f0, on @user_script:5."));
        assert!(redis("LOADING Redis is loading the dataset in memory"));
        assert!(redis("OOM command not allowed when used memory > 'maxmemory'."));
        assert!(!redis("BUSYKEY Target key name already exists."));
        // A redirect: the command ran nowhere; the core sends it again.
        assert!(redis("MOVED 1 127.0.0.1:7781"));
        assert!(redis("ASK 1 127.0.0.1:7781"));
        assert!(!redis("WRONGTYPE Operation against a key holding the wrong kind of value"));
        assert!(!redis("ERR unknown command"));
        assert!(!redis("NOSCRIPT No matching script."));
        assert!(is_transient(Backend::ZooKeeper, "THROTTLEDOP: request was throttled"));
        assert!(!is_transient(Backend::ZooKeeper, "NOAUTH: not authorized"));
        assert!(!is_transient(Backend::ZooKeeper, "BUSY"));
    }
}
