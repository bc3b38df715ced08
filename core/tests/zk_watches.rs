//! ZooKeeper watches, step by step on one machine: a holder watches its own
//! node, and a claim that stops watching its predecessor says so.

use std::time::Duration;

use polylock_core::ZkOp;
use polylock_core::{
    AcquireOptions, Backend, Command, ConnectionEvent, Event, FencingToken, Instant, LockConfig, LockMachine, LockName,
    LossReason, Nonce, Notification, Op, OwnerId, Reply, RequestId,
};

const OWNER: OwnerId = OwnerId(1);
const T0: Instant = Instant::from_millis(1_000);

fn machine() -> LockMachine {
    LockMachine::new(LockConfig::new(Backend::ZooKeeper), LockName::new("/x").unwrap(), Nonce(1)).unwrap()
}

fn commands(m: &mut LockMachine) -> Vec<Command> {
    std::iter::from_fn(|| m.poll_command()).collect()
}

/// Acquires with `opts`; our node is `…-lock-0000000007`, listed after `others`.
/// Returns our node's full path, the pipelined list's id (whose children
/// watch a holder granted by it keeps) and the commands sent after its reply.
fn acquire_listed(m: &mut LockMachine, others: &[&str], opts: AcquireOptions) -> (String, RequestId, Vec<Command>) {
    m.acquire(T0, OWNER, opts, Nonce(2)).unwrap();
    let create = m.poll_command().unwrap();
    let list = m.poll_command().unwrap();
    let Op::ZooKeeper(ZkOp::CreateSequential { path, .. }) = &create.op else { panic!("{create:?}") };
    assert!(matches!(&list.op, Op::ZooKeeper(ZkOp::WatchChildren { .. })), "the pipelined list: {list:?}");
    let node = format!("{path}0000000007");
    let mut children: Vec<String> = others.iter().map(|s| s.to_string()).collect();
    children.push(node.rsplit('/').next().unwrap().to_owned());
    m.handle_reply(T0, create.id, Reply::Created { path: node.clone(), czxid: 40 });
    m.handle_reply(T0, list.id, Reply::Children(children));
    (node, list.id, commands(m))
}

fn acquire_behind(m: &mut LockMachine, others: &[&str], opts: AcquireOptions) -> (String, Vec<Command>) {
    let (node, _, sent) = acquire_listed(m, others, opts);
    (node, sent)
}

fn own_watch(sent: &[Command], node: &str) -> RequestId {
    let watch = sent.iter().find(|c| matches!(&c.op, Op::ZooKeeper(ZkOp::Stat { path, watch: true }) if path == node));
    watch.unwrap_or_else(|| panic!("the holder does not watch its own node: {sent:?}")).id
}

/// Granted by the list pipelined with its create, the holder sends nothing
/// more: that list's children watch tells it of its node's deletion.
#[test]
fn a_holder_granted_by_its_first_list_sends_nothing_more() {
    let mut m = machine();
    let (_, _, sent) = acquire_listed(&mut m, &[], AcquireOptions::default());
    assert!(matches!(m.poll_event(), Some(Event::Granted { .. })));
    assert_eq!(sent, vec![], "requests after the grant");
}

/// Granted by its first list, the holder hears of a change among the
/// contenders from that list's watch, then watches its own node: a new
/// contender leaves it holding; its node found deleted (or deleted later)
/// is a loss, reported as `NodeDeleted`.
#[test]
fn a_holder_whose_node_is_deleted_is_told_node_deleted() {
    for (fired, deleted_when_watched) in [
        (Notification::WatchFired { id: RequestId(0) }, false),
        (Notification::WatchFired { id: RequestId(0) }, true),
        (Notification::NodeDeleted { id: RequestId(0) }, true),
    ] {
        let mut m = machine();
        let (node, list, _) = acquire_listed(&mut m, &[], AcquireOptions::default());
        assert!(matches!(m.poll_event(), Some(Event::Granted { .. })));
        let fired = match fired {
            Notification::WatchFired { .. } => Notification::WatchFired { id: list },
            _ => Notification::NodeDeleted { id: list },
        };
        m.handle_notification(T0, fired);
        assert_eq!(m.poll_event(), None, "a change among the contenders alone is no loss");
        let watch = own_watch(&commands(&mut m), &node);
        let lost = Some(Event::Lost { owner: OWNER, token: FencingToken(40), reason: LossReason::NodeDeleted });
        if deleted_when_watched {
            m.handle_reply(T0, watch, Reply::NoNode);
            assert_eq!(m.poll_event(), lost);
        } else {
            m.handle_reply(T0, watch, Reply::Stat { czxid: 40 });
            assert_eq!(m.poll_event(), None, "still held: {node}");
            m.handle_notification(T0, Notification::WatchFired { id: watch });
            assert_eq!(m.poll_event(), lost);
        }
        assert_eq!(m.release(T0, OWNER), Err(polylock_core::Error::Lost(LossReason::NodeDeleted)));
    }
}

