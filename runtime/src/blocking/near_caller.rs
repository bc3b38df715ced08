//! Keeping the runtime's thread on its caller's CPU while a blocking call
//! is the process's only one, and beside it in a busy loop.
//!
//! A blocking call crosses from the caller's thread to the runtime's and
//! back. When the two threads sit on different CPUs after a quiet spell,
//! each crossing wakes an idle CPU, and on a virtual machine an idle CPU is
//! halted: its wake-up goes through the hypervisor. On the 2-core benchmark
//! VM a Python acquire+release paced 10 ms apart took 521 µs at p50, and
//! 125 µs with the process confined to one CPU (`taskset -c 0`), where
//! redis-py, whose caller's thread does its own I/O, took 150 µs.
//!
//! So a call alone in flight, quiet or right after one (fewer than
//! [`SPREAD_AFTER`] calls in a row in a busy spell: an acquire and its
//! release), confines its caller's thread and the runtime's to the CPU the
//! caller is on until the caller has its outcome: the caller blocks on the
//! answer, which frees that CPU for the runtime's thread, and the answer
//! wakes the caller where the runtime's thread has just run. The caller gets
//! its own mask back with its outcome; the runtime's thread stays until the
//! next call places it. In a busy loop (the calls after those) spinning
//! keeps the CPUs awake ([`super::hot_worker`], [`super::spin`]) and two
//! threads on one CPU only take turns, so the runtime's thread is moved
//! beside its caller, to every CPU of its own but the caller's (merely
//! allowed to leave, it stayed, at 113 µs per Python acquire+release
//! against 48 moved). When calls overlap it gets its own mask back.
//!
//! The Python binding places its calls; the JVM's does not: a JVM runs its
//! JIT compiler, its collector and other libraries' threads beside the
//! caller, and a thread confined to one CPU waits behind whichever of them
//! runs there (its Redis lock+unlock went from 45 to 89 µs at p50 and from
//! 477 µs to 8.2 ms at p99 with placement). Node's event-loop thread is not
//! blocked while its call is out: it is kept on its CPU only for the
//! outcome's wake-up ([`EventLoopCall`]).
//!
//! Python, paced 10 ms apart: 521 → 158–185 µs per acquire+release (redis-py
//! 123–136); paced 2 ms: 283 → 104–122 (redis-py 102–108); a busy loop 48–53
//! (redis-py 240). `bench/python/bench.py`'s paced rows measure it;
//! `runtime/tests/placement.rs` checks the placements. A placement hint,
//! never a lock decision: a caller that finds another placing the threads
//! leaves it, and the next call puts it right. `POLYLOCK_SPIN=0` turns it
//! off with the spinning (both trade the process's freedom of placement or
//! CPU for latency). A thread the runtime's thread starts while confined
//! (tokio's blocking pool) inherits its mask. Linux only; elsewhere nothing
//! is placed.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use super::spin::spinning_allowed;

/// Calls in a row each begun in a busy spell, from which on the runtime's
/// thread is moved beside its caller (see the module docs): an acquire and
/// its release stay together.
pub const SPREAD_AFTER: u32 = 2;

/// Whether a binding's runtime asked for placement ([`enable`]).
static ENABLED: AtomicBool = AtomicBool::new(false);

/// Turns placement on for this process ([`super::binding_runtime`] does).
pub fn enable() {
    ENABLED.store(true, Ordering::Relaxed);
}

/// Calls in a row begun in a busy spell.
static STREAK: AtomicU32 = AtomicU32::new(0);
/// When a call last began beside another (ns since the spin module's epoch; 0: never).
static LAST_OVERLAP: AtomicU64 = AtomicU64::new(0);
/// Calls begun through [`enter`] and not yet ended.
static CALLS: AtomicUsize = AtomicUsize::new(0);
/// Where the runtime's threads are ([`Place::encode`]).
static PLACED: AtomicI32 = AtomicI32::new(-1);
/// The runtime's threads ([`register_runtime_thread`]) and their own CPU
/// masks; held while their placement changes.
static THREADS: Mutex<Vec<(os::Tid, os::Mask)>> = Mutex::new(Vec::new());

