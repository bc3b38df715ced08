//! Reading a ZooKeeper lock's status: list the contenders, read the first.
//! A semaphore's path (Curator's `InterProcessSemaphoreV2`, with our record
//! of N) is read as one: the record, the leases, the mutex's contenders.

use super::paths::{sorted_contenders, READ_MARKER, SEMAPHORE_LEASES, SEMAPHORE_LOCKS, SEMAPHORE_PERMITS};
use crate::io::{Op, Reply, ZkOp};
use crate::status::{unexpected, LockStatus, PermitCounts, StatusStep};
use crate::Error;

/// How often the first contender may vanish between the listing and the
/// read before the read gives up (contenders come and go).
const MAX_LISTINGS: u32 = 10;

/// A status read of one ZooKeeper lock.
#[derive(Debug)]
pub(crate) struct ZkStatusRead {
    parent: String,
    listings: u32,
    /// After a listing: the contenders after the holders, and how many
    /// readers hold (read-write locks).
    reading: Option<(usize, u32)>,
    /// A semaphore's path: which of its reads is out.
    semaphore: Option<SemaphoreStep>,
}

/// The reads of a semaphore's status, in order.
#[derive(Debug, Clone, Copy)]
enum SemaphoreStep {
    /// `P/polylock_permits`: the number of permits.
    Total,
    /// The children of `P/leases`: the permits held (the one waiter that
    /// holds Curator's mutex has its leases there too: counted as held).
    Leases { total: u32 },
    /// The children of `P/locks`: the waiters.
    Locks { total: u32, held: u32 },
}

impl ZkStatusRead {
    pub(crate) fn start(parent: &str) -> (Self, Op) {
        let read = ZkStatusRead { parent: parent.to_owned(), listings: 1, reading: None, semaphore: None };
        (read, Op::ZooKeeper(ZkOp::GetChildren { path: parent.to_owned() }))
    }

    pub(crate) fn on_reply(&mut self, reply: Reply) -> StatusStep {
        if let Some(step) = self.semaphore {
            return self.semaphore_reply(step, reply);
        }
        match (self.reading, reply) {
            (None, Reply::Children(children)) if children.iter().any(|c| c == SEMAPHORE_PERMITS) => {
                self.semaphore = Some(SemaphoreStep::Total);
                let path = format!("{}/{}", self.parent, SEMAPHORE_PERMITS);
                StatusStep::Send(Op::ZooKeeper(ZkOp::GetData { path }))
            }
            (None, Reply::Children(children)) => self.read_first(children),
            (None, Reply::NoNode) => self.read_first(Vec::new()),
            (Some((waiters, readers)), Reply::Data { data, czxid }) => StatusStep::Done(Ok(LockStatus {
                held: true,
                holder: Some(String::from_utf8_lossy(&data).into_owned()),
                fencing_token: u64::try_from(czxid).ok(),
                waiters: Some(waiters),
                ttl_ms: None,
                readers,
                permits: None,
            })),
            (Some(_), Reply::NoNode) if self.listings < MAX_LISTINGS => {
                // The holder left between the listing and the read: list again.
                self.listings += 1;
                self.reading = None;
                StatusStep::Send(Op::ZooKeeper(ZkOp::GetChildren { path: self.parent.clone() }))
            }
            (Some(_), Reply::NoNode) => StatusStep::Done(Err(Error::Protocol(format!(
                "{}: contenders changed too fast to read a status",
                self.parent
            )))),
            (_, other) => StatusStep::Done(Err(unexpected(other))),
        }
    }

    fn semaphore_reply(&mut self, step: SemaphoreStep, reply: Reply) -> StatusStep {
        let list = |child: &str| {
            StatusStep::Send(Op::ZooKeeper(ZkOp::GetChildren { path: format!("{}/{child}", self.parent) }))
        };
        let count = |reply: Reply| match reply {
            Reply::Children(c) => Ok(u32::try_from(c.len()).unwrap_or(u32::MAX)),
            Reply::NoNode => Ok(0),
            other => Err(unexpected(other)),
        };
        let next = match (step, reply) {
            (SemaphoreStep::Total, Reply::Data { data, .. }) => {
                match String::from_utf8_lossy(&data).trim().parse::<u32>() {
                    Ok(total) => Ok((SemaphoreStep::Leases { total }, list(SEMAPHORE_LEASES))),
                    Err(_) => Err(Error::Protocol(format!("{}: a permits record that is not a number", self.parent))),
                }
            }
            (SemaphoreStep::Total, other) => Err(unexpected(other)),
            (SemaphoreStep::Leases { total }, reply) => {
                count(reply).map(|held| (SemaphoreStep::Locks { total, held }, list(SEMAPHORE_LOCKS)))
            }
            (SemaphoreStep::Locks { total, held }, reply) => {
                return StatusStep::Done(count(reply).map(|waiters| LockStatus {
                    held: held > 0,
                    holder: None,
                    fencing_token: None,
                    waiters: Some(waiters as usize),
                    ttl_ms: None,
                    readers: 0,
                    permits: Some(PermitCounts { held, total }),
                }));
            }
        };
        match next {
            Ok((step, send)) => {
                self.semaphore = Some(step);
                send
            }
            Err(e) => StatusStep::Done(Err(e)),
        }
    }

