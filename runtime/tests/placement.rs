//! Where a binding's blocking call puts the runtime's thread
//! (`polylock::blocking::near_caller`): on the caller's CPU while the call
//! is alone after a quiet spell, back on its own CPUs when calls overlap
//! or beside the caller once a busy loop is under way. No server: the calls only report where the
//! runtime's thread runs (and, beside busy processes, a real Redis). A binary of its own: the placement is
//! process-wide.

mod support;

use std::time::{Duration, Instant};

use polylock::blocking::{binding_runtime, hot_worker, near_caller, Slice, Sliced, BUSY_SPELL};

/// The placement is process-wide: one test at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// This test's turn and the calling thread's CPUs, or `None` (said why)
/// where placement cannot be seen.
fn placeable() -> Option<(std::sync::MutexGuard<'static, ()>, Vec<usize>)> {
    let serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let own = mask();
    let why = if own.len() < 2 {
        "one CPU, nothing to place"
    } else if std::env::var("POLYLOCK_SPIN").is_ok() {
        "POLYLOCK_SPIN is set"
    } else {
        return Some((serial, own));
    };
    eprintln!("skipped: {why}");
    None
}

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
    let Some((_serial, own)) = placeable() else { return };
    // Quiet, whichever test ran before.
    std::thread::sleep(BUSY_SPELL * 3);
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

/// A thread's mask, read from /proc (any thread of this process).
fn mask_of(tid: libc::pid_t) -> Vec<usize> {
    let status = std::fs::read_to_string(format!("/proc/self/task/{tid}/status")).unwrap();
    let list = status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).unwrap().trim().to_owned();
    list.split(',')
        .flat_map(|part| match part.split_once('-') {
            Some((a, b)) => (a.parse().unwrap()..=b.parse().unwrap()).collect::<Vec<usize>>(),
            None => vec![part.parse().unwrap()],
        })
        .collect()
}

#[test]
fn an_event_loops_lone_call_wakes_it_on_its_cpu_and_gives_its_cpus_back() {
    let Some((_serial, own)) = placeable() else { return };
    let rt = binding_runtime("placement-loop-test", true).unwrap();
    // Lets the runtime's thread register itself.
    rt.block_on(rt.spawn(async {})).unwrap();
    std::thread::sleep(BUSY_SPELL * 3);

    // A lone call after quiet: this thread, the loop's, goes on running
    // while its call is out; the runtime's thread runs on its CPU.
    let placed = near_caller::loop_wakeups_placed();
    let call = near_caller::enter_from_event_loop();
    assert_eq!(mask(), own, "the loop's thread was confined while its call is out");
    let (runtime, mut call) = rt
        .block_on(rt.spawn(hot_worker::call(async move {
            let runtime = mask();
            let mut call = call;
            call.before_waking_caller();
            (runtime, call)
        })))
        .unwrap();
    assert_eq!(runtime.len(), 1, "the runtime's thread was not on one CPU: {runtime:?}");
    // Handed over: confined to the CPU it began on, for its wake-up.
    let confined = mask();
    assert_eq!(confined, runtime, "not woken on its call's CPU");
    assert_eq!(near_caller::loop_wakeups_placed(), placed + 1);
    // A thread started now inherits that one CPU...
    let (tid_tx, tid_rx) = std::sync::mpsc::channel();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let child = std::thread::spawn(move || {
        // SAFETY: no preconditions.
        tid_tx.send(unsafe { libc::gettid() }).unwrap();
        done_rx.recv().ok();
    });
    let tid = tid_rx.recv().unwrap();
    assert_eq!(mask_of(tid), confined);
    // ...and both get their CPUs back once the outcome is taken.
    drop(call);
    assert_eq!(mask(), own, "the loop's thread did not get its own mask back");
    assert_eq!(mask_of(tid), own, "a thread started while confined kept the one CPU");
    // The runtime's thread is placed there, not confined by inheritance: it stays.
    let still = rt.block_on(rt.spawn(async { mask() })).unwrap();
    assert_eq!(still, runtime, "widening the new threads moved the runtime's thread too");
    done_tx.send(()).unwrap();
    child.join().unwrap();

    // A call beside another: nothing is confined.
    std::thread::sleep(BUSY_SPELL * 3);
    let first = near_caller::enter_from_event_loop();
    call = near_caller::enter_from_event_loop();
    call.before_waking_caller();
    assert_eq!(mask(), own, "a call beside another confined its caller");
    drop((first, call));
}

/// Processes that keep the CPUs busy at the lowest priority, one per CPU,
/// until dropped (a failed assertion included).
struct Hogs(Vec<std::process::Child>);

impl Hogs {
    fn start(cpus: usize) -> Hogs {
        Hogs(
            (0..cpus)
                .map(|_| {
                    std::process::Command::new("nice")
                        .args(["-n", "19", "sh", "-c", "while :; do :; done"])
                        .spawn()
                        .expect("nice and sh start a busy process")
                })
                .collect(),
        )
    }
}

impl Drop for Hogs {
    fn drop(&mut self) {
        for h in &mut self.0 {
            let _ = h.kill();
            let _ = h.wait();
        }
    }
}

/// Beside processes that keep every CPU busy (batch work at a low
/// priority, say), a spinner that yields its core gives it away for a whole time
/// slice, and one confined to a CPU waits out a slice per poll: a Python
/// busy loop took 3.86 ms per acquire+release here against redis-py's 90 µs.
/// After a yield that came back that late, nothing spins or is placed for a
/// while (`spin::yield_core`). Counted: calls that took a time slice.
#[test]
fn a_busy_loop_beside_busy_cpus_is_not_held_up_by_spinning_or_placement() {
    let Some((_serial, own)) = placeable() else { return };
    let rt = binding_runtime("placement-busy-cpus", true).unwrap();
    let client = rt.block_on(support::client(&support::redis_url()));
    let lock = client.lock(&support::unique("placement-busy-cpus")).unwrap();
    let pair = |lock: &polylock::Lock| {
        let lock = lock.clone();
        let mut task =
            Sliced::spawn(rt.handle(), async move { lock.acquire().await.unwrap().release().await.unwrap() });
        let start = Instant::now();
        assert!(matches!(task.wait(Duration::from_secs(10)), Slice::Done(())), "the call did not finish");
        start.elapsed()
    };
    (0..50).for_each(|_| {
        pair(&lock);
    });
    let hogs = Hogs::start(own.len());
    let contended = polylock::blocking::contended_yields();
    let calls = 300;
    let slow = (0..calls).filter(|_| pair(&lock) >= Duration::from_millis(2)).count();
    drop(hogs);
    let contended = polylock::blocking::contended_yields() - contended;
    assert!(
        slow <= calls / 10,
        "{slow} of {calls} acquire+release beside busy CPUs took a time slice or more ({contended} contended yields seen)"
    );
    rt.block_on(client.close());
    // The other tests of this binary place threads: let the contention pass.
    std::thread::sleep(polylock::blocking::CONTENDED_FOR);
}
