//! ZooKeeper loss deadlines, step by step on one machine: every way into
//! Held must know whether the connection is down and since when.

use polylock_core::ZkOp;
use polylock_core::{
    AcquireOptions, Backend, ConnectionEvent, Event, FencingToken, Instant, LockConfig, LockMachine, LockName,
    LossReason, Nonce, Op, OwnerId, Reply,
};

const OWNER: OwnerId = OwnerId(1);

fn machine() -> (LockMachine, LockConfig) {
    let cfg = LockConfig::new(Backend::ZooKeeper);
    let m = LockMachine::new(cfg.clone(), LockName::new("/x").unwrap(), Nonce(1)).unwrap();
    (m, cfg)
}

/// Starts an acquire at `t`; the create is answered at once. Returns the
/// pending getChildren's id and the one child that makes us first.
fn create_answered(m: &mut LockMachine, t: Instant) -> (polylock_core::RequestId, String) {
    m.acquire(t, OWNER, AcquireOptions::default(), Nonce(2)).unwrap();
    let create = m.poll_command().unwrap();
    let list = m.poll_command().unwrap();
    let Op::ZooKeeper(ZkOp::CreateSequential { path, .. }) = &create.op else { panic!("{create:?}") };
    let node = format!("{path}0000000007");
    let child = node.rsplit('/').next().unwrap().to_owned();
    m.handle_reply(t, create.id, Reply::Created { path: node, czxid: 40 });
    assert_eq!(m.poll_event(), None);
    (list.id, child)
}

/// The list that makes us first is processed after the disconnection was
/// reported (the reply and the session's state travel separate paths). The
/// grant must carry the loss deadline the holder would have had if it had
/// held the lock when the connection went down, and the loss must come
/// before the server can expire the session (a session timeout after it
/// last heard from us, which was no later than the create's reply).
#[test]
fn a_grant_processed_while_disconnected_gets_the_loss_deadline() {
    let (mut m, cfg) = machine();
    let last_contact = Instant::from_millis(1_000);
    let (list, child) = create_answered(&mut m, last_contact);
    let down = Instant::from_millis(1_100);
    m.handle_connection(down, ConnectionEvent::Disconnected);
    let granted_at = Instant::from_millis(1_150);
    m.handle_reply(granted_at, list, Reply::Children(vec![child]));
    assert!(matches!(m.poll_event(), Some(Event::Granted { .. })));

    let loss_at = down.saturating_add(cfg.disconnect_grace());
    assert!(
        loss_at < last_contact.saturating_add(cfg.session_timeout),
        "the loss deadline must pass before the server can expire the session"
    );
    let next = m.poll_timeout().expect("a held ZooKeeper claim always has a deadline");
    assert!(next <= loss_at, "the next deadline {next:?} comes after the loss deadline {loss_at:?}");
    // Run every deadline up to the loss deadline, as a driver would.
    while let Some(t) = m.poll_timeout().filter(|t| *t <= loss_at) {
        m.handle_timeout(t);
    }
    assert_eq!(
        m.poll_event(),
        Some(Event::Lost { owner: OWNER, token: FencingToken(40), reason: LossReason::Disconnected }),
        "a holder granted while disconnected was not told of the loss by the disconnection deadline"
    );
}

/// When the list arrives after the disconnection deadline itself has
/// passed, the claim is not granted at all: it waits for the connection
/// (the same session resumed: look again) or the expiry.
#[test]
fn a_grant_after_the_disconnection_deadline_waits_for_the_session() {
    let (mut m, cfg) = machine();
    let (list, child) = create_answered(&mut m, Instant::from_millis(1_000));
    let down = Instant::from_millis(1_100);
    m.handle_connection(down, ConnectionEvent::Disconnected);
    let late = down.saturating_add(cfg.disconnect_grace()).saturating_add(std::time::Duration::from_millis(1));
    m.handle_reply(late, list, Reply::Children(vec![child.clone()]));
    assert_eq!(m.poll_event(), None, "granted although the session may already be gone");

    let back = late.saturating_add(std::time::Duration::from_millis(50));
    m.handle_connection(back, ConnectionEvent::Connected);
    let relist = m.poll_command().expect("the claim looks again once connected");
    assert!(matches!(relist.op, Op::ZooKeeper(ZkOp::GetChildren { .. })), "{relist:?}");
    m.handle_reply(back, relist.id, Reply::Children(vec![child]));
    assert!(matches!(m.poll_event(), Some(Event::Granted { token: FencingToken(40), .. })));
}

/// A claim that starts while the connection is already down learns it from
/// the machine: its grant gets the deadline of the original disconnection.
#[test]
fn a_claim_started_while_disconnected_counts_from_the_disconnection() {
    let (mut m, cfg) = machine();
    let down = Instant::from_millis(500);
    m.handle_connection(down, ConnectionEvent::Disconnected);
    let (list, child) = create_answered(&mut m, Instant::from_millis(600));
    m.handle_reply(Instant::from_millis(650), list, Reply::Children(vec![child]));
    assert!(matches!(m.poll_event(), Some(Event::Granted { .. })));
    let loss_at = down.saturating_add(cfg.disconnect_grace());
    while let Some(t) = m.poll_timeout().filter(|t| *t <= loss_at) {
        m.handle_timeout(t);
    }
    assert!(
        matches!(m.poll_event(), Some(Event::Lost { reason: LossReason::Disconnected, .. })),
        "a claim begun during a disconnection was not given its loss deadline"
    );
}

/// The disconnection margin against zookeeper-client 0.11's detection delay
/// (see `LockConfig::disconnect_grace`): reported at most 9/20 of the
/// session timeout after the last contact, plus the grace, must leave a
/// tenth of the session timeout before the server may expire it, from the
/// 100 ms minimum to a long session.
#[test]
fn the_disconnection_grace_leaves_room_for_the_clients_detection_delay() {
    for ms in [100, 250, 1_000, 2_000, 10_000, 40_000, 600_000] {
        let mut cfg = LockConfig::new(Backend::ZooKeeper);
        cfg.session_timeout = std::time::Duration::from_millis(ms);
        let detected = cfg.session_timeout * 9 / 20;
        let told = detected + cfg.disconnect_grace();
        assert!(
            told + cfg.session_timeout / 10 <= cfg.session_timeout,
            "session {ms} ms: told {} ms after the last contact",
            told.as_millis()
        );
    }
}
