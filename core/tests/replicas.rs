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
