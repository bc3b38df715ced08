//! The lock table driven by hand, with written-out replies: routing across
//! lock names, per-acquire leases, status reads, idle drop, connection
//! broadcast, the one timer, unwanted grants and close.

use std::time::Duration;

use polylock_core::*;
use polylock_core::{RedisOp, ZkOp};

const T0: Instant = Instant::from_millis(1_000);
const OWNER: OwnerId = OwnerId(1);

fn name(s: &str) -> LockName {
    LockName::new(s).unwrap()
}

fn table(backend: Backend) -> LockTable {
    LockTable::new(LockConfig::new(backend), Nonce(7)).unwrap()
}

fn drain(t: &mut LockTable) -> Vec<Output> {
    std::iter::from_fn(|| t.poll_output()).collect()
}

fn commands(outs: &[Output]) -> Vec<Command> {
    outs.iter().filter_map(|o| if let Output::Command(c) = o { Some(c.clone()) } else { None }).collect()
}

fn events(outs: &[Output]) -> Vec<(String, Event)> {
    outs.iter()
        .filter_map(|o| match o {
            Output::Event { name, event, .. } => Some((name.as_str().to_owned(), event.clone())),
            _ => None,
        })
        .collect()
}

fn only_command(outs: &[Output]) -> Command {
    let cmds = commands(outs);
    assert_eq!(cmds.len(), 1, "{outs:?}");
    cmds[0].clone()
}

fn granted(token: i64) -> Reply {
    Reply::Redis(RedisValue::Array(vec![RedisValue::Int(1), RedisValue::Int(token)]))
}

fn busy() -> Reply {
    Reply::Redis(RedisValue::Array(vec![RedisValue::Int(0), RedisValue::Int(5_000)]))
}

fn script(cmd: &Command) -> &'static str {
    match &cmd.op {
        Op::Redis(RedisOp::Eval { script, .. }) => script.name,
        other => panic!("not a script: {other:?}"),
    }
}

/// Whether `channel` is one waiter's own (Redisson's channel `:` its queue
/// member, `<field>|<claim id>|<lease>`), not the lock's shared one.
fn is_waiter_channel(channel: &str) -> bool {
    channel.contains('|')
}

/// Acquires `n` on Redis and answers its first try `busy`; returns the
/// ticket and the waiter channel from the Subscribe that follows, answered,
/// and the id of the acquire sent after it (still unanswered).
fn queue_behind_redis(t: &mut LockTable, n: &LockName, nonce: u128) -> (Ticket, String, RequestId) {
    let ticket = t.acquire(T0, n, LockMode::Exclusive, OWNER, AcquireOptions::default(), Nonce(nonce)).unwrap();
    let first = only_command(&drain(t));
    assert_eq!(script(&first), "polylock_acquire");
    t.handle_reply(T0, first.id, busy());
    let subs = commands(&drain(t));
    // One SUBSCRIBE: Redisson's channel (a Redisson holder's release is heard there), and ours.
    let [sub] = subs.as_slice() else { panic!("{subs:?}") };
    let Op::Redis(RedisOp::Subscribe { channels }) = sub.op.clone() else { panic!("{sub:?}") };
    let [redisson, channel] = <[String; 2]>::try_from(channels).expect("two channels");
    assert!(!is_waiter_channel(&redisson) && is_waiter_channel(&channel));
    t.handle_reply(T0, sub.id, Reply::Done);
    let again = only_command(&drain(t));
    (ticket, channel, again.id)
}

