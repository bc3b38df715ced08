//! Reading a ZooKeeper lock's status: list the contenders, read the first.

use super::paths::{sorted_contenders, READ_MARKER};
use crate::io::{Op, Reply, ZkOp};
use crate::status::{unexpected, LockStatus, StatusStep};
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
}

impl ZkStatusRead {
    pub(crate) fn start(parent: &str) -> (Self, Op) {
        let read = ZkStatusRead { parent: parent.to_owned(), listings: 1, reading: None };
        (read, Op::ZooKeeper(ZkOp::GetChildren { path: parent.to_owned() }))
    }

    pub(crate) fn on_reply(&mut self, reply: Reply) -> StatusStep {
        match (self.reading, reply) {
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
