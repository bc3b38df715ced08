//! `polylock`: run a command under a distributed lock, or show a lock's state.

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use polylock::{current_owner, Client, Error, LockMode};

/// Exit codes other than the command's own.
mod exit {
    /// Bad arguments, a bad lock name or a bad URL.
    pub const USAGE: u8 = 64;
    /// The server could not be reached.
    pub const UNAVAILABLE: u8 = 69;
    /// The lock was lost while the command ran; the command got SIGTERM.
    pub const LOST: u8 = 70;
    /// The lock was not granted within --timeout.
    pub const TIMEOUT: u8 = 75;
    /// The command could not be started.
    pub const CANNOT_EXEC: u8 = 126;
}

#[derive(Parser)]
#[command(
    name = "polylock",
    version,
    about = "Distributed locks on Redis and ZooKeeper",
    after_help = "Examples:
  polylock run nightly-report -- ./report.sh --full
  polylock run orders/42 --url zk://127.0.0.1:2181 --timeout 10 -- python3 settle.py
  polylock run reports --url zk://127.0.0.1:2181 --read -- ./read-report.sh
  polylock run exports --permits 4 -- ./export.sh    # at most 4 at once
  POLYLOCK_URL=redis://127.0.0.1:6379 polylock status nightly-report

Exit codes of `run`: the command's own; 64 bad input; 69 server unreachable;
70 lock lost while the command ran (it was sent SIGTERM); 75 not granted within --timeout."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Acquire the lock, run the command, release; exit with the command's code.
    Run {
        /// The lock name (a Redis key; a ZooKeeper path, with or without a leading '/').
        name: String,
        /// redis://, rediss://, zk:// or zks:// URL.
        #[arg(long, env = "POLYLOCK_URL", default_value = "redis://127.0.0.1:6379")]
        url: String,
        /// Give up after this many seconds (default: wait forever).
        #[arg(long)]
        timeout: Option<f64>,
        /// Redis lease in seconds (renewed while the command runs).
        #[arg(long)]
        lease: Option<f64>,
        /// Take the read half of a read-write lock: many commands may read at once.
        #[arg(long, conflicts_with = "write")]
        read: bool,
        /// Take the write half of a read-write lock: excludes readers and writers.
        #[arg(long, conflicts_with = "permits")]
        write: bool,
        /// Take one permit of a semaphore of N permits: at most N commands
        /// of this name run at once (every run of a name must say the same N).
        #[arg(long, conflicts_with = "read", value_parser = clap::value_parser!(u32).range(1..))]
        permits: Option<u32>,
        /// The command and its arguments.
        #[arg(trailing_var_arg = true, required = true)]
        cmd: Vec<String>,
    },
    /// Show whether the lock is held, by whom, its fencing counter and waiters.
    Status {
        name: String,
        #[arg(long, env = "POLYLOCK_URL", default_value = "redis://127.0.0.1:6379")]
        url: String,
    },
}

fn seconds(what: &str, v: f64) -> Result<Duration, String> {
    if !v.is_finite() || v < 0.0 {
        return Err(format!("{what} must be a non-negative number of seconds, got {v}"));
    }
    Ok(Duration::from_secs_f64(v))
}

fn code_for(e: &Error) -> u8 {
    match e {
        Error::InvalidUrl { .. } | Error::InvalidName(_) | Error::InvalidOption(_) => exit::USAGE,
        Error::Connect { .. } | Error::Unavailable { .. } => exit::UNAVAILABLE,
        Error::Timeout(_) | Error::WouldBlock(_) => exit::TIMEOUT,
        Error::UpgradeRefused(_) | Error::PermitsMismatch { .. } => exit::USAGE,
        Error::Lost { .. } => exit::LOST,
        _ => 1,
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Status { name, url } => match status(&name, &url).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("polylock: {e}");
                ExitCode::from(code_for(&e))
            }
        },
        Command::Run { name, url, timeout, lease, read, write, permits, cmd } => {
            let mode = match (read, write, permits) {
                (true, _, _) => LockMode::Read,
                (_, true, _) => LockMode::Write,
                (_, _, Some(_)) => LockMode::Semaphore,
                _ => LockMode::Exclusive,
            };
            let timeout = match timeout.map(|t| seconds("--timeout", t)).transpose() {
                Ok(t) => t,
                Err(e) => {
                    eprintln!("polylock: {e}");
                    return ExitCode::from(exit::USAGE);
                }
            };
            let lease = match lease.map(|t| seconds("--lease", t)).transpose() {
                Ok(t) => t,
                Err(e) => {
                    eprintln!("polylock: {e}");
                    return ExitCode::from(exit::USAGE);
                }
            };
            match run(&name, &url, mode, permits.unwrap_or(1), timeout, lease, &cmd).await {
                Ok(code) => ExitCode::from(code),
                Err(e) => {
                    eprintln!("polylock: {e}");
                    ExitCode::from(code_for(&e))
                }
            }
        }
    }
}