    fn read_first(&mut self, children: Vec<String>) -> StatusStep {
        let sorted = sorted_contenders(children);
        let Some(first) = sorted.first() else {
            let free = LockStatus {
                held: false,
                holder: None,
                fencing_token: None,
                waiters: Some(0),
                ttl_ms: None,
                readers: 0,
                permits: None,
            };
            return StatusStep::Done(Ok(free));
        };
        // Curator's read-write lock: every reader before the first writer holds.
        let readers = sorted.iter().take_while(|c| c.contains(READ_MARKER)).count();
        let holders = readers.max(1);
        self.reading = Some((sorted.len() - holders, readers as u32));
        StatusStep::Send(Op::ZooKeeper(ZkOp::GetData { path: format!("{}/{first}", self.parent) }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn done(step: StatusStep) -> Result<LockStatus, Error> {
        match step {
            StatusStep::Done(r) => r,
            other => panic!("expected an answer, got {other:?}"),
        }
    }

    /// A semaphore's path: the record of N, the leases, the mutex's contenders.
    #[test]
    fn a_semaphore_path_shows_its_permits() {
        let (mut read, _) = ZkStatusRead::start("/s");
        let kids = vec!["leases".to_owned(), "locks".to_owned(), "polylock_permits".to_owned()];
        let path_of = |step: StatusStep| match step {
            StatusStep::Send(Op::ZooKeeper(ZkOp::GetData { path } | ZkOp::GetChildren { path })) => path,
            other => panic!("{other:?}"),
        };
        assert_eq!(path_of(read.on_reply(Reply::Children(kids))), "/s/polylock_permits");
        assert_eq!(path_of(read.on_reply(Reply::Data { data: b"4".to_vec(), czxid: 1 })), "/s/leases");
        let leases = vec!["_c_a-lease-0000000001".to_owned(), "_c_b-lease-0000000002".to_owned()];
        assert_eq!(path_of(read.on_reply(Reply::Children(leases))), "/s/locks");
        let st = done(read.on_reply(Reply::NoNode)).unwrap();
        assert_eq!(st.permits, Some(PermitCounts { held: 2, total: 4 }));
        assert_eq!((st.held, st.waiters), (true, Some(0)));
    }

    #[test]
    fn the_first_contender_in_curators_order_holds() {
        let (mut read, op) = ZkStatusRead::start("/l");
        assert_eq!(op, Op::ZooKeeper(ZkOp::GetChildren { path: "/l".into() }));
        let kids = vec!["_c_b-lock-0000000003".to_owned(), "_c_a-lock-0000000001".to_owned()];
        match read.on_reply(Reply::Children(kids)) {
            StatusStep::Send(Op::ZooKeeper(ZkOp::GetData { path })) => assert_eq!(path, "/l/_c_a-lock-0000000001"),
            other => panic!("{other:?}"),
        }
        let st = done(read.on_reply(Reply::Data { data: b"c:7".to_vec(), czxid: 99 })).unwrap();
        assert_eq!((st.holder.as_deref(), st.fencing_token, st.waiters), (Some("c:7"), Some(99), Some(1)));
    }

    /// A read-write lock's holders are every reader before the first writer.
    #[test]
    fn leading_readers_all_hold() {
        let (mut read, _) = ZkStatusRead::start("/l");
        let kids = vec![
            "_c_c-__WRIT__0000000005".to_owned(),
            "_c_a-__READ__0000000001".to_owned(),
            "_c_b-__READ__0000000002".to_owned(),
            "_c_d-__READ__0000000006".to_owned(),
        ];
        let _ = read.on_reply(Reply::Children(kids));
        let st = done(read.on_reply(Reply::Data { data: b"c:1".to_vec(), czxid: 9 })).unwrap();
        assert_eq!((st.readers, st.waiters), (2, Some(2)));
    }

    #[test]
    fn a_holder_leaving_during_the_read_is_listed_again_then_free() {
        let (mut read, _) = ZkStatusRead::start("/l");
        let _ = read.on_reply(Reply::Children(vec!["x-lock-0000000001".into()]));
        assert!(matches!(read.on_reply(Reply::NoNode), StatusStep::Send(Op::ZooKeeper(ZkOp::GetChildren { .. }))));
        let st = done(read.on_reply(Reply::NoNode)).unwrap();
        assert!(!st.held);
    }

    #[test]
    fn a_lost_connection_is_no_answer() {
        let (mut read, _) = ZkStatusRead::start("/l");
        let failed = Reply::Failed(crate::TransportError { message: "connection lost".into() });
        assert_eq!(done(read.on_reply(failed)), Err(Error::NoAnswer("connection lost".into())));
    }
}
