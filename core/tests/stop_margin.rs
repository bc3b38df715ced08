//! `AcquireOptions::stop_margin`: the holder is told of a loss that much
//! earlier than the safety margins alone would tell it, so work that takes
//! time to stop (a command's exit after SIGTERM) has stopped before the
//! server can let anyone else in. A margin the backend cannot honour is
//! refused at the acquire, with nothing sent.

use std::time::Duration;

use polylock_core::*;

const T0: Instant = Instant::from_millis(1_000);
const ME: OwnerId = OwnerId(1);

fn drain(t: &mut LockTable) -> Vec<Output> {
    std::iter::from_fn(|| t.poll_output()).collect()
}

fn commands(outs: &[Output]) -> Vec<Command> {
    outs.iter().filter_map(|o| if let Output::Command(c) = o { Some(c.clone()) } else { None }).collect()
}

fn lost(outs: &[Output]) -> bool {
    outs.iter().any(|o| matches!(o, Output::Event { event: Event::Lost { .. }, .. }))
}

fn at(base: Instant, d: Duration) -> Instant {
    base.saturating_add(d)
}

/// Redis: the grant's renewal goes unanswered; the loss comes at
/// `lease - drift - margin` after the grant's request was sent, not at
/// `lease - drift`.
#[test]
fn a_redis_holder_is_told_its_stop_margin_before_the_lease_can_run_out() {
    let lease = Duration::from_secs(3);
    let margin = Duration::from_millis(700);
    let cfg = LockConfig::new(Backend::Redis);
    let mut t = LockTable::new(cfg, Nonce(7)).unwrap();
    let name = LockName::new("orders/42").unwrap();
    let opts = AcquireOptions { lease: Some(lease), stop_margin: margin, ..Default::default() };
    t.acquire(T0, &name, LockMode::Exclusive, ME, opts, Nonce(9)).unwrap();
    let grant = commands(&drain(&mut t)).remove(0);
    t.handle_reply(T0, grant.id, Reply::Redis(RedisValue::Array(vec![RedisValue::Int(1), RedisValue::Int(5)])));
    let _ = drain(&mut t);
    // The renewal (at a third of the lease) is sent and never answered.
    let mut now = T0;
    let loss_at = at(T0, lease - (lease / 100 + Duration::from_millis(12)) - margin);
    let mut told = None;
    while now <= at(T0, lease) {
        t.handle_timeout(now);
        if lost(&drain(&mut t)) {
            told = Some(now);
            break;
        }
        now = at(now, Duration::from_millis(1));
    }
    assert_eq!(told, Some(loss_at), "the holder was told at {told:?}, not {loss_at:?}");
}

/// ZooKeeper: after a reported disconnection, the loss comes at
/// `disconnect_grace - margin`.
#[test]
fn a_zookeeper_holder_is_told_its_stop_margin_before_the_disconnection_grace_ends() {
    let cfg = LockConfig::new(Backend::ZooKeeper);
    let grace = cfg.disconnect_grace();
    let margin = Duration::from_secs(2);
    let mut t = LockTable::new(cfg, Nonce(7)).unwrap();
    let name = LockName::new("/orders/42").unwrap();
    let opts = AcquireOptions { stop_margin: margin, ..Default::default() };
    t.acquire(T0, &name, LockMode::Exclusive, ME, opts, Nonce(9)).unwrap();
    let cmds = commands(&drain(&mut t));
    let [create, list] = cmds.as_slice() else { panic!("{cmds:?}") };
    let Op::ZooKeeper(ZkOp::CreateSequential { path, .. }) = &create.op else { panic!("{create:?}") };
    t.handle_reply(T0, create.id, Reply::Created { path: format!("{path}0000000001"), czxid: 40 });
    let ours = format!("{}0000000001", path.rsplit('/').next().unwrap());
    t.handle_reply(T0, list.id, Reply::Children(vec![ours]));
    let _ = drain(&mut t);
    let down = at(T0, Duration::from_millis(100));
    t.handle_connection(down, ConnectionEvent::Disconnected);
    let _ = drain(&mut t);
    let loss_at = at(down, grace - margin);
    t.handle_timeout(at(loss_at, Duration::ZERO).saturating_sub(Duration::from_millis(1)));
    assert!(!lost(&drain(&mut t)), "told before its stop margin");
    t.handle_timeout(loss_at);
    assert!(lost(&drain(&mut t)), "not told at the disconnection grace less the stop margin");
}

/// A margin that would report every hold lost while it is fine (past the
/// Redis renewal, past ZooKeeper's disconnection grace) is refused at the
/// acquire, and nothing reaches the server.
#[test]
fn a_stop_margin_the_backend_cannot_honour_is_refused() {
    for (backend, margin) in [(Backend::Redis, Duration::from_secs(11)), (Backend::ZooKeeper, Duration::from_secs(4))] {
        let mut t = LockTable::new(LockConfig::new(backend), Nonce(7)).unwrap();
        let name = LockName::new("/orders/42").unwrap();
        let opts = AcquireOptions { stop_margin: margin, ..Default::default() };
        let refused = t.acquire(T0, &name, LockMode::Exclusive, ME, opts, Nonce(9));
        assert!(
            matches!(&refused, Err(Error::InvalidOption(m)) if m.contains("stop margin")),
            "{backend:?}: {refused:?}"
        );
        assert!(commands(&drain(&mut t)).is_empty(), "{backend:?}: a refused acquire sent something");
    }
}
