//! Where a binding's blocking call puts the runtime's thread
//! (`polylock::blocking::near_caller`): on the caller's CPU while the call
//! is alone after a quiet spell, back on its own CPUs when calls overlap
//! or beside the caller once a busy loop is under way. No server: the calls only report where the
//! runtime's thread runs. A binary of its own: the placement is process-wide.

use std::time::Duration;

use polylock::blocking::{binding_runtime, near_caller, Slice, Sliced, BUSY_SPELL};

/// The calling thread's CPU mask, as a list of CPUs.
fn mask() -> Vec<usize> {
    // SAFETY: reads the calling thread's mask into a zeroed set.
    let set = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        assert_eq!(libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set), 0);
        set
    };
    (0..libc::CPU_SETSIZE as usize).filter(|&c| unsafe { libc::CPU_ISSET(c, &set) }).collect()
}

/// One call whose outcome is the runtime thread's mask while it runs, and
/// the caller's mask while it waits.
fn call(rt: &tokio::runtime::Runtime) -> (Vec<usize>, Vec<usize>) {
    let mut task = Sliced::spawn(rt.handle(), async { mask() });
    let caller = mask();
    match task.wait(Duration::from_secs(5)) {
        Slice::Done(runtime) => (runtime, caller),
        _ => panic!("the call did not finish"),
    }
}

#[test]
fn a_lone_call_after_quiet_runs_on_its_callers_cpu_and_overlapping_calls_spread() {
    let own = mask();
    if own.len() < 2 {
        eprintln!("skipped: one CPU, nothing to place");
        return;
    }
    if std::env::var("POLYLOCK_SPIN").is_ok() {
        eprintln!("skipped: POLYLOCK_SPIN is set");
        return;
    }
    let rt = binding_runtime("placement-test", true).unwrap();

    // A lone call after a quiet spell (none before it): both threads on the
    // caller's CPU. Made at once, before the runtime's thread has started
    // and registered itself: the placement must reach it when it does.
    let (runtime, caller) = call(&rt);
    assert_eq!(caller.len(), 1, "the waiting caller was not confined: {caller:?}");
    assert_eq!(runtime, caller, "the runtime's thread ran elsewhere than its caller's CPU");
    assert_eq!(mask(), own, "the caller did not get its own mask back");
    assert_eq!(near_caller::confined_to(), Some(caller[0] as u32));

    // Overlapping calls: the runtime's thread gets its own CPUs back. The
    // first is another thread's (a thread waits for one call at a time).
    std::thread::sleep(BUSY_SPELL * 3);
    let (gate, opened) = std::sync::mpsc::channel::<()>();
    let (started, first_started) = std::sync::mpsc::channel::<()>();
    let handle = rt.handle().clone();
    let first = std::thread::spawn(move || {
        let mut task = Sliced::spawn(&handle, async move {
            tokio::task::spawn_blocking(move || opened.recv()).await.unwrap().ok();
        });
        started.send(()).unwrap();
        matches!(task.wait(Duration::from_secs(5)), Slice::Done(()))
    });
    first_started.recv().unwrap();
    let (runtime, caller) = call(&rt);
    assert_eq!(caller, own, "a caller beside another call was confined");
    assert_eq!(runtime, own, "the runtime's thread stayed confined beside another call");
    assert_eq!(near_caller::confined_to(), None);
    gate.send(()).unwrap();
    assert!(first.join().unwrap(), "the first call did not finish");

    // A busy loop: confined for its first calls, then the runtime's thread
    // is moved beside its caller (every CPU of its own but the caller's).
    std::thread::sleep(BUSY_SPELL * 3);
    let placed: Vec<usize> = (0..near_caller::SPREAD_AFTER + 4).map(|_| call(&rt).0.len()).collect();
    assert_eq!(placed[0], 1, "a busy loop's first call was not confined: {placed:?}");
    assert_eq!(
        *placed.last().unwrap(),
        own.len() - 1,
        "a busy loop's runtime thread is not beside its caller: {placed:?}"
    );
    assert_eq!(near_caller::confined_to(), None);
}