/// A holder granted without its first list (here: behind a contender that
/// left) watches its own node at once.
#[test]
fn a_holder_granted_by_a_later_list_watches_its_own_node() {
    let mut m = machine();
    let (node, sent) =
        acquire_behind(&mut m, &["_c_other-lock-0000000003", "_c_next-lock-0000000005"], AcquireOptions::default());
    let pred = sent.iter().find(
        |c| matches!(&c.op, Op::ZooKeeper(ZkOp::Stat { path, watch: true }) if path.ends_with("-lock-0000000005")),
    );
    let pred = pred.unwrap_or_else(|| panic!("no watch on the predecessor: {sent:?}")).id;
    m.handle_notification(T0, Notification::NodeDeleted { id: pred });
    let list = commands(&mut m);
    let [Command { id, op: Op::ZooKeeper(ZkOp::GetChildren { .. }) }] = list.as_slice() else { panic!("{list:?}") };
    m.handle_reply(T0, *id, Reply::Children(vec![node.rsplit('/').next().unwrap().to_owned()]));
    assert!(matches!(m.poll_event(), Some(Event::Granted { .. })));
    let watch = own_watch(&commands(&mut m), &node);
    m.handle_reply(T0, watch, Reply::NoNode);
    assert!(matches!(m.poll_event(), Some(Event::Lost { reason: LossReason::NodeDeleted, .. })));
}

/// The watch on our own node is retried when its request got no answer.
#[test]
fn a_failed_own_watch_is_sent_again() {
    let mut m = machine();
    let (node, list, _) = acquire_listed(&mut m, &[], AcquireOptions::default());
    m.handle_notification(T0, Notification::WatchFired { id: list });
    let failed = polylock_core::TransportError { message: "connection loss".into() };
    let watch = own_watch(&commands(&mut m), &node);
    m.handle_reply(T0, watch, Reply::Failed(failed));
    m.handle_connection(T0, ConnectionEvent::Disconnected);
    m.handle_connection(T0, ConnectionEvent::Connected);
    own_watch(&commands(&mut m), &node);
}

fn predecessor_watch(sent: &[Command]) -> RequestId {
    let w = sent.iter().find(
        |c| matches!(&c.op, Op::ZooKeeper(ZkOp::Stat { path, watch: true }) if path.ends_with("-lock-0000000003")),
    );
    w.unwrap_or_else(|| panic!("no watch on the predecessor: {sent:?}")).id
}

fn unwatches(sent: &[Command], watch: RequestId) -> bool {
    sent.iter().any(|c| c.op == Op::ZooKeeper(ZkOp::Unwatch { watch }))
}

#[test]
fn a_waiter_that_times_out_drops_its_watch() {
    let mut m = machine();
    let deadline = T0.saturating_add(Duration::from_millis(20));
    let opts = AcquireOptions { deadline: Some(deadline), no_wait: false, ..Default::default() };
    let (_, sent) = acquire_behind(&mut m, &["_c_other-lock-0000000003"], opts);
    let watch = predecessor_watch(&sent);
    m.handle_reply(T0, watch, Reply::Stat { czxid: 30 });
    m.handle_timeout(deadline);
    let sent = commands(&mut m);
    assert!(unwatches(&sent, watch), "the abandoned watch is not dropped: {sent:?}");
    let delete = sent.iter().find(|c| matches!(c.op, Op::ZooKeeper(ZkOp::Delete { .. })));
    let delete = delete.unwrap_or_else(|| panic!("no delete: {sent:?}"));
    assert!(m.poll_event().is_none(), "the timeout is reported once the node is deleted");
    m.handle_reply(deadline, delete.id, Reply::Done);
    assert!(matches!(m.poll_event(), Some(Event::Failed { error: polylock_core::Error::Timeout, .. })));
}

#[test]
fn a_waiter_that_looks_again_after_a_reconnection_drops_the_old_watch() {
    let mut m = machine();
    let (_, sent) = acquire_behind(&mut m, &["_c_other-lock-0000000003"], AcquireOptions::default());
    let watch = predecessor_watch(&sent);
    m.handle_connection(T0, ConnectionEvent::Disconnected);
    m.handle_connection(T0, ConnectionEvent::Connected);
    let sent = commands(&mut m);
    assert!(unwatches(&sent, watch), "{sent:?}");
    assert!(sent.iter().any(|c| matches!(c.op, Op::ZooKeeper(ZkOp::GetChildren { .. }))), "{sent:?}");
}

