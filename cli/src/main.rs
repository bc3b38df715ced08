//! `polylock`: run a command under a distributed lock or while leading an
//! election, or show a lock's state or an election's leader.

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
    /// The lock (or leadership) was lost while the command ran; the command
    /// got SIGTERM (and SIGKILL after --grace).
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
  polylock lead scheduler --url zk://127.0.0.1:2181 -- ./scheduler
  polylock leader scheduler --url zk://127.0.0.1:2181

Exit codes of `run` and `lead`: the command's own; 64 bad input; 69 server
unreachable; 70 lock or leadership lost while the command ran (it was sent
SIGTERM, then SIGKILL after --grace); 75 not granted within --timeout."
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
        #[command(flatten)]
        job: Job,
    },
    /// Campaign in the election NAME; run the command only while leader
    /// (its term in POLYLOCK_TERM); resign when it exits; exit with its code.
    Lead {
        /// The election's name (a Redis key; a ZooKeeper path: Curator LeaderLatch participants share it).
        name: String,
        #[command(flatten)]
        job: Job,
    },
    /// Print the election's leader (its participant id) and term, or that none leads.
    Leader {
        name: String,
        #[arg(long, env = "POLYLOCK_URL", default_value = "redis://127.0.0.1:6379")]
        url: String,
    },
    /// Show whether the lock is held, by whom, its fencing counter and waiters.
    Status {
        name: String,
        #[arg(long, env = "POLYLOCK_URL", default_value = "redis://127.0.0.1:6379")]
        url: String,
    },
}

/// What `run` and `lead` share: the server, how long to wait and hold,
/// and the command to run under the lock or leadership.
#[derive(clap::Args)]
struct Job {
    /// redis://, rediss://, zk:// or zks:// URL.
    #[arg(long, env = "POLYLOCK_URL", default_value = "redis://127.0.0.1:6379")]
    url: String,
    /// Give up after this many seconds (default: wait forever).
    #[arg(long)]
    timeout: Option<f64>,
    /// Redis lease in seconds (renewed while the command runs).
    #[arg(long)]
    lease: Option<f64>,
    /// Seconds the command has to exit after SIGTERM on a loss before
    /// SIGKILL; the loss is reported that much earlier, so the command is
    /// gone before anyone else is granted (Redis: at most a third of the
    /// lease; ZooKeeper: less than a third of the session timeout).
    /// Default: 3, or a third of --lease if that is less.
    #[arg(long)]
    grace: Option<f64>,
    /// The command and its arguments.
    #[arg(trailing_var_arg = true, required = true)]
    cmd: Vec<String>,
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
        Command::Leader { name, url } => match leader(&name, &url).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("polylock: {e}");
                ExitCode::from(code_for(&e))
            }
        },
        Command::Run { name, read, write, permits, job } => {
            let mode = match (read, write, permits) {
                (true, _, _) => LockMode::Read,
                (_, true, _) => LockMode::Write,
                (_, _, Some(_)) => LockMode::Semaphore,
                _ => LockMode::Exclusive,
            };
            let times = match Times::parse(&job) {
                Ok(t) => t,
                Err(e) => {
                    eprintln!("polylock: {e}");
                    return ExitCode::from(exit::USAGE);
                }
            };
            finish(run(&name, &job.url, mode, permits.unwrap_or(1), &times, &job.cmd).await)
        }
        Command::Lead { name, job } => {
            let times = match Times::parse(&job) {
                Ok(t) => t,
                Err(e) => {
                    eprintln!("polylock: {e}");
                    return ExitCode::from(exit::USAGE);
                }
            };
            finish(lead(&name, &job.url, &times, &job.cmd).await)
        }
    }
}

fn finish(outcome: Result<u8, Error>) -> ExitCode {
    match outcome {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("polylock: {e}");
            ExitCode::from(code_for(&e))
        }
    }
}

/// The grace when `--grace` is not given: 3 s, or the most a short lease
/// allows (a third of it), so `--lease` alone never needs `--grace` too.
fn default_grace(lease: Option<Duration>) -> Duration {
    let grace = Duration::from_secs(3);
    lease.map_or(grace, |lease| grace.min(lease / 3))
}

/// The durations `run` and `lead` take, checked.
struct Times {
    timeout: Option<Duration>,
    lease: Option<Duration>,
    grace: Duration,
}

impl Times {
    fn parse(job: &Job) -> Result<Times, String> {
        Ok(Times {
            timeout: job.timeout.map(|t| seconds("--timeout", t)).transpose()?,
            lease: job.lease.map(|t| seconds("--lease", t)).transpose()?,
            grace: match job.grace {
                Some(g) => seconds("--grace", g)?,
                None => default_grace(job.lease.map(|l| seconds("--lease", l)).transpose()?),
            },
        })
    }

    /// The lease, and the grace as the stop margin: the loss is reported
    /// early enough for the command to exit (or be killed) before the
    /// server can grant anyone else.
    fn lock_options(&self) -> polylock::LockOptions {
        polylock::LockOptions { lease: self.lease, stop_margin: self.grace }
    }
}

async fn leader(name: &str, url: &str) -> Result<(), Error> {
    let client = Client::connect(url).await?;
    let out = match client.election(name)?.leader().await? {
        Some(l) => match l.term {
            Some(term) => format!("{name}: led by {}\nterm: {term}\n", l.participant),
            None => format!("{name}: led by {}\n", l.participant),
        },
        None => format!("{name}: no leader\n"),
    };
    print_quietly(&out);
    Ok(())
}

