//! A leader election is the mutex's lifecycle in [`LockMode::Leader`]:
//! campaign = acquire, resign = release, the term = the grant's fencing
//! token. On ZooKeeper it is recorded as Curator's `LeaderLatch`
//! (`_c_<uuid>-latch-<seq>` under the election's path, the participant id as
//! the node's data), so Curator latches and polylock participants take
//! part in one election; on Redis it holds the name's mutex keys.

use polylock_core::*;
use polylock_core::{RedisOp, ZkOp};

const T0: Instant = Instant::from_millis(1_000);
const ME: OwnerId = OwnerId(1);

fn drain(t: &mut LockTable) -> Vec<Output> {
    std::iter::from_fn(|| t.poll_output()).collect()
}

fn commands(outs: &[Output]) -> Vec<Command> {
    outs.iter().filter_map(|o| if let Output::Command(c) = o { Some(c.clone()) } else { None }).collect()
}

fn events(outs: &[Output]) -> Vec<Event> {
    outs.iter().filter_map(|o| if let Output::Event { event, .. } = o { Some(event.clone()) } else { None }).collect()
}

fn campaign(t: &mut LockTable, name: &LockName, owner: OwnerId) -> Result<Ticket, Error> {
    t.acquire(T0, name, LockMode::Leader, owner, AcquireOptions::default(), Nonce(9))
}

/// A campaign creates a protected `latch-` node whose data is the
/// participant's id, lists the latch's children in the same round trip,
/// and leads when its node sorts first among every child (Curator's
/// latches' included, by the sequence after `latch-`): its term is the
/// node's czxid.
#[test]
fn a_zookeeper_campaign_writes_curators_latch_layout_and_leads_when_first() {
    let mut t = LockTable::new(LockConfig::new(Backend::ZooKeeper), Nonce(7)).unwrap();
    let name = LockName::new("/services/scheduler").unwrap();
    let ticket = campaign(&mut t, &name, ME).unwrap();
    let cmds = commands(&drain(&mut t));
    let [create, list] = cmds.as_slice() else { panic!("{cmds:?}") };
    let Op::ZooKeeper(ZkOp::CreateSequential { path, data }) = &create.op else { panic!("{create:?}") };
    let node = path.strip_prefix("/services/scheduler/").expect("under the election's path");
    assert!(node.starts_with("_c_") && node.ends_with("-latch-"), "not a protected latch node: {node}");
    assert_eq!(data, t.holder_id(ME).as_bytes(), "the node's data is the participant's id");
    assert!(matches!(&list.op, Op::ZooKeeper(ZkOp::WatchChildren { path }) if path == "/services/scheduler"));

    let ours = format!("{node}0000000004");
    t.handle_reply(T0, create.id, Reply::Created { path: format!("{path}0000000004"), czxid: 77 });
    // A Curator latch that came later (sequence 5) and one that left a gap:
    // ours sorts first by the sequence after `latch-`, whatever the uuids.
    let curator_later = "_c_00000000-0000-0000-0000-000000000000-latch-0000000005".to_owned();
    t.handle_reply(T0, list.id, Reply::Children(vec![curator_later, ours]));
    assert_eq!(
        events(&drain(&mut t)),
        vec![Event::Granted { ticket, owner: ME, token: FencingToken(77), reentry: 0 }],
        "first in sequence order leads, with its node's czxid as the term"
    );
}