/// Registers the calling thread as one of the runtime's
/// ([`super::binding_runtime`] does, from its worker).
pub fn register_runtime_thread() {
    if let Some(own) = os::own_mask() {
        let mut threads = THREADS.lock().unwrap_or_else(|p| p.into_inner());
        // A call may have placed the runtime's threads before this one
        // registered (the first call comes as the runtime starts).
        let place = Place::decode(PLACED.load(Ordering::Relaxed));
        if place != Place::Own {
            os::set_mask(os::tid(), &place.mask(&own));
        }
        threads.push((os::tid(), own));
    }
}

/// One blocking call, from its beginning on the caller's thread until the
/// caller has its outcome (the caller's mask is restored by thread id, so
/// the thread that drops it does not matter).
#[must_use = "the call counts as in flight until this is dropped"]
pub struct Placement {
    /// The caller's thread and its own mask, while it is confined.
    caller: Option<(os::Tid, os::Mask)>,
}

/// What a call beginning now does with the threads (see the module docs).
enum Decision {
    /// Placement is off: nothing.
    Leave,
    /// Calls overlap: the runtime's threads on their own masks.
    Own,
    /// A busy loop: the runtime's threads beside the caller's CPU.
    Beside(i32),
    /// A lone call, quiet or right after one: the caller's CPU.
    Near(i32),
}

/// Counts a call in and decides where it runs, on the calling thread.
fn begin_call() -> Decision {
    let alone = CALLS.fetch_add(1, Ordering::Relaxed) == 0;
    if !ENABLED.load(Ordering::Relaxed) || !spinning_allowed() {
        return Decision::Leave;
    }
    let streak = if super::hot_worker::in_busy_spell_now() {
        STREAK.fetch_add(1, Ordering::Relaxed).saturating_add(1)
    } else {
        STREAK.store(0, Ordering::Relaxed);
        0
    };
    let cpu = os::current_cpu();
    let now = super::spin::nanos_since_epoch();
    if !alone {
        LAST_OVERLAP.store(now, Ordering::Relaxed);
    }
    // Other processes keep the cores busy: a thread confined to one waits
    // behind them (see `spin::yield_core`); none is confined for a while.
    if !super::spin::cores_free() {
        return Decision::Own;
    }
    // A call alone for a moment among overlapping ones (threads taking
    // turns) leaves the threads where they are: placing them back and forth
    // would move the runtime's thread as it runs. With this rule, 16 Python
    // threads made 19.8k acquire+release/s against 20.5k with placement off
    // (8 runs each, within noise); it was not measured without the rule.
    if !alone || cpu < 0 || super::spin::in_busy_spell(LAST_OVERLAP.load(Ordering::Relaxed), now) {
        Decision::Own
    } else if streak >= SPREAD_AFTER {
        Decision::Beside(cpu)
    } else {
        Decision::Near(cpu)
    }
}

/// A blocking call begins on the calling thread (see the module docs).
pub fn enter() -> Placement {
    let mut placement = Placement { caller: None };
    match begin_call() {
        Decision::Leave => {}
        Decision::Own => place_runtime(Place::Own),
        Decision::Beside(cpu) => place_runtime(Place::Beside(cpu)),
        Decision::Near(cpu) => {
            if let Some(own) = os::own_mask() {
                let tid = os::tid();
                if os::set_mask(tid, &os::only(cpu)) {
                    placement.caller = Some((tid, own));
                    place_runtime(Place::On(cpu));
                }
            }
        }
    }
    placement
}

impl Drop for Placement {
    fn drop(&mut self) {
        if let Some((tid, own)) = self.caller.take() {
            os::set_mask(tid, &own);
        }
        CALLS.fetch_sub(1, Ordering::Relaxed);
    }
}