/// Prints `out`; a reader that went away (`| head -1`) is not an error:
/// end quietly, as Unix tools do, instead of panicking as println! would.
fn print_quietly(out: &str) {
    use std::io::Write as _;
    match std::io::stdout().lock().write_all(out.as_bytes()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => eprintln!("polylock: cannot write: {e}"),
        _ => {}
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
    print_quietly(&out);
    Ok(())
}

/// What the command runs under: a lock (or half), a permit, or a leadership.
enum Hold {
    Lock(polylock::Guard),
    Permit(polylock::Permits),
    Lead(polylock::Leadership),
}

impl Hold {
    fn fencing_token(&self) -> u64 {
        match self {
            Hold::Lock(g) => g.fencing_token(),
            Hold::Permit(p) => p.fencing_token(),
            Hold::Lead(l) => l.term(),
        }
    }

    async fn lost(&self) -> polylock::LossReason {
        match self {
            Hold::Lock(g) => g.lost().await,
            Hold::Permit(p) => p.lost().await,
            Hold::Lead(l) => l.lost().await,
        }
    }

    async fn release(self) -> Result<(), Error> {
        match self {
            Hold::Lock(g) => g.release().await,
            Hold::Permit(p) => p.release().await,
            Hold::Lead(l) => l.resign().await,
        }
    }
}

async fn run(name: &str, url: &str, mode: LockMode, permits: u32, times: &Times, cmd: &[String]) -> Result<u8, Error> {
    let client = Client::connect(url).await?;
    let opts = times.lock_options();
    let timeout = times.timeout;
    let hold = match mode {
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
    let token = hold.fencing_token().to_string();
    run_under(hold, &format!("lock {name:?}"), [("POLYLOCK_FENCING_TOKEN", token)], times.grace, cmd).await
}

async fn lead(name: &str, url: &str, times: &Times, cmd: &[String]) -> Result<u8, Error> {
    let client = Client::connect(url).await?;
    let election = client.election_with(name, times.lock_options())?;
    let leadership = match times.timeout {
        None => election.campaign().await?,
        Some(t) => election.campaign_timeout(t).await?.ok_or_else(|| Error::Timeout(name.to_owned()))?,
    };
    let term = leadership.term().to_string();
    // The term is a fencing token: both names, so a command written for `run` works unchanged.
    let env = [("POLYLOCK_TERM", term.clone()), ("POLYLOCK_FENCING_TOKEN", term)];
    run_under(Hold::Lead(leadership), &format!("leadership of {name:?}"), env, times.grace, cmd).await
}

/// Signals `polylock` passes on to the command, so that a supervisor
/// stopping `polylock` stops the command (and one reloading it reloads it).
const FORWARDED: [i32; 6] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT, libc::SIGUSR1, libc::SIGUSR2];

/// Runs `cmd` while `hold` is held and returns its exit code (128 + the
/// signal that killed it, as a shell reports it); ends the hold after it
/// exits. On a loss the command gets SIGTERM, then SIGKILL if it has not
/// exited after `grace`, and the code is [`exit::LOST`].
async fn run_under<const N: usize>(
    hold: Hold,
    what: &str,
    env: [(&str, String); N],
    grace: Duration,
    cmd: &[String],
) -> Result<u8, Error> {
    use tokio::signal::unix::{signal as listen, SignalKind};
    // Listening before the command starts: a signal sent meanwhile is
    // forwarded, not taken by the default action (which would kill
    // `polylock` and leave the command running without its hold).
    let mut listeners = Vec::new();
    for sig in FORWARDED {
        if let Ok(l) = listen(SignalKind::from_raw(sig)) {
            listeners.push((sig, l));
        }
    }
    let mut child = match tokio::process::Command::new(&cmd[0]).args(&cmd[1..]).envs(env).spawn() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("polylock: cannot run {:?}: {e}", cmd[0]);
            let _ = hold.release().await;
            return Ok(exit::CANNOT_EXEC);
        }
    };
    let code = loop {
        let forwarded = next_signal(&mut listeners);
        tokio::select! {
            status = child.wait() => {
                break exit_code(status.map_err(|e| Error::Protocol(format!("waiting for the command: {e}")))?);
            }
            reason = hold.lost() => {
                eprintln!("polylock: {what} lost ({reason}); sending SIGTERM to the command");
                signal(&child, libc::SIGTERM);
                if tokio::time::timeout(grace, child.wait()).await.is_err() {
                    eprintln!("polylock: the command did not exit within {grace:?} of SIGTERM; sending SIGKILL");
                    let _ = child.kill().await;
                }
                break exit::LOST;
            }
            sig = forwarded => signal(&child, sig),
        }
    };
    match hold.release().await {
        Ok(()) => Ok(code),
        Err(Error::Lost { .. }) => Ok(exit::LOST),
        Err(e) => Err(e),
    }
}

/// The next signal any of `listeners` receives.
async fn next_signal(listeners: &mut [(i32, tokio::signal::unix::Signal)]) -> i32 {
    std::future::poll_fn(|cx| {
        for (sig, l) in listeners.iter_mut() {
            if l.poll_recv(cx).is_ready() {
                return std::task::Poll::Ready(*sig);
            }
        }
        std::task::Poll::Pending
    })
    .await
}

fn exit_code(status: std::process::ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    status.code().map_or_else(|| 128 + status.signal().unwrap_or(0) as u8, |c| c as u8)
}

fn signal(child: &tokio::process::Child, sig: i32) {
    if let Some(pid) = child.id() {
        // SAFETY: kill(2) on a pid we spawned and have not reaped.
        unsafe {
            libc::kill(pid as i32, sig);
        }
    }
}
