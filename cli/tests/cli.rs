//! The `polylock` CLI against real servers: what it runs, what it prints,
//! and the exit codes scripts and cron jobs depend on (docs/cli.md).

// The runtime's test helpers, shared rather than copied.
#[path = "../../runtime/tests/support/mod.rs"]
mod support;

use std::io::Read;
use std::process::{Command, Output, Stdio};

use support::*;

fn polylock(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_polylock")).args(args).env_remove("POLYLOCK_URL").output().unwrap()
}

fn code(o: &Output) -> i32 {
    o.status.code().unwrap_or_else(|| panic!("killed by a signal: {o:?}"))
}

#[test]
fn run_passes_the_token_and_returns_the_commands_exit_code() {
    for (backend, url) in backends() {
        let name = unique(&format!("cli-run-{backend}"));
        let o =
            polylock(&["run", &name, "--url", &url, "--", "sh", "-c", "echo token=$POLYLOCK_FENCING_TOKEN; exit 7"]);
        assert_eq!(code(&o), 7, "{backend}: {o:?}");
        let out = String::from_utf8_lossy(&o.stdout);
        let token: u64 = out.trim().strip_prefix("token=").and_then(|t| t.parse().ok()).unwrap_or(0);
        assert!(token > 0, "{backend}: no fencing token in the command's environment: {out:?}");
    }
}

#[test]
fn exit_codes_for_bad_input_an_unreachable_server_and_a_timeout() {
    assert_eq!(code(&polylock(&["run", "a//b", "--url", &redis_url(), "--", "true"])), 64, "bad name");
    assert_eq!(code(&polylock(&["status", "x", "--url", "http://h"])), 64, "bad URL");
    assert_eq!(code(&polylock(&["status", "x", "--url", "redis://127.0.0.1:1"])), 69, "unreachable");
    assert_eq!(code(&polylock(&["run", "x", "--url", &redis_url(), "--", "/nonexistent/cmd"])), 126, "cannot exec");
    // Held by a command that sleeps: a second run with a short timeout gives up with 75.
    let name = unique("cli-timeout");
    let mut holder = Command::new(env!("CARGO_BIN_EXE_polylock"))
        .args(["run", &name, "--url", &redis_url(), "--", "sh", "-c", "echo held; sleep 5"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = [0u8; 4];
    holder.stdout.take().unwrap().read_exact(&mut first).unwrap();
    let o = polylock(&["run", &name, "--url", &redis_url(), "--timeout", "0.3", "--", "true"]);
    assert_eq!(code(&o), 75, "{o:?}");
    let _ = holder.kill();
    let _ = holder.wait();
}

/// `polylock status NAME | head -1` may close the pipe before the CLI has
/// written: the CLI then ends quietly, as Unix tools do, instead of
/// panicking on EPIPE. (`true` closes its end at once, before the CLI has
/// even connected.)
#[test]
fn status_into_a_closed_pipe_ends_quietly() {
    let name = unique("cli-pipe");
    let script = format!("{} status {name} --url {} | true", env!("CARGO_BIN_EXE_polylock"), redis_url());
    let o = Command::new("bash").args(["-o", "pipefail", "-c", &script]).output().unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    // Exit status is the CLI's: 0, or death by SIGPIPE (141 from bash), never a panic's 101.
    assert!(matches!(o.status.code(), Some(0) | Some(141)), "{o:?}");
}

/// `--read` runs share the lock (status shows both readers), a `--write`
/// run waits for them (here: gives up with 75), and runs once they end.
#[test]
fn read_runs_share_and_a_write_run_waits() {
    for (backend, url) in backends() {
        let name = unique(&format!("cli-rw-{backend}"));
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let mut r = Command::new(env!("CARGO_BIN_EXE_polylock"))
                    .args(["run", &name, "--url", &url, "--read", "--", "sh", "-c", "echo held; sleep 3"])
                    .stdout(Stdio::piped())
                    .spawn()
                    .unwrap();
                let mut first = [0u8; 4];
                r.stdout.take().unwrap().read_exact(&mut first).unwrap();
                r
            })
            .collect();
        let o = polylock(&["status", &name, "--url", &url]);
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(out.contains("read by 2"), "{backend}: {out}");
        let o = polylock(&["run", &name, "--url", &url, "--write", "--timeout", "0.3", "--", "true"]);
        assert_eq!(code(&o), 75, "{backend}: a writer ran beside readers: {o:?}");
        for mut r in readers {
            assert!(r.wait().unwrap().success(), "{backend}");
        }
        let o = polylock(&["run", &name, "--url", &url, "--write", "--timeout", "5", "--", "true"]);
        assert_eq!(code(&o), 0, "{backend}: {o:?}");
        assert_eq!(code(&polylock(&["run", &name, "--read", "--write", "--", "true"])), 2, "--read with --write");
    }
}

/// `--permits N` is a concurrency limit: N runs at once (status shows
/// them), the next gives up with 75, a run with another N is refused with
/// 64, and once the runs end every permit is free again.
#[test]
fn permit_runs_are_limited_to_n_at_once() {
    for (backend, url) in backends() {
        let name = unique(&format!("cli-sem-{backend}"));
        let runs: Vec<_> = (0..2)
            .map(|_| {
                let mut r = Command::new(env!("CARGO_BIN_EXE_polylock"))
                    .args(["run", &name, "--url", &url, "--permits", "2", "--", "sh", "-c", "echo held; sleep 3"])
                    .stdout(Stdio::piped())
                    .spawn()
                    .unwrap();
                let mut first = [0u8; 4];
                r.stdout.take().unwrap().read_exact(&mut first).unwrap();
                r
            })
            .collect();
        let o = polylock(&["status", &name, "--url", &url]);
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(out.contains("2 of 2 permits held"), "{backend}: {out}");
        let o = polylock(&["run", &name, "--url", &url, "--permits", "2", "--timeout", "0.3", "--", "true"]);
        assert_eq!(code(&o), 75, "{backend}: a third run beside two of two permits: {o:?}");
        let o = polylock(&["run", &name, "--url", &url, "--permits", "3", "--timeout", "0.3", "--", "true"]);
        assert_eq!(code(&o), 64, "{backend}: another number of permits: {o:?}");
        assert!(String::from_utf8_lossy(&o.stderr).contains("2 permits"), "{backend}: {o:?}");
        for mut r in runs {
            assert!(r.wait().unwrap().success(), "{backend}");
        }
        let o = polylock(&["run", &name, "--url", &url, "--permits", "2", "--timeout", "5", "--", "true"]);
        assert_eq!(code(&o), 0, "{backend}: {o:?}");
        let out = String::from_utf8_lossy(&polylock(&["status", &name, "--url", &url]).stdout).into_owned();
        assert!(out.contains("0 of 2 permits held"), "{backend}: {out}");
        assert_eq!(
            code(&polylock(&["run", &name, "--read", "--permits", "2", "--", "true"])),
            2,
            "--read with --permits"
        );
    }
}