/// One call from an event loop's thread (Node's), from its beginning there
/// until its outcome is back there. The runtime's thread is placed as for
/// a blocking call. Unlike a blocking caller, the loop's thread goes on
/// running the loop while its call is out, so it is not confined then: a
/// thread it started would inherit the one CPU. What costs a lone call
/// after quiet is where the outcome wakes it: the runtime's thread wakes it
/// while still running on its CPU, so the kernel puts it on the other, idle
/// one (halted, on a virtual machine), where its caches are cold. So just
/// before the outcome is handed over ([`EventLoopCall::before_waking_caller`])
/// the loop's thread is confined to the CPU it began the call on, and it
/// gets its own mask back as it takes the outcome (this is dropped there).
/// A thread it starts in that moment inherits the one CPU: a drop that
/// finds more threads in the process than at the hand-over gives every
/// other thread confined to just that CPU, but the runtime's (placed
/// there), the loop's own mask (a thread the process pinned to exactly that
/// CPU itself would lose its pin then).
///
/// Node, `status()` paced 10 ms apart: 413–456 → 119–135 µs at p50; an
/// acquire+release (`bench/node/paced.mjs 10`, old and new addon taking
/// turns, 4 runs each): 619–637 → 376–429 µs; without the runtime's thread
/// placed, 50–140 µs more (3 runs each). ioredis' SET NX plus a compare-
/// and-delete script took 150–250 µs in the same runs.
#[must_use = "the call counts as in flight until this is dropped"]
pub struct EventLoopCall {
    caller: Option<LoopCaller>,
}

struct LoopCaller {
    tid: os::Tid,
    own: os::Mask,
    cpu: i32,
    /// Threads of the process when the caller was confined (0: not confined).
    threads: usize,
}

/// A call begins on an event loop's thread (see [`EventLoopCall`]).
pub fn enter_from_event_loop() -> EventLoopCall {
    let mut call = EventLoopCall { caller: None };
    let decision = begin_call();
    match decision {
        Decision::Leave => {}
        Decision::Own => place_runtime(Place::Own),
        Decision::Beside(cpu) => place_runtime(Place::Beside(cpu)),
        Decision::Near(cpu) => place_runtime(Place::On(cpu)),
    }
    if let Decision::Near(cpu) = decision {
        call.caller = os::own_mask().map(|own| LoopCaller { tid: os::tid(), own, cpu, threads: 0 });
    }
    call
}

/// Times a caller was confined for its outcome's wake-up: what the Node
/// binding's tests count.
static LOOP_WAKEUPS_PLACED: AtomicU64 = AtomicU64::new(0);

/// How many event-loop calls had their caller confined for the wake-up so far.
pub fn loop_wakeups_placed() -> u64 {
    LOOP_WAKEUPS_PLACED.load(Ordering::Relaxed)
}