/// Two names queued behind other holders; their commands are answered in
/// crossed order and the handoffs come B first: each grant reaches its own
/// name and ticket.
#[test]
fn redis_grants_reach_the_right_name_across_crossed_replies_and_handoffs() {
    let mut t = table(Backend::Redis);
    let (a, b) = (name("orders/a"), name("orders/b"));
    let ta = t.acquire(T0, &a, LockMode::Exclusive, OWNER, AcquireOptions::default(), Nonce(2)).unwrap();
    let tb = t.acquire(T0, &b, LockMode::Exclusive, OWNER, AcquireOptions::default(), Nonce(3)).unwrap();
    assert_ne!(ta, tb, "tickets are table-wide");
    let outs = drain(&mut t);
    let cmds = commands(&outs);
    assert_eq!(cmds.len(), 2, "{outs:?}");
    let (ca, cb) = (&cmds[0], &cmds[1]);
    assert_ne!(ca.id, cb.id, "request ids are table-wide");
    // B's answer first, then A's.
    t.handle_reply(T0, cb.id, busy());
    t.handle_reply(T0, ca.id, busy());
    let subs: Vec<Command> = commands(&drain(&mut t))
        .into_iter()
        .filter(|c| matches!(&c.op, Op::Redis(RedisOp::Subscribe { .. })))
        .collect();
    let channels: Vec<String> = subs
        .iter()
        .map(|c| match &c.op {
            Op::Redis(RedisOp::Subscribe { channels }) => {
                channels.iter().find(|c| is_waiter_channel(c)).expect("a waiter channel").clone()
            }
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(channels.len(), 2);
    let (chan_b, chan_a) = (channels[0].clone(), channels[1].clone());
    assert_ne!(chan_a, chan_b);
    t.handle_reply(T0, subs[1].id, Reply::Done);
    t.handle_reply(T0, subs[0].id, Reply::Done);
    let retries = commands(&drain(&mut t));
    assert_eq!(retries.len(), 2);
    for r in retries.iter().rev() {
        t.handle_reply(T0, r.id, busy());
    }
    assert!(events(&drain(&mut t)).is_empty());

    // The holders release: B's waiter is handed the lock first, then A's.
    t.handle_notification(T0, Notification::Message { channel: chan_b, payload: "41".into() });
    t.handle_notification(T0, Notification::Message { channel: chan_a, payload: "40".into() });
    let evs = events(&drain(&mut t));
    assert_eq!(
        evs,
        vec![
            (b.as_str().to_owned(), Event::Granted { ticket: tb, owner: OWNER, token: FencingToken(41), reentry: 0 }),
            (a.as_str().to_owned(), Event::Granted { ticket: ta, owner: OWNER, token: FencingToken(40), reentry: 0 }),
        ]
    );
    assert_eq!(t.hold(a.as_str(), LockMode::Exclusive, OWNER), Some((1, FencingToken(40))));
    assert_eq!(t.hold(b.as_str(), LockMode::Exclusive, OWNER), Some((1, FencingToken(41))));
}

/// Acquires `n` on ZooKeeper as the second contender; returns the ticket
/// our node's name and the id of the Stat that watches the predecessor.
fn queue_behind_zk(t: &mut LockTable, n: &LockName, nonce: u128, czxid: i64) -> (Ticket, String, RequestId) {
    let ticket = t.acquire(T0, n, LockMode::Exclusive, OWNER, AcquireOptions::default(), Nonce(nonce)).unwrap();
    let cmds = commands(&drain(t));
    let [create, list] = cmds.as_slice() else { panic!("{cmds:?}") };
    let Op::ZooKeeper(ZkOp::CreateSequential { path, .. }) = &create.op else { panic!("{create:?}") };
    let node = format!("{path}0000000007");
    let ours = node.rsplit('/').next().unwrap().to_owned();
    t.handle_reply(T0, create.id, Reply::Created { path: node, czxid });
    t.handle_reply(T0, list.id, Reply::Children(vec!["_c_other-lock-0000000003".into(), ours.clone()]));
    let watch = commands(&drain(t))
        .into_iter()
        .find(
            |c| matches!(&c.op, Op::ZooKeeper(ZkOp::Stat { path, watch: true }) if path.ends_with("-lock-0000000003")),
        )
        .expect("a watch on the predecessor");
    (ticket, ours, watch.id)
}

/// Two ZooKeeper names wait on their predecessors; the watches fire in
/// crossed order, each with the table id of the Stat that set it.
#[test]
fn zookeeper_watches_fire_to_the_right_name_in_crossed_order() {
    let mut t = table(Backend::ZooKeeper);
    let (a, b) = (name("/orders/a"), name("/orders/b"));
    let (ta, node_a, wa) = queue_behind_zk(&mut t, &a, 2, 50);
    let (tb, node_b, wb) = queue_behind_zk(&mut t, &b, 3, 60);
    assert_ne!(ta, tb);
    assert_ne!(wa, wb);
    t.handle_reply(T0, wb, Reply::Stat { czxid: 30 });
    t.handle_reply(T0, wa, Reply::Stat { czxid: 31 });
    assert!(drain(&mut t).is_empty());
    // B's predecessor goes first: B lists again and is granted.
    t.handle_notification(T0, Notification::WatchFired { id: wb });
    let outs = drain(&mut t);
    assert!(events(&outs).is_empty(), "{outs:?}");
    let relist_b = only_command(&outs);
    assert!(
        matches!(&relist_b.op, Op::ZooKeeper(ZkOp::GetChildren { path }) if path.ends_with("/orders/b")),
        "{relist_b:?}"
    );
    t.handle_notification(T0, Notification::WatchFired { id: wa });
    let relist_a = only_command(&drain(&mut t));
    assert!(
        matches!(&relist_a.op, Op::ZooKeeper(ZkOp::GetChildren { path }) if path.ends_with("/orders/a")),
        "{relist_a:?}"
    );
    t.handle_reply(T0, relist_b.id, Reply::Children(vec![node_b]));
    t.handle_reply(T0, relist_a.id, Reply::Children(vec![node_a]));
    let evs = events(&drain(&mut t));
    assert_eq!(
        evs,
        vec![
            (b.as_str().to_owned(), Event::Granted { ticket: tb, owner: OWNER, token: FencingToken(60), reentry: 0 }),
            (a.as_str().to_owned(), Event::Granted { ticket: ta, owner: OWNER, token: FencingToken(50), reentry: 0 }),
        ]
    );
}

/// The ACQUIRE script's lease (ARGV[2]) and waiter TTL (ARGV[4]) of one acquire.
fn acquire_terms(cmd: &Command) -> (String, String) {
    let Op::Redis(RedisOp::Eval { script, args, .. }) = &cmd.op else { panic!("{cmd:?}") };
    assert_eq!(script.name, "polylock_acquire");
    (args[1].clone(), args[3].clone())
}

/// Each acquire of one name carries its own lease; without one, the config's.
#[test]
fn per_acquire_leases_on_two_handles_of_one_name() {
    let mut cfg = LockConfig::new(Backend::Redis);
    cfg.lease = Duration::from_secs(30);
    cfg.waiter_ttl = Duration::from_secs(45);
    let mut t = LockTable::new(cfg, Nonce(7)).unwrap();
    let n = name("orders/42");
    let mut token = 10;
    for (owner, lease, want) in [
        (OwnerId(1), Some(Duration::from_secs(2)), ("2000", "2000")),
        (OwnerId(2), Some(Duration::from_secs(9)), ("9000", "9000")),
        (OwnerId(3), None, ("30000", "45000")),
    ] {
        let opts = AcquireOptions { lease, ..Default::default() };
        t.acquire(T0, &n, LockMode::Exclusive, owner, opts, Nonce(u128::from(owner.0) + 100)).unwrap();
        let cmd = only_command(&drain(&mut t));
        let (l, ttl) = acquire_terms(&cmd);
        assert_eq!((l.as_str(), ttl.as_str()), want, "owner {owner:?}");
        token += 1;
        t.handle_reply(T0, cmd.id, granted(token));
        let _ = drain(&mut t);
        assert!(matches!(
            t.release(T0, n.as_str(), LockMode::Exclusive, owner, None),
            Ok(ReleaseProgress::Releasing(_))
        ));
        let leave = only_command(&drain(&mut t));
        assert_eq!(script(&leave), "polylock_leave");
        t.handle_reply(T0, leave.id, Reply::Redis(RedisValue::Int(1)));
        let _ = drain(&mut t);
    }
}

/// A Redis status read is one STATUS script on the lock's keys, decoded in core.
#[test]
fn redis_status_is_one_script_decoded_in_core() {
    let mut t = table(Backend::Redis);
    let n = name("orders/42");
    let id = t.read_status(&n);
    let cmd = only_command(&drain(&mut t));
    let keys = redis::RedisKeys::of(&n);
    let Op::Redis(RedisOp::Eval { script, keys: sent, .. }) = &cmd.op else { panic!("{cmd:?}") };
    assert_eq!(script.name, redis::STATUS.name);
    let rw_queue = redis::RedisKeys::of_read_write(&n).queue().to_owned();
    let sem = redis::RedisKeys::of_semaphore(&n);
    let expected = vec![
        keys.lock().to_owned(),
        keys.fence().to_owned(),
        keys.queue().to_owned(),
        rw_queue,
        sem.permit_timeouts().unwrap().to_owned(),
        sem.queue().to_owned(),
        sem.permit_total().unwrap().to_owned(),
    ];
    assert_eq!(sent, &expected);
    assert_eq!(t.lock_count(), 0, "a status read needs no machine");
    let reply = Reply::Redis(RedisValue::Array(vec![
        RedisValue::Bulk(b"c:1".to_vec()),
        RedisValue::Int(900),
        RedisValue::Int(42),
        RedisValue::Int(2),
        RedisValue::Int(0),
    ]));
    t.handle_reply(T0, cmd.id, reply);
    assert_eq!(
        drain(&mut t),
        vec![Output::Status {
            id,
            result: Ok(LockStatus {
                held: true,
                holder: Some("c:1".into()),
                fencing_token: Some(42),
                waiters: Some(2),
                ttl_ms: Some(900),
                readers: 0,
                permits: None,
            })
        }]
    );
    assert!(!t.has_server_work());
}

/// A ZooKeeper status read lists the contenders, reads the first in
/// Curator's order, and lists again if that one vanished meanwhile.
#[test]
fn zookeeper_status_lists_reads_the_first_and_lists_again_on_no_node() {
    let mut t = table(Backend::ZooKeeper);
    let n = name("/orders/42");
    let parent = zk::lock_path(&n);
    let id = t.read_status(&n);
    let list = only_command(&drain(&mut t));
    assert_eq!(list.op, Op::ZooKeeper(ZkOp::GetChildren { path: parent.clone() }));
    // Curator orders by the sequence suffix, not by the whole name.
    let kids = vec!["_c_b-lock-0000000005".to_owned(), "_c_a-lock-0000000009".to_owned()];
    t.handle_reply(T0, list.id, Reply::Children(kids));
    let read = only_command(&drain(&mut t));
    assert_eq!(read.op, Op::ZooKeeper(ZkOp::GetData { path: format!("{parent}/_c_b-lock-0000000005") }));
    t.handle_reply(T0, read.id, Reply::NoNode);
    let again = only_command(&drain(&mut t));
    assert_eq!(again.op, Op::ZooKeeper(ZkOp::GetChildren { path: parent.clone() }));
    t.handle_reply(T0, again.id, Reply::Children(vec!["_c_a-lock-0000000009".into()]));
    let read = only_command(&drain(&mut t));
    assert_eq!(read.op, Op::ZooKeeper(ZkOp::GetData { path: format!("{parent}/_c_a-lock-0000000009") }));
    t.handle_reply(T0, read.id, Reply::Data { data: b"c:3".to_vec(), czxid: 77 });
    assert_eq!(
        drain(&mut t),
        vec![Output::Status {
            id,
            result: Ok(LockStatus {
                held: true,
                holder: Some("c:3".into()),
                fencing_token: Some(77),
                waiters: Some(0),
                ttl_ms: None,
                readers: 0,
                permits: None,
            })
        }]
    );
}

/// A machine goes once it has nothing left to do, after a full cycle and
/// after a cancel's cleanup.
#[test]
fn idle_machines_are_dropped() {
    let mut t = table(Backend::Redis);
    let n = name("orders/42");
    t.acquire(T0, &n, LockMode::Exclusive, OWNER, AcquireOptions::default(), Nonce(2)).unwrap();
    assert_eq!(t.lock_count(), 1);
    let cmd = only_command(&drain(&mut t));
    t.handle_reply(T0, cmd.id, granted(5));
    let _ = drain(&mut t);
    let _ = t.release(T0, n.as_str(), LockMode::Exclusive, OWNER, None).unwrap();
    let leave = only_command(&drain(&mut t));
    assert_eq!(t.lock_count(), 1, "the release is in flight");
    t.handle_reply(T0, leave.id, Reply::Redis(RedisValue::Int(1)));
    let outs = drain(&mut t);
    assert!(matches!(events(&outs).as_slice(), [(_, Event::Released { .. })]), "{outs:?}");
    assert_eq!(t.lock_count(), 0, "dropped after a full cycle");

    // Cancelled while queued: dropped once its queue entry is gone.
    let (ticket, _, pending) = queue_behind_redis(&mut t, &n, 3);
    assert!(t.cancel(T0, ticket));
    let cleanup = commands(&drain(&mut t));
    assert_eq!(t.lock_count(), 1, "cleanup still runs: {cleanup:?}");
    t.handle_reply(T0, pending, busy());
    for c in commands(&drain(&mut t)).into_iter().chain(cleanup) {
        let reply = if matches!(c.op, Op::Redis(RedisOp::Eval { .. })) {
            Reply::Redis(RedisValue::Int(0))
        } else {
            Reply::Done
        };
        t.handle_reply(T0, c.id, reply);
        let _ = drain(&mut t);
    }
    assert_eq!(t.lock_count(), 0, "dropped after the cancel's cleanup");
}

/// A late reply for a dropped machine's request is not given to a new
/// machine of the same name: request ids are never reused.
#[test]
fn a_reply_for_a_dropped_machine_is_ignored() {
    let mut t = table(Backend::Redis);
    let n = name("orders/42");
    // No-wait acquire refused as busy: the machine is done and dropped,
    // but a duplicate of its command's reply will still come.
    let opts = AcquireOptions { no_wait: true, ..Default::default() };
    t.acquire(T0, &n, LockMode::Exclusive, OWNER, opts, Nonce(2)).unwrap();
    let old = only_command(&drain(&mut t));
    t.handle_reply(T0, old.id, busy());
    let outs = drain(&mut t);
    assert!(matches!(events(&outs).as_slice(), [(_, Event::Failed { error: Error::WouldBlock, .. })]), "{outs:?}");
    assert_eq!(t.lock_count(), 0);

    let ticket = t.acquire(T0, &n, LockMode::Exclusive, OWNER, AcquireOptions::default(), Nonce(3)).unwrap();
    let new = only_command(&drain(&mut t));
    assert_ne!(new.id, old.id);
    // The stale reply says "granted": it must not grant the new machine.
    t.handle_reply(T0, old.id, granted(99));
    assert!(drain(&mut t).is_empty(), "a stale reply reached the new machine");
    assert_eq!(t.hold(n.as_str(), LockMode::Exclusive, OWNER), None);
    t.handle_reply(T0, new.id, granted(100));
    let evs = events(&drain(&mut t));
    assert_eq!(
        evs,
        vec![(n.as_str().to_owned(), Event::Granted { ticket, owner: OWNER, token: FencingToken(100), reentry: 0 })]
    );
}

/// Holds `n` on ZooKeeper (the only contender); returns the token.
fn hold_zk(t: &mut LockTable, n: &LockName, nonce: u128, czxid: i64) {
    hold_zk_at(t, T0, n, nonce, czxid)
}

/// As [`hold_zk`], everything at `now`.
fn hold_zk_at(t: &mut LockTable, now: Instant, n: &LockName, nonce: u128, czxid: i64) {
    t.acquire(now, n, LockMode::Exclusive, OWNER, AcquireOptions::default(), Nonce(nonce)).unwrap();
    let cmds = commands(&drain(t));
    let [create, list] = cmds.as_slice() else { panic!("{cmds:?}") };
    let Op::ZooKeeper(ZkOp::CreateSequential { path, .. }) = &create.op else { panic!("{create:?}") };
    let node = format!("{path}0000000001");
    let ours = node.rsplit('/').next().unwrap().to_owned();
    t.handle_reply(now, create.id, Reply::Created { path: node, czxid });
    t.handle_reply(now, list.id, Reply::Children(vec![ours]));
    let outs = drain(t);
    assert!(matches!(events(&outs).as_slice(), [(_, Event::Granted { .. })]), "{outs:?}");
    for c in commands(&outs) {
        if matches!(c.op, Op::ZooKeeper(ZkOp::Stat { watch: true, .. })) {
            t.handle_reply(now, c.id, Reply::Stat { czxid });
        }
    }
    let _ = drain(t);
}

/// A disconnection reaches every lock of the table: both holders are told
/// once the grace (a third of the session timeout) has passed.
#[test]
fn a_disconnection_reaches_every_machine() {
    let cfg = LockConfig::new(Backend::ZooKeeper);
    let grace = cfg.session_timeout / 3;
    let mut t = LockTable::new(cfg, Nonce(7)).unwrap();
    let (a, b) = (name("/orders/a"), name("/orders/b"));
    hold_zk(&mut t, &a, 2, 50);
    hold_zk(&mut t, &b, 3, 60);
    t.handle_connection(T0, ConnectionEvent::Disconnected);
    let _ = drain(&mut t);
    let after = T0.saturating_add(grace);
    t.handle_timeout(after);
    let mut lost: Vec<(String, Event)> = events(&drain(&mut t));
    lost.sort_by(|x, y| x.0.cmp(&y.0));
    let told: Vec<(String, FencingToken)> = lost
        .into_iter()
        .map(|(n, e)| match e {
            Event::Lost { token, reason: LossReason::Disconnected, .. } => (n, token),
            other => panic!("{n}: {other:?}"),
        })
        .collect();
    assert_eq!(told, vec![(a.as_str().to_owned(), FencingToken(50)), (b.as_str().to_owned(), FencingToken(60))]);
}

/// Every held ZooKeeper lock has a pause watchdog (a quarter session
/// timeout). Holds taken at scattered instants must still share their
/// wake-ups: a process holding 100 locks wakes a few times a session
/// timeout, not 100 times as often as one holding one lock.
#[test]
fn the_pause_watchdogs_of_many_holds_share_their_wake_ups() {
    let cfg = LockConfig::new(Backend::ZooKeeper);
    let quarter = cfg.session_timeout / 4;
    let mut t = LockTable::new(cfg.clone(), Nonce(7)).unwrap();
    for i in 0..100u64 {
        let at = T0.saturating_add(Duration::from_millis(37 * i));
        hold_zk_at(&mut t, at, &name(&format!("/orders/{i}")), 100 + u128::from(i), 1_000 + i as i64);
    }
    // The driver: one timer, run at each announced instant, for 4 session timeouts.
    let start = T0.saturating_add(Duration::from_millis(37 * 100));
    let end = start.saturating_add(cfg.session_timeout * 4);
    // Called early, the table announces its next deadline again.
    t.handle_timeout(start);
    let mut next = timeouts(&drain(&mut t)).first().copied().map(Output::Timeout);
    let mut wake_ups = 0;
    while let Some(Output::Timeout(at)) = next {
        if at > end {
            break;
        }
        t.handle_timeout(at);
        wake_ups += 1;
        let outs = drain(&mut t);
        assert!(events(&outs).is_empty() && commands(&outs).is_empty(), "an idle hold did something: {outs:?}");
        next = timeouts(&outs).first().copied().map(Output::Timeout);
    }
    let quarters = (end.saturating_since(start).as_millis() / quarter.as_millis()) as usize;
    assert!(
        wake_ups <= quarters + 1,
        "100 holds woke the driver {wake_ups} times in {quarters} quarter session timeouts"
    );
    assert!(wake_ups >= quarters - 1, "the watchdogs stopped: {wake_ups} wake-ups in {quarters} quarters");
}

fn timeouts(outs: &[Output]) -> Vec<Instant> {
    outs.iter().filter_map(|o| if let Output::Timeout(at) = o { Some(*at) } else { None }).collect()
}

/// The table announces an instant only when it is earlier than the one it
/// announced last: a second grant whose renewal is later announces nothing,
/// nor does the first deadline's going away; after `handle_timeout` the next
/// deadline is announced again.
#[test]
fn a_later_deadline_is_not_announced() {
    let mut t = table(Backend::Redis);
    let (a, b) = (name("orders/a"), name("orders/b"));
    t.acquire(T0, &a, LockMode::Exclusive, OWNER, AcquireOptions::default(), Nonce(2)).unwrap();
    let ca = only_command(&drain(&mut t));
    t.handle_reply(T0, ca.id, granted(5));
    let first = timeouts(&drain(&mut t));
    assert_eq!(first.len(), 1, "{first:?}");
    let later = T0.saturating_add(Duration::from_millis(500));
    t.acquire(later, &b, LockMode::Exclusive, OWNER, AcquireOptions::default(), Nonce(3)).unwrap();
    let cb = only_command(&drain(&mut t));
    t.handle_reply(later, cb.id, granted(6));
    let outs = drain(&mut t);
    assert!(timeouts(&outs).is_empty(), "a later deadline was announced: {outs:?}");
    // A is released: its renewal goes; B's, later, is still not announced.
    let _ = t.release(later, a.as_str(), LockMode::Exclusive, OWNER, None).unwrap();
    let outs = drain(&mut t);
    assert!(timeouts(&outs).is_empty(), "a later deadline was announced: {outs:?}");
    let leave = only_command(&outs);
    t.handle_reply(later, leave.id, Reply::Redis(RedisValue::Int(1)));
    assert!(timeouts(&drain(&mut t)).is_empty());
    // The driver's timer fires at the first instant: nothing is due, and
    // B's renewal is announced now.
    t.handle_timeout(first[0]);
    let outs = drain(&mut t);
    let next = timeouts(&outs);
    assert_eq!(next.len(), 1, "{outs:?}");
    assert!(next[0] > first[0]);
    assert!(commands(&outs).is_empty(), "{outs:?}");
    t.handle_timeout(next[0]);
    let renew = only_command(&drain(&mut t));
    assert_eq!(script(&renew), "polylock_renew");
}

/// A grant nobody took is given back: its LEAVE goes out.
#[test]
fn an_unwanted_grant_is_given_back() {
    let mut t = table(Backend::Redis);
    let n = name("orders/42");
    t.acquire(T0, &n, LockMode::Exclusive, OWNER, AcquireOptions::default(), Nonce(2)).unwrap();
    let cmd = only_command(&drain(&mut t));
    t.handle_reply(T0, cmd.id, granted(5));
    let _ = drain(&mut t);
    t.grant_unwanted(T0, n.as_str(), LockMode::Exclusive, OWNER, FencingToken(5));
    let leave = only_command(&drain(&mut t));
    assert_eq!(script(&leave), "polylock_leave");
    assert_eq!(t.hold(n.as_str(), LockMode::Exclusive, OWNER), None);
}

/// `close` tells every holder `Lost(Closed)` before any release is polled.
#[test]
fn close_tells_each_holder_before_its_release_goes_out() {
    let mut t = table(Backend::Redis);
    let (a, b) = (name("orders/a"), name("orders/b"));
    for (n, token, nonce) in [(&a, 5, 2), (&b, 6, 3)] {
        t.acquire(T0, n, LockMode::Exclusive, OWNER, AcquireOptions::default(), Nonce(nonce)).unwrap();
        let cmd = only_command(&drain(&mut t));
        t.handle_reply(T0, cmd.id, granted(token));
        let _ = drain(&mut t);
    }
    t.close(T0);
    let outs = drain(&mut t);
    let first_command = outs.iter().position(|o| matches!(o, Output::Command(_))).expect("releases go out");
    let lost: Vec<&Output> = outs
        .iter()
        .filter(|o| matches!(o, Output::Event { event: Event::Lost { reason: LossReason::Closed, .. }, .. }))
        .collect();
    assert_eq!(lost.len(), 2, "{outs:?}");
    assert!(
        outs[..first_command].iter().filter(|o| matches!(o, Output::Event { .. })).count() == 2,
        "a release was polled before its holder was told: {outs:?}"
    );
    assert!(commands(&outs).iter().all(|c| script(c) == "polylock_leave"), "{outs:?}");
    assert_eq!(t.acquire(T0, &a, LockMode::Exclusive, OWNER, AcquireOptions::default(), Nonce(9)), Err(Error::Closed));
}

/// A lock first used while the connection is down (its machine made after
/// the `Disconnected`, or made again after an idle drop) counts its grant's
/// loss deadline from the disconnection, as a machine that heard it does:
/// dropping idle machines must not make the table forget the connection.
#[test]
fn a_lock_first_used_while_disconnected_counts_its_loss_from_the_disconnection() {
    let cfg = LockConfig::new(Backend::ZooKeeper);
    let grace = cfg.session_timeout / 3;
    let mut t = LockTable::new(cfg, Nonce(7)).unwrap();
    let (a, b) = (name("/orders/a"), name("/orders/b"));
    // A is used once and dropped, so the table has no machine when the connection goes.
    hold_zk(&mut t, &a, 2, 50);
    let _ = t.release(T0, a.as_str(), LockMode::Exclusive, OWNER, None).unwrap();
    for c in commands(&drain(&mut t)) {
        t.handle_reply(T0, c.id, Reply::Done);
    }
    let _ = drain(&mut t);
    assert_eq!(t.lock_count(), 0);
    t.handle_connection(T0, ConnectionEvent::Disconnected);
    // B is granted by replies that were on their way (or came over a
    // reconnection not yet reported): the connection is still down.
    let later = T0.saturating_add(Duration::from_millis(10));
    t.acquire(later, &b, LockMode::Exclusive, OWNER, AcquireOptions::default(), Nonce(3)).unwrap();
    let cmds = commands(&drain(&mut t));
    let [create, list] = cmds.as_slice() else { panic!("{cmds:?}") };
    let Op::ZooKeeper(ZkOp::CreateSequential { path, .. }) = &create.op else { panic!("{create:?}") };
    let node = format!("{path}0000000001");
    let ours = node.rsplit('/').next().unwrap().to_owned();
    t.handle_reply(later, create.id, Reply::Created { path: node, czxid: 60 });
    t.handle_reply(later, list.id, Reply::Children(vec![ours]));
    let outs = drain(&mut t);
    assert!(matches!(events(&outs).as_slice(), [(_, Event::Granted { .. })]), "{outs:?}");
    t.handle_timeout(T0.saturating_add(grace));
    let evs = events(&drain(&mut t));
    assert_eq!(
        evs,
        vec![(
            b.as_str().to_owned(),
            Event::Lost { owner: OWNER, token: FencingToken(60), reason: LossReason::Disconnected }
        )],
        "not told a grace after the disconnection"
    );
}

/// The same with a request still in flight when its machine is dropped (a
/// handed-over waiter's Unsubscribe, answered on the pub/sub connection after
/// the lock was released), whose machine-local id a new machine of the same
/// name reuses: its late answer does not reach the new machine's acquire.
#[test]
fn a_late_reply_to_a_dropped_machine_never_reaches_its_successor() {
    let mut t = table(Backend::Redis);
    let n = name("orders/42");
    let (_, channel, again) = queue_behind_redis(&mut t, &n, 2);
    t.handle_reply(T0, again, busy());
    t.handle_notification(T0, Notification::Message { channel, payload: "40".into() });
    let outs = drain(&mut t);
    assert!(matches!(events(&outs).as_slice(), [(_, Event::Granted { .. })]), "{outs:?}");
    // Our channel's Unsubscribe, then Redisson's.
    let unsubs = commands(&outs);
    assert!(unsubs.iter().all(|c| matches!(c.op, Op::Redis(RedisOp::Unsubscribe { .. }))), "{unsubs:?}");
    let unsub = unsubs[0].clone();
    let _ = t.release(T0, n.as_str(), LockMode::Exclusive, OWNER, None).unwrap();
    let leave = only_command(&drain(&mut t));
    t.handle_reply(T0, leave.id, Reply::Redis(RedisValue::Int(1)));
    let _ = drain(&mut t);
    assert_eq!(t.lock_count(), 0, "dropped with its Unsubscribe unanswered");

    // The successor goes through the same steps, so its fourth command (a
    // woken acquire) has the local id the stale Unsubscribe had.
    let (ticket, channel, again) = queue_behind_redis(&mut t, &n, 3);
    t.handle_reply(T0, again, busy());
    t.handle_notification(T0, Notification::Message { channel, payload: "0".into() });
    let woken = only_command(&drain(&mut t));
    assert_eq!(script(&woken), "polylock_acquire");
    t.handle_reply(T0, unsub.id, Reply::Done);
    assert!(drain(&mut t).is_empty(), "the stale answer reached the new machine");
    t.handle_reply(T0, woken.id, granted(41));
    let evs = events(&drain(&mut t));
    assert_eq!(
        evs,
        vec![(n.as_str().to_owned(), Event::Granted { ticket, owner: OWNER, token: FencingToken(41), reentry: 0 })]
    );
}
