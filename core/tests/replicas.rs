//! Replica acknowledgement (`LockConfig::replicas`), step by step against
//! one machine: every grant and renewal carries a pipelined `WAIT`; a
//! grant the replicas did not confirm is not reported, a renewal they did
//! not confirm does not extend what the holder counts on, and a direct
//! handoff is confirmed by a round trip of the new holder's own.

use std::time::Duration;

mod steps;

use polylock_core::RedisOp;
use polylock_core::*;
use steps::{at, events, one_command};

fn machine(replicas: u32) -> LockMachine {
    let mut cfg = LockConfig::new(Backend::Redis);
    cfg.set_lease(Duration::from_secs(3));
    cfg.replicas = replicas;
    LockMachine::new(cfg, LockName::new("t").unwrap(), Nonce(1)).unwrap()
}

fn int(i: i64) -> RedisValue {
    RedisValue::Int(i)
}

/// A script reply `value` with `acks` acknowledgements, as EvalAcked answers.
fn acked(value: RedisValue, acks: i64) -> Reply {
    Reply::Redis(RedisValue::Array(vec![value, int(acks)]))
}

fn pair(flag: i64, v: i64) -> RedisValue {
    RedisValue::Array(vec![int(flag), int(v)])
}

/// The script a command runs, asserting it asks `replicas` acknowledgements.
fn acked_script(cmd: &Command, replicas: u32) -> &'static str {
    match &cmd.op {
        Op::Redis(RedisOp::EvalAcked { script, replicas: r, timeout_ms, .. }) => {
            assert_eq!((*r, *timeout_ms), (replicas, 1000), "{cmd:?}");
            script.name
        }
        other => panic!("expected a script with WAIT {replicas}, got {other:?}"),
    }
}

#[test]
fn a_grant_no_replica_acknowledged_is_not_reported_and_is_asked_again() {
    let mut m = machine(1);
    let owner = OwnerId(1);
    let ticket = m.acquire(at(0), owner, AcquireOptions::default(), Nonce(2)).unwrap();
    let first = one_command(&mut m);
    assert_eq!(acked_script(&first, 1), "polylock_acquire");
    m.handle_reply(at(1), first.id, acked(pair(1, 7), 0));
    assert_eq!(events(&mut m), vec![], "a grant only the master has is not reported");
    let retry = m.poll_timeout().expect("asked again");
    m.handle_timeout(retry);
    let again = one_command(&mut m);
    assert_eq!(acked_script(&again, 1), "polylock_acquire");
    m.handle_reply(retry, again.id, acked(pair(1, 8), 1));
    assert_eq!(events(&mut m), vec![Event::Granted { ticket, owner, token: FencingToken(8), reentry: 0 }]);
}