impl EventLoopCall {
    /// Call on the runtime's thread with the outcome in hand, just before
    /// it is handed to the loop's thread.
    pub fn before_waking_caller(&mut self) {
        if let Some(c) = &mut self.caller {
            let threads = os::thread_count();
            if threads > 0 && os::set_mask(c.tid, &os::only(c.cpu)) {
                c.threads = threads;
                LOOP_WAKEUPS_PLACED.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

impl Drop for EventLoopCall {
    fn drop(&mut self) {
        if let Some(c) = self.caller.take().filter(|c| c.threads > 0) {
            os::set_mask(c.tid, &c.own);
            if os::thread_count() > c.threads {
                // Not the runtime's threads: they are placed on that CPU.
                let threads = THREADS.lock().unwrap_or_else(|p| p.into_inner());
                let mut except: Vec<os::Tid> = threads.iter().map(|(tid, _)| *tid).collect();
                drop(threads);
                except.push(c.tid);
                os::widen_threads_confined_to(c.cpu, &c.own, &except);
            }
        }
        CALLS.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The CPU the runtime's threads are confined to, or `None`: what
/// `runtime/tests/placement.rs` checks.
pub fn confined_to() -> Option<u32> {
    match Place::decode(PLACED.load(Ordering::Relaxed)) {
        Place::On(cpu) => u32::try_from(cpu).ok(),
        _ => None,
    }
}

/// Where the runtime's threads are.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Place {
    /// Their own masks.
    Own,
    /// Only this CPU, the lone caller's.
    On(i32),
    /// Their own masks but this CPU, the lone caller's in a busy loop: moved
    /// off it, not only allowed to leave it (a thread confined with its
    /// caller stayed there with its mask widened, and the two took turns on
    /// one CPU: 113 µs per Python acquire+release against 57 apart).
    Beside(i32),
}

impl Place {
    fn encode(self) -> i32 {
        match self {
            Place::Own => -1,
            Place::On(cpu) => cpu,
            Place::Beside(cpu) => -2 - cpu,
        }
    }

    fn decode(v: i32) -> Place {
        match v {
            -1 => Place::Own,
            v if v >= 0 => Place::On(v),
            v => Place::Beside(-2 - v),
        }
    }

    fn mask(self, own: &os::Mask) -> os::Mask {
        match self {
            Place::Own => *own,
            Place::On(cpu) => os::only(cpu),
            Place::Beside(cpu) => os::without(own, cpu).unwrap_or(*own),
        }
    }
}

/// Places the runtime's threads.
fn place_runtime(place: Place) {
    if place.encode() == PLACED.load(Ordering::Relaxed) {
        return;
    }
    // Another caller is placing them: its placement stands until the next call.
    let Ok(threads) = THREADS.try_lock() else { return };
    for (tid, own) in threads.iter() {
        os::set_mask(*tid, &place.mask(own));
    }
    PLACED.store(place.encode(), Ordering::Relaxed);
}

#[cfg(target_os = "linux")]
mod os {
    pub(super) type Tid = libc::pid_t;
    pub(super) type Mask = libc::cpu_set_t;
    const SIZE: usize = std::mem::size_of::<Mask>();

    pub(super) fn tid() -> Tid {
        // SAFETY: no preconditions.
        unsafe { libc::gettid() }
    }

    /// The calling thread's CPU, or -1.
    pub(super) fn current_cpu() -> i32 {
        // SAFETY: no preconditions.
        unsafe { libc::sched_getcpu() }
    }

    pub(super) fn own_mask() -> Option<Mask> {
        // SAFETY: reads the calling thread's mask into a zeroed set.
        unsafe {
            let mut own: Mask = std::mem::zeroed();
            (libc::sched_getaffinity(0, SIZE, &mut own) == 0).then_some(own)
        }
    }

    pub(super) fn only(cpu: i32) -> Mask {
        // SAFETY: a zeroed set with one CPU added.
        unsafe {
            let mut one: Mask = std::mem::zeroed();
            libc::CPU_SET(cpu as usize, &mut one);
            one
        }
    }

    /// `mask` without `cpu`, or `None` if nothing is left.
    pub(super) fn without(mask: &Mask, cpu: i32) -> Option<Mask> {
        let mut rest = *mask;
        // SAFETY: clears one CPU of a set we own, then counts the set.
        unsafe {
            libc::CPU_CLR(cpu as usize, &mut rest);
            (libc::CPU_COUNT(&rest) > 0).then_some(rest)
        }
    }

    /// Sets `tid`'s mask. A CPU the thread may not use (outside its
    /// cpuset) fails and leaves it as it was.
    pub(super) fn set_mask(tid: Tid, mask: &Mask) -> bool {
        // SAFETY: a thread of this process and a mask of ours.
        unsafe { libc::sched_setaffinity(tid, SIZE, mask) == 0 }
    }

    /// The process's threads (0: unknown). One `stat`: procfs counts a
    /// directory's links as its entries plus two.
    pub(super) fn thread_count() -> usize {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata("/proc/self/task").map_or(0, |m| (m.nlink() as usize).saturating_sub(2))
    }

    /// Gives every thread of the process but those in `except` whose mask
    /// is only `cpu` the mask `to`.
    pub(super) fn widen_threads_confined_to(cpu: i32, to: &Mask, except: &[Tid]) {
        let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return };
        let one = only(cpu);
        for tid in tasks.flatten().filter_map(|t| t.file_name().to_str()?.parse::<Tid>().ok()) {
            // SAFETY: reads a thread's mask into a zeroed set.
            let confined = unsafe {
                let mut m: Mask = std::mem::zeroed();
                libc::sched_getaffinity(tid, SIZE, &mut m) == 0 && libc::CPU_EQUAL(&m, &one)
            };
            if confined && !except.contains(&tid) {
                set_mask(tid, to);
            }
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod os {
    pub(super) type Tid = ();
    pub(super) type Mask = ();

    pub(super) fn tid() -> Tid {}

    pub(super) fn current_cpu() -> i32 {
        -1
    }

    pub(super) fn own_mask() -> Option<Mask> {
        None
    }

    pub(super) fn only(_: i32) -> Mask {}

    pub(super) fn without(_: &Mask, _: i32) -> Option<Mask> {
        None
    }

    pub(super) fn set_mask(_: Tid, _: &Mask) -> bool {
        false
    }

    pub(super) fn thread_count() -> usize {
        0
    }

    pub(super) fn widen_threads_confined_to(_: i32, _: &Mask, _: &[Tid]) {}
}
