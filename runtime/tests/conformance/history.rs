//! The operation history of the scenarios' lock steps, for tests/history's
//! histcheck (a Porcupine check of mutual exclusion): with
//! POLYLOCK_HISTORY_DIR set, every acquire (call, and return with the token
//! or the outcome's name), release (call, and return ok, or ok false when
//! told Lost) and reported loss goes as one JSON line (tests/history/events.go)
//! into `rust-conformance-<pid>.jsonl` there, stamped on CLOCK_MONOTONIC, the
//! clock every language's recorder reads. Nothing is recorded when it is unset.

use std::fs::File;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use polylock::LockMode;

fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes into the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The process's history file, shared by every scenario run (they run at once).
fn file() -> Option<&'static Mutex<File>> {
    static FILE: OnceLock<Option<Mutex<File>>> = OnceLock::new();
    FILE.get_or_init(|| {
        let dir = std::env::var_os("POLYLOCK_HISTORY_DIR")?;
        let path = std::path::Path::new(&dir).join(format!("rust-conformance-{}.jsonl", std::process::id()));
        let f = std::fs::OpenOptions::new().create(true).append(true).open(&path);
        Some(Mutex::new(f.unwrap_or_else(|e| panic!("{}: {e}", path.display()))))
    })
    .as_ref()
}

/// One scenario run's history: its lock name is unique to the run, so the
/// checker sees each scenario on each backend as a history of its own.
#[derive(Clone)]
pub struct History {
    backend: &'static str,
    lock: String,
    /// Names this run's clients apart from every other run's.
    run: String,
}

impl History {
    pub fn new(backend: &'static str, lock: &str) -> History {
        static RUNS: AtomicU64 = AtomicU64::new(0);
        let run = format!("rust-{}-{}", std::process::id(), RUNS.fetch_add(1, Ordering::Relaxed));
        History { backend, lock: format!("rust:{lock}"), run }
    }

    /// Writes one event of (client, owner)'s hold in `mode`, stamped now;
    /// `fields` are more `"name": value` pairs (or empty).
    fn record(&self, c: usize, owner: u64, mode: LockMode, op: &str, kind: &str, fields: &str) {
        let Some(file) = file() else { return };
        let mode = match mode {
            LockMode::Read => ", \"mode\": \"read\"",
            LockMode::Write => ", \"mode\": \"write\"",
            _ => "",
        };
        let mut f = file.lock().unwrap();
        let line = format!(
            "{{\"client\": \"{run}/c{c}.o{owner}\", \"backend\": \"{backend}\", \"lock\": {lock:?}, \
             \"resource\": \"\", \"op\": \"{op}\", \"kind\": \"{kind}\", \"t_ns\": {t}{mode}{fields}}}\n",
            run = self.run,
            backend = self.backend,
            lock = self.lock,
            t = monotonic_ns(),
        );
        f.write_all(line.as_bytes()).expect("history write");
    }

    /// An acquire is called; `permits` (a semaphore's number) and `count`
    /// (the permits asked for) only for a semaphore.
    pub fn acquire_call(&self, c: usize, owner: u64, mode: LockMode, permits: Option<(u32, u32)>) {
        let fields = permits.map_or(String::new(), |(n, count)| format!(", \"permits\": {n}, \"count\": {count}"));
        self.record(c, owner, mode, "acquire", "call", &fields);
    }

    /// The acquire returned: a grant's token, or else the outcome's name.
    pub fn acquire_return(&self, c: usize, owner: u64, mode: LockMode, token: Option<u64>, outcome: &str) {
        let fields = match token {
            Some(token) => format!(", \"token\": {token}"),
            None => format!(", \"error\": \"{outcome}\""),
        };
        self.record(c, owner, mode, "acquire", "return", &fields);
    }

    pub fn release_call(&self, c: usize, owner: u64, mode: LockMode) {
        self.record(c, owner, mode, "release", "call", "");
    }

    /// The release returned `outcome`: ok, told Lost (ok false), or another error.
    pub fn release_return(&self, c: usize, owner: u64, mode: LockMode, outcome: &str) {
        let fields = match outcome {
            "ok" => ", \"ok\": true".to_owned(),
            "lost" => ", \"ok\": false".to_owned(),
            other => format!(", \"error\": \"{other}\""),
        };
        self.record(c, owner, mode, "release", "return", &fields);
    }

    /// (client, owner) was told it lost its hold in `mode`.
    pub fn lost(&self, c: usize, owner: u64, mode: LockMode) {
        self.record(c, owner, mode, "lost", "event", "");
    }
}