#[test]
fn a_grant_never_acknowledged_fails_at_the_deadline_naming_why_and_leaves() {
    let mut m = machine(1);
    let owner = OwnerId(1);
    let opts = AcquireOptions { deadline: Some(at(2_000)), ..Default::default() };
    let ticket = m.acquire(at(0), owner, opts, Nonce(2)).unwrap();
    let mut now = 0;
    loop {
        while let Some(cmd) = m.poll_command() {
            m.handle_reply(at(now), cmd.id, acked(pair(1, 7 + now as i64), 0));
        }
        match m.poll_timeout() {
            Some(t) if t.as_millis() < 2_000 => {
                now = t.as_millis();
                m.handle_timeout(t);
            }
            _ => break,
        }
    }
    assert_eq!(events(&mut m), vec![], "never reported as granted");
    m.handle_timeout(at(2_000));
    // The grant the master made is taken back first; the failure is
    // reported once that is done, so nothing of it is left when it is.
    let leave = one_command(&mut m);
    assert!(
        matches!(&leave.op, Op::Redis(RedisOp::Eval { script, .. }) if script.name == "polylock_leave"),
        "{leave:?}"
    );
    assert_eq!(events(&mut m), vec![], "reported after the LEAVE, not before");
    m.handle_reply(at(2_001), leave.id, Reply::Redis(int(1)));
    match events(&mut m).as_slice() {
        [Event::Failed { ticket: t, error: Error::Unavailable(why), .. }] if *t == ticket => {
            assert!(why.contains("0 of 1 replicas"), "{why}")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_renewal_no_replica_acknowledged_does_not_extend_the_lease() {
    let mut m = machine(1);
    let owner = OwnerId(1);
    m.acquire(at(0), owner, AcquireOptions::default(), Nonce(2)).unwrap();
    let cmd = one_command(&mut m);
    m.handle_reply(at(0), cmd.id, acked(pair(1, 7), 1));
    assert!(matches!(events(&mut m).as_slice(), [Event::Granted { .. }]));
    // Every renewal is extended on the master alone: the loss comes from
    // the first (acknowledged) grant's lease, as if none had been answered.
    let mut lost_at = None;
    while lost_at.is_none() {
        let t = m.poll_timeout().expect("a timer while held");
        assert!(t < at(3_000), "no loss within the lease ({t:?})");
        m.handle_timeout(t);
        while let Some(cmd) = m.poll_command() {
            if matches!(&cmd.op, Op::Redis(RedisOp::Eval { script, .. }) if script.name == "polylock_leave") {
                m.handle_reply(t, cmd.id, Reply::Redis(int(1)));
                continue;
            }
            assert_eq!(acked_script(&cmd, 1), "polylock_renew");
            m.handle_reply(t, cmd.id, acked(int(1), 0));
        }
        for e in events(&mut m) {
            if let Event::Lost { reason, .. } = e {
                assert_eq!(reason, LossReason::LeaseExpired);
                lost_at = Some(t);
            }
        }
    }
    assert!(lost_at.unwrap() <= at(3_000 - 30 - 12), "{lost_at:?}");
}

#[test]
fn a_direct_handoff_is_confirmed_with_acknowledgement_before_it_is_reported() {
    let mut m = machine(1);
    let owner = OwnerId(1);
    let ticket = m.acquire(at(0), owner, AcquireOptions::default(), Nonce(2)).unwrap();
    let first = one_command(&mut m);
    m.handle_reply(at(1), first.id, acked(pair(0, 2_000), 1));
    // Redisson's channel and ours, in one SUBSCRIBE.
    let sub = one_command(&mut m);
    let Op::Redis(RedisOp::Subscribe { channels }) = sub.op.clone() else { panic!("{sub:?}") };
    let channel = channels.last().unwrap().clone();
    m.handle_reply(at(2), sub.id, Reply::Done);
    let retry = one_command(&mut m);
    m.handle_reply(at(3), retry.id, acked(pair(0, 2_000), 1));
    m.handle_notification(at(10), Notification::Message { channel, payload: "12".into() });
    assert_eq!(events(&mut m), vec![], "not reported on the releaser's word alone");
    let confirm = one_command(&mut m);
    assert_eq!(acked_script(&confirm, 1), "polylock_acquire");
    m.handle_reply(at(11), confirm.id, acked(pair(1, 13), 1));
    let evs = events(&mut m);
    assert_eq!(evs, vec![Event::Granted { ticket, owner, token: FencingToken(13), reentry: 0 }], "{evs:?}");
}

#[test]
fn without_replicas_no_wait_is_sent() {
    let mut m = machine(0);
    m.acquire(at(0), OwnerId(1), AcquireOptions::default(), Nonce(2)).unwrap();
    let cmd = one_command(&mut m);
    assert!(matches!(cmd.op, Op::Redis(RedisOp::Eval { .. })), "{cmd:?}");
}

/// A grant answered after the lease it confirms (counted from when it was
/// asked) has run out is not reported: the answer may come from a master
/// that was paused meanwhile and failed over, a stale primary still
/// granting with a replica not yet moved to the new master (fault row
/// `sentinel-stale-primary`). It is asked again, as a fresh request.
#[test]
fn a_grant_answered_after_its_lease_ran_out_is_not_reported_and_is_asked_again() {
    for replicas in [0, 1] {
        let reply = |v: RedisValue| if replicas == 0 { Reply::Redis(v) } else { acked(v, 1) };
        let mut m = machine(replicas);
        let owner = OwnerId(1);
        let ticket = m.acquire(at(0), owner, AcquireOptions::default(), Nonce(2)).unwrap();
        let first = one_command(&mut m);
        m.handle_reply(at(3_000), first.id, reply(pair(1, 7)));
        assert_eq!(events(&mut m), vec![], "replicas={replicas}: a grant past its lease on arrival is not reported");
        let again = one_command(&mut m);
        assert!(
            matches!(&again.op, Op::Redis(RedisOp::Eval { script, .. } | RedisOp::EvalAcked { script, .. })
                if script.name == "polylock_acquire"),
            "replicas={replicas}: asked again at once: {again:?}"
        );
        m.handle_reply(at(3_001), again.id, reply(pair(1, 8)));
        assert_eq!(events(&mut m), vec![Event::Granted { ticket, owner, token: FencingToken(8), reentry: 0 }]);
    }
}

/// A table whose count follows the master (`replicas=all`), seeing `seen` replicas now.
fn table_following(seen: usize) -> LockTable {
    let mut cfg = LockConfig::new(Backend::Redis);
    cfg.set_lease(Duration::from_secs(3));
    cfg.acknowledge_replicas(ReplicasAsked::All, seen, Duration::from_secs(5));
    LockTable::new(cfg, Nonce(7)).unwrap()
}

/// Drains the table: its commands and events, and the timer it asks for.
fn drain(t: &mut LockTable) -> (Vec<Command>, Vec<Event>, Option<Instant>) {
    let (mut cmds, mut evs, mut timer) = (vec![], vec![], None);
    while let Some(out) = t.poll_output() {
        match out {
            Output::Command(c) => cmds.push(c),
            Output::Event { event, .. } => evs.push(event),
            Output::Timeout(at) => timer = Some(at),
            other => panic!("{other:?}"),
        }
    }
    (cmds, evs, timer)
}

/// Acquires the lock "t" and grants it with `acks` acknowledgements of
/// `asked`; returns the timer the table asks for then.
fn hold_in(t: &mut LockTable, asked: u32, acks: i64) -> Instant {
    t.acquire(
        at(0),
        &LockName::new("t").unwrap(),
        LockMode::Exclusive,
        OwnerId(1),
        AcquireOptions::default(),
        Nonce(2),
    )
    .unwrap();
    let (cmds, _, _) = drain(t);
    let [acquire] = cmds.as_slice() else { panic!("{cmds:?}") };
    assert_eq!(acked_script(acquire, asked), "polylock_acquire");
    t.handle_reply(at(0), acquire.id, acked(pair(1, 7), acks));
    let (_, evs, timer) = drain(t);
    assert!(matches!(evs.as_slice(), [Event::Granted { .. }]), "{evs:?}");
    timer.expect("the renewal timer")
}

/// `replicas=all`: a lock held when the master's replica count changes asks
/// the new count from its next request on. A holder granted while the
/// master had one replica (the set not yet whole after a failover) renews
/// with `WAIT 2` once a second one is listed, and a renewal only one
/// acknowledged does not extend its lease: the replica that lacks it could
/// be promoted with the older expiry.
#[test]
fn a_lock_in_use_asks_every_replica_the_master_lists_now() {
    let mut t = table_following(1);
    let mut timer = hold_in(&mut t, 1, 1);
    t.set_replicas_seen(2);
    let mut lost_at = None;
    while lost_at.is_none() {
        let now = timer;
        assert!(now < at(3_000), "no loss within the lease ({now:?})");
        t.handle_timeout(now);
        let (cmds, evs, next) = drain(&mut t);
        if evs.iter().any(|e| matches!(e, Event::Lost { reason: LossReason::LeaseExpired, .. })) {
            lost_at = Some(now);
        }
        for cmd in cmds {
            if matches!(&cmd.op, Op::Redis(RedisOp::Eval { script, .. }) if script.name == "polylock_leave") {
                t.handle_reply(now, cmd.id, Reply::Redis(int(1)));
                continue;
            }
            assert_eq!(acked_script(&cmd, 2), "polylock_renew");
            t.handle_reply(now, cmd.id, acked(int(1), 1));
        }
        let (_, _, after_replies) = drain(&mut t);
        timer = after_replies.or(next).unwrap_or(now);
    }
    assert!(lost_at.unwrap() <= at(3_000 - 30 - 12), "{lost_at:?}");
}

/// A reply is read by the acknowledgements its own request asked for: a
/// renewal sent with `WAIT 1` and answered after the master lost its last
/// replica (the count now 0, no `WAIT` asked) still carries its count, and
/// extends the lease; the next renewal asks none.
#[test]
fn a_reply_is_read_by_the_acknowledgements_its_request_asked_for() {
    let mut t = table_following(1);
    let renew_at = hold_in(&mut t, 1, 1);
    t.handle_timeout(renew_at);
    let (cmds, _, _) = drain(&mut t);
    let [renew] = cmds.as_slice() else { panic!("{cmds:?}") };
    assert_eq!(acked_script(renew, 1), "polylock_renew");
    t.set_replicas_seen(0);
    t.handle_reply(renew_at, renew.id, acked(int(1), 1));
    let (cmds, evs, timer) = drain(&mut t);
    assert_eq!((cmds.len(), evs.len()), (0, 0), "{cmds:?} {evs:?}");
    let next = timer.expect("the next renewal");
    assert!(next < at(3_000), "renewed: the next timer is a renewal, not the loss ({next:?})");
    t.handle_timeout(next);
    let (cmds, evs, _) = drain(&mut t);
    assert_eq!(evs, vec![], "not lost: the renewal counted");
    let [renew] = cmds.as_slice() else { panic!("{cmds:?}") };
    assert!(
        matches!(&renew.op, Op::Redis(RedisOp::Eval { script, .. }) if script.name == "polylock_renew"),
        "no WAIT once the master lists no replica: {renew:?}"
    );
}