/// The getChildren pipelined with our create is answered after it, so it
/// lists our node. If a list without it came anyway, it was read before the
/// node was made: the claim reads the children again instead of making a
/// second node (which would queue behind the first and leave it behind).
#[test]
fn a_pipelined_list_without_our_node_is_read_again() {
    let mut m = machine();
    m.acquire(T0, OWNER, AcquireOptions::default(), Nonce(2)).unwrap();
    let create = m.poll_command().unwrap();
    let list = m.poll_command().unwrap();
    let Op::ZooKeeper(ZkOp::CreateSequential { path, .. }) = &create.op else { panic!("{create:?}") };
    m.handle_reply(T0, create.id, Reply::Created { path: format!("{path}0000000007"), czxid: 40 });
    m.handle_reply(T0, list.id, Reply::Children(vec!["_c_other-lock-0000000003".into()]));
    let sent = commands(&mut m);
    assert!(
        matches!(sent.as_slice(), [Command { op: Op::ZooKeeper(ZkOp::GetChildren { .. }), .. }]),
        "expected one more getChildren: {sent:?}"
    );
}

/// A waiter next in line is granted when its predecessor is deleted, without
/// listing again, only while its own node is known to be there. If someone
/// deleted it meanwhile (the server reports that first, in order), the
/// predecessor's deletion grants nothing: the claim lists and starts over.
#[test]
fn a_waiter_whose_node_was_deleted_is_not_granted_when_its_predecessor_goes() {
    let mut m = machine();
    let (node, sent) = acquire_behind(&mut m, &["_c_other-lock-0000000003"], AcquireOptions::default());
    let pred = predecessor_watch(&sent);
    m.handle_reply(T0, pred, Reply::Stat { czxid: 30 });
    let own = sent.iter().find(|c| matches!(&c.op, Op::ZooKeeper(ZkOp::Stat { path, watch: true }) if *path == node));
    if let Some(own) = own {
        m.handle_reply(T0, own.id, Reply::Stat { czxid: 40 });
        m.handle_notification(T0, Notification::NodeDeleted { id: own.id });
    }
    m.handle_notification(T0, Notification::NodeDeleted { id: pred });
    let events: Vec<Event> = std::iter::from_fn(|| m.poll_event()).collect();
    assert!(!events.iter().any(|e| matches!(e, Event::Granted { .. })), "granted with its node deleted: {events:?}");
    let sent = commands(&mut m);
    assert!(sent.iter().any(|c| matches!(c.op, Op::ZooKeeper(ZkOp::GetChildren { .. }))), "{sent:?}");
}

/// The grant without listing again: next in line, own node watched, the
/// predecessor deleted.
#[test]
fn a_waiter_next_in_line_is_granted_when_its_predecessor_is_deleted() {
    let mut m = machine();
    let (node, sent) = acquire_behind(&mut m, &["_c_other-lock-0000000003"], AcquireOptions::default());
    let pred = predecessor_watch(&sent);
    m.handle_reply(T0, pred, Reply::Stat { czxid: 30 });
    m.handle_reply(T0, own_watch(&sent, &node), Reply::Stat { czxid: 40 });
    m.handle_notification(T0, Notification::NodeDeleted { id: pred });
    assert!(matches!(m.poll_event(), Some(Event::Granted { token: FencingToken(40), .. })));
    assert_eq!(commands(&mut m), vec![], "no request between the deletion and the grant");
}

/// A failed try waits for the delete of its node, but not for ever: when
/// the server does not answer it (the connection still looks up), the
/// failure is reported a second later at most, and the delete goes on.
/// With the connection known down it is reported at once.
#[test]
fn a_failed_try_whose_delete_gets_no_answer_is_reported_within_a_second() {
    let try_once = AcquireOptions { no_wait: true, ..AcquireOptions::default() };
    let mut m = machine();
    let (_, sent) = acquire_behind(&mut m, &["_c_other-lock-0000000003"], try_once);
    assert!(sent.iter().any(|c| matches!(c.op, Op::ZooKeeper(ZkOp::Delete { .. }))), "{sent:?}");
    assert_eq!(m.poll_event(), None, "not before its node is gone");
    let by = m.poll_timeout().expect("a bound on the wait");
    assert!(by <= T0.saturating_add(Duration::from_secs(1)), "{by:?}");
    m.handle_timeout(by);
    assert!(matches!(m.poll_event(), Some(Event::Failed { error: polylock_core::Error::WouldBlock, .. })));

    let timed = AcquireOptions { deadline: Some(T0.saturating_add(Duration::from_millis(20))), ..Default::default() };
    let mut m = machine();
    acquire_behind(&mut m, &["_c_other-lock-0000000003"], timed);
    m.handle_connection(T0, ConnectionEvent::Disconnected);
    m.handle_timeout(T0.saturating_add(Duration::from_millis(20)));
    assert!(
        matches!(m.poll_event(), Some(Event::Failed { error: polylock_core::Error::Timeout, .. })),
        "with the connection down, at the deadline"
    );
}