/// Behind a Curator latch, a participant watches its immediate
/// predecessor and leads once that node is gone.
#[test]
fn a_zookeeper_participant_behind_a_curator_latch_leads_after_it_goes() {
    let mut t = LockTable::new(LockConfig::new(Backend::ZooKeeper), Nonce(7)).unwrap();
    let name = LockName::new("/services/scheduler").unwrap();
    let ticket = campaign(&mut t, &name, ME).unwrap();
    let cmds = commands(&drain(&mut t));
    let [create, list] = cmds.as_slice() else { panic!("{cmds:?}") };
    let Op::ZooKeeper(ZkOp::CreateSequential { path, .. }) = &create.op else { panic!("{create:?}") };
    let ours = format!("{}0000000008", path.rsplit('/').next().unwrap());
    t.handle_reply(T0, create.id, Reply::Created { path: format!("{path}0000000008"), czxid: 90 });
    let leader = "_c_11111111-2222-3333-4444-555555555555-latch-0000000003".to_owned();
    t.handle_reply(T0, list.id, Reply::Children(vec![ours.clone(), leader.clone()]));
    let outs = drain(&mut t);
    assert!(events(&outs).is_empty(), "led while a latch sorts before it: {outs:?}");
    let watch = commands(&outs)
        .into_iter()
        .find(|c| matches!(&c.op, Op::ZooKeeper(ZkOp::Stat { path, watch: true }) if path.ends_with(&leader)))
        .expect("a watch on the leader's node, the immediate predecessor");
    t.handle_reply(T0, watch.id, Reply::Stat { czxid: 30 });
    let _ = drain(&mut t);
    t.handle_notification(T0, Notification::WatchFired { id: watch.id });
    let outs = drain(&mut t);
    // Next in line it may lead at once (its own node is watched) or list again first.
    let granted = match commands(&outs).into_iter().find(|c| matches!(c.op, Op::ZooKeeper(ZkOp::GetChildren { .. }))) {
        Some(relist) => {
            t.handle_reply(T0, relist.id, Reply::Children(vec![ours]));
            events(&drain(&mut t))
        }
        None => events(&outs),
    };
    assert_eq!(granted, vec![Event::Granted { ticket, owner: ME, token: FencingToken(90), reentry: 0 }]);
}

/// A leadership is not re-entrant on either backend: a participant that
/// leads, or campaigns, is refused a second campaign, and the first one
/// is left as it was.
#[test]
fn a_second_campaign_of_one_participant_is_refused() {
    for backend in [Backend::Redis, Backend::ZooKeeper] {
        let mut t = LockTable::new(LockConfig::new(backend), Nonce(7)).unwrap();
        let name = LockName::new("/services/scheduler").unwrap();
        campaign(&mut t, &name, ME).unwrap();
        let first = commands(&drain(&mut t));
        assert!(!first.is_empty());
        let again = campaign(&mut t, &name, ME);
        assert!(matches!(again, Err(Error::InvalidOption(_))), "{backend:?}: {again:?}");
        assert!(drain(&mut t).is_empty(), "{backend:?}: the refused campaign sent something");
        // Another participant of the same client may campaign (it queues behind).
        campaign(&mut t, &name, OwnerId(2)).unwrap();
    }
}

/// On Redis the leader holds the name's mutex: the same acquire script on
/// the same keys, so the term is the mutex's fencing token.
#[test]
fn a_redis_campaign_runs_the_mutex_acquire_on_the_names_keys() {
    let name = LockName::new("scheduler").unwrap();
    let mut t = LockTable::new(LockConfig::new(Backend::Redis), Nonce(7)).unwrap();
    campaign(&mut t, &name, ME).unwrap();
    let lead = commands(&drain(&mut t));
    let mut m = LockTable::new(LockConfig::new(Backend::Redis), Nonce(7)).unwrap();
    m.acquire(T0, &name, LockMode::Exclusive, ME, AcquireOptions::default(), Nonce(9)).unwrap();
    let lock = commands(&drain(&mut m));
    let script_and_keys = |cmds: &[Command]| -> Vec<(&'static str, Vec<String>)> {
        cmds.iter()
            .map(|c| match &c.op {
                Op::Redis(RedisOp::Eval { script, keys, .. }) => (script.name, keys.clone()),
                other => panic!("{other:?}"),
            })
            .collect()
    };
    assert_eq!(script_and_keys(&lead), script_and_keys(&lock));
}