async fn status(name: &str, url: &str) -> Result<(), Error> {
    use std::fmt::Write as _;
    let client = Client::connect(url).await?;
    let s = client.status(name).await?;
    let mut out = String::new();
    // Writing to a String cannot fail.
    let _ = match (s.held, s.holder.as_deref(), s.readers) {
        (_, _, _) if s.permits.is_some() => {
            let p = s.permits.expect("checked");
            writeln!(out, "{name}: {} of {} permits held", p.held, p.total)
        }
        (true, holder, 0) => writeln!(out, "{name}: held by {}", holder.unwrap_or("?")),
        (true, holder, n) => writeln!(out, "{name}: read by {n} (first: {})", holder.unwrap_or("?")),
        (false, _, _) => writeln!(out, "{name}: free"),
    };
    if let Some(t) = s.fencing_token {
        let _ = writeln!(out, "fencing token: {t}");
    }
    if let Some(w) = s.waiters {
        let _ = writeln!(out, "waiters: {w}");
    }
    if let Some(ttl) = s.ttl_ms {
        let _ = writeln!(out, "lease expires in: {ttl} ms");
    }
    // A reader that went away (`| head -1`) is not an error: end quietly,
    // as Unix tools do, instead of panicking as println! would.
    use std::io::Write as _;
    match std::io::stdout().lock().write_all(out.as_bytes()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => eprintln!("polylock: cannot write: {e}"),
        _ => {}
    }
    Ok(())
}

/// What `run` holds while the command runs: a lock (or half) or a permit.
enum Hold {
    Lock(polylock::Guard),
    Permit(polylock::Permits),
}

impl Hold {
    fn fencing_token(&self) -> u64 {
        match self {
            Hold::Lock(g) => g.fencing_token(),
            Hold::Permit(p) => p.fencing_token(),
        }
    }

    async fn lost(&self) -> polylock::LossReason {
        match self {
            Hold::Lock(g) => g.lost().await,
            Hold::Permit(p) => p.lost().await,
        }
    }

    async fn release(self) -> Result<(), Error> {
        match self {
            Hold::Lock(g) => g.release().await,
            Hold::Permit(p) => p.release().await,
        }
    }
}

async fn run(
    name: &str,
    url: &str,
    mode: LockMode,
    permits: u32,
    timeout: Option<Duration>,
    lease: Option<Duration>,
    cmd: &[String],
) -> Result<u8, Error> {
    let client = Client::connect(url).await?;
    let opts = polylock::LockOptions { lease };
    let lock = match mode {
        LockMode::Semaphore => {
            let sem = client.semaphore_with(name, permits, opts)?;
            Hold::Permit(sem.acquire_for(1, timeout).await?)
        }
        LockMode::Read => {
            Hold::Lock(client.rw_lock_with(name, opts)?.read().acquire_as(current_owner(), timeout).await?)
        }
        LockMode::Write => {
            Hold::Lock(client.rw_lock_with(name, opts)?.write().acquire_as(current_owner(), timeout).await?)
        }
        _ => Hold::Lock(client.lock_with(name, opts)?.acquire_as(current_owner(), timeout).await?),
    };
    let guard = lock;
    let mut child = match tokio::process::Command::new(&cmd[0])
        .args(&cmd[1..])
        .env("POLYLOCK_FENCING_TOKEN", guard.fencing_token().to_string())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            eprintln!("polylock: cannot run {:?}: {e}", cmd[0]);
            let _ = guard.release().await;
            return Ok(exit::CANNOT_EXEC);
        }
    };
    let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    let code = loop {
        tokio::select! {
            status = child.wait() => {
                let status = status.map_err(|e| Error::Protocol(format!("waiting for the command: {e}")))?;
                break status.code().map_or(128 + status_signal(&status), |c| c as u8);
            }
            reason = guard.lost() => {
                eprintln!("polylock: lock {name:?} lost ({reason}); sending SIGTERM to the command");
                signal(&child, libc::SIGTERM);
                let _ = child.wait().await;
                break exit::LOST;
            }
            _ = tokio::signal::ctrl_c() => signal(&child, libc::SIGINT),
            _ = async { match sigterm.as_mut() { Some(s) => { s.recv().await; } None => std::future::pending().await } } => {
                signal(&child, libc::SIGTERM)
            }
        }
    };
    match guard.release().await {
        Ok(()) => Ok(code),
        Err(Error::Lost { .. }) => Ok(exit::LOST),
        Err(e) => Err(e),
    }
}

fn status_signal(status: &std::process::ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    status.signal().unwrap_or(0) as u8
}

fn signal(child: &tokio::process::Child, sig: i32) {
    if let Some(pid) = child.id() {
        // SAFETY: kill(2) on a pid we spawned and have not reaped.
        unsafe {
            libc::kill(pid as i32, sig);
        }
    }
}
