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
/// Returns our node's full path and the commands sent after the list reply.
fn acquire_behind(m: &mut LockMachine, others: &[&str], opts: AcquireOptions) -> (String, Vec<Command>) {
    m.acquire(T0, OWNER, opts, Nonce(2)).unwrap();
    let create = m.poll_command().unwrap();
    let list = m.poll_command().unwrap();
    let Op::ZooKeeper(ZkOp::CreateSequential { path, .. }) = &create.op else { panic!("{create:?}") };
    let node = format!("{path}0000000007");
    let mut children: Vec<String> = others.iter().map(|s| s.to_string()).collect();
    children.push(node.rsplit('/').next().unwrap().to_owned());
    m.handle_reply(T0, create.id, Reply::Created { path: node.clone(), czxid: 40 });
    m.handle_reply(T0, list.id, Reply::Children(children));
    (node, commands(m))
}

fn own_watch(sent: &[Command], node: &str) -> RequestId {
    let watch = sent.iter().find(|c| matches!(&c.op, Op::ZooKeeper(ZkOp::Stat { path, watch: true }) if path == node));
    watch.unwrap_or_else(|| panic!("the holder does not watch its own node: {sent:?}")).id
}

#[test]
fn a_holder_whose_node_is_deleted_is_told_node_deleted() {
    let mut m = machine();
    let (node, sent) = acquire_behind(&mut m, &[], AcquireOptions::default());
    assert!(matches!(m.poll_event(), Some(Event::Granted { .. })));
    let watch = own_watch(&sent, &node);
    m.handle_reply(T0, watch, Reply::Stat { czxid: 40 });
    assert_eq!(m.poll_event(), None);
    m.handle_notification(T0, Notification::WatchFired { id: watch });
    assert_eq!(
        m.poll_event(),
        Some(Event::Lost { owner: OWNER, token: FencingToken(40), reason: LossReason::NodeDeleted })
    );
    assert_eq!(m.release(T0, OWNER), Err(polylock_core::Error::Lost(LossReason::NodeDeleted)));
}

#[test]
fn a_holder_whose_node_is_gone_before_the_watch_is_set_is_told() {
    let mut m = machine();
    let (node, sent) = acquire_behind(&mut m, &[], AcquireOptions::default());
    assert!(matches!(m.poll_event(), Some(Event::Granted { .. })));
    m.handle_reply(T0, own_watch(&sent, &node), Reply::NoNode);
    assert!(matches!(m.poll_event(), Some(Event::Lost { reason: LossReason::NodeDeleted, .. })));
}

/// The watch on our own node is retried when its request got no answer.
#[test]
fn a_failed_own_watch_is_sent_again() {
    let mut m = machine();
    let (node, sent) = acquire_behind(&mut m, &[], AcquireOptions::default());
    let failed = polylock_core::TransportError { message: "connection loss".into() };
    m.handle_reply(T0, own_watch(&sent, &node), Reply::Failed(failed));
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
