mod sim;
use polylock_core::Backend;
use sim::*;

#[test]
fn smoke_redis() {
    for seed in 0..200 {
        let out = World::new(Scenario::new(Backend::Redis), seed).run();
        check_liveness(&out).unwrap();
        check_no_overlap(&out).unwrap();
        check_fencing(&out).unwrap();
        assert_eq!(out.leftovers, 0, "seed {seed}");
        // Scripts go by SHA1, and the server starts with none cached.
        assert!(out.noscripts > 0, "seed {seed}: no script was refused NOSCRIPT");
    }
}

#[test]
fn smoke_zk() {
    for seed in 0..200 {
        let out = World::new(Scenario::new(Backend::ZooKeeper), seed).run();
        check_liveness(&out).unwrap();
        check_no_overlap(&out).unwrap();
        check_fencing(&out).unwrap();
        assert_eq!(out.leftovers, 0, "seed {seed}");
    }
}

#[test]
fn debug_print() {
    for b in [Backend::Redis, Backend::ZooKeeper] {
        let out = World::new(Scenario::new(b), 3).run();
        eprintln!(
            "{b:?}: beliefs={} writes={} rejected={} grants={} wake={} releases={} steps={} end={} fin={:?}",
            out.beliefs.len(),
            out.accepted_writes.len(),
            out.rejected_writes,
            out.server_grants.len(),
            out.wake_retries,
            out.releases,
            out.steps,
            out.end_ms,
            out.finished
        );
    }
}

#[test]
#[ignore]
fn replay() {
    let seed: u64 = std::env::var("SEED").unwrap().parse().unwrap();
    let b = if std::env::var("ZK").is_ok() { Backend::ZooKeeper } else { Backend::Redis };
    let mut sc = Scenario::new(b);
    let mut rng = sim::Rng::new(seed.rotate_left(17));
    sc.clients = rng.range(2, 6) as usize;
    sc.cycles = rng.range(1, 4) as usize;
    sc.faults.max_delay_ms = rng.range(0, 20);
    sc.faults = Faults {
        max_delay_ms: sc.faults.max_delay_ms,
        drop_per_mille: 30,
        dup_per_mille: 100,
        pauses: std::env::var("PAUSES").is_ok(),
        crashes: true,
        expiries: std::env::var("PAUSES").is_ok(),
        disconnects: true,
        partitions: std::env::var("PAUSES").is_ok(),
        refuse_per_mille: 30,
        rollbacks: std::env::var("ROLLBACKS").is_ok(),
        evictions: std::env::var("ROLLBACKS").is_ok(),
        uncounted_suspends: false,
    };
    sc.deadline_per_mille = 150;
    sc.no_wait_per_mille = 100;
    sc.cancel_per_mille = 100;
    let out = World::new(sc, seed).run();
    eprintln!("{:?}", check_no_overlap(&out));
    eprintln!("leftovers {}", out.leftovers);
}
