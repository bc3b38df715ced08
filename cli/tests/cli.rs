//! The `polylock` CLI against real servers: what it runs, what it prints,
//! and the exit codes scripts and cron jobs depend on (docs/cli.md).

// The runtime's test helpers, shared rather than copied.
#[path = "../../runtime/tests/support/mod.rs"]
mod support;

use std::io::Read;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

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

/// `lead` runs the command only while leader, with the term in
/// `POLYLOCK_TERM`; a second `lead` waits (here: gives up with 75);
/// `leader` prints the leader's term; the command's exit code comes back;
/// once it exits, the next `lead` runs with a larger term.
#[test]
fn lead_runs_the_command_while_leader_with_its_term_and_exit_code() {
    for (backend, url) in backends() {
        let name = unique(&format!("cli-lead-{backend}"));
        assert!(String::from_utf8_lossy(&polylock(&["leader", &name, "--url", &url]).stdout).contains("no leader"));
        let mut first = Command::new(env!("CARGO_BIN_EXE_polylock"))
            .args(["lead", &name, "--url", &url, "--", "sh", "-c", "echo term=$POLYLOCK_TERM; sleep 2; exit 3"])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = Vec::new();
        let mut out = first.stdout.take().unwrap();
        let mut byte = [0u8; 1];
        while out.read(&mut byte).unwrap() == 1 && byte[0] != b'\n' {
            line.push(byte[0]);
        }
        let term: u64 = String::from_utf8_lossy(&line).strip_prefix("term=").and_then(|t| t.parse().ok()).unwrap_or(0);
        assert!(term > 0, "{backend}: no term in the command's environment: {line:?}");
        let shown = String::from_utf8_lossy(&polylock(&["leader", &name, "--url", &url]).stdout).into_owned();
        assert!(shown.contains(&format!("term: {term}")), "{backend}: {shown}");
        let o = polylock(&["lead", &name, "--url", &url, "--timeout", "0.3", "--", "true"]);
        assert_eq!(code(&o), 75, "{backend}: a second leader ran beside the first: {o:?}");
        assert_eq!(first.wait().unwrap().code(), Some(3), "{backend}: the command's exit code");
        let o = polylock(&["lead", &name, "--url", &url, "--timeout", "5", "--", "sh", "-c", "echo $POLYLOCK_TERM"]);
        assert_eq!(code(&o), 0, "{backend}: {o:?}");
        let next: u64 = String::from_utf8_lossy(&o.stdout).trim().parse().unwrap();
        assert!(next > term, "{backend}: the term did not grow: {term} then {next}");
        assert!(String::from_utf8_lossy(&polylock(&["leader", &name, "--url", &url]).stdout).contains("no leader"));
    }
}

/// Signals sent to `polylock` reach the command (a supervisor's SIGTERM,
/// SIGHUP for a reload), and the command's own exit code comes back, not
/// `polylock`'s death by the signal.
#[test]
fn signals_sent_to_polylock_are_forwarded_to_the_command() {
    let url = redis_url();
    for (verb, sig) in [("lead", libc::SIGTERM), ("run", libc::SIGTERM), ("lead", libc::SIGHUP)] {
        let name = unique("cli-signal");
        let script = "trap 'echo got; exit 42' TERM HUP; echo ready; while :; do sleep 0.05; done";
        let mut p = Command::new(env!("CARGO_BIN_EXE_polylock"))
            .args([verb, &name, "--url", &url, "--", "sh", "-c", script])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = p.stdout.take().unwrap();
        let mut ready = [0u8; 6];
        out.read_exact(&mut ready).unwrap();
        // SAFETY: kill(2) on the child we spawned and have not reaped.
        unsafe { libc::kill(p.id() as i32, sig) };
        let status = p.wait().unwrap();
        let mut rest = String::new();
        out.read_to_string(&mut rest).unwrap();
        assert_eq!(status.code(), Some(42), "{verb} {sig}: {status:?} (the command printed {rest:?})");
        assert!(rest.contains("got"), "{verb} {sig}: the command did not get the signal: {rest:?}");
    }
}

/// The leader's connection is cut: it is told it lost the leadership
/// `--grace` before the server can let anyone else lead, so its command is
/// stopped before the next leader's command starts, also when it ignores
/// SIGTERM and is killed after `--grace`; `polylock` exits 70.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_stops_its_command_before_the_next_leader_starts() {
    let dir = std::env::temp_dir().join(format!("polylock-cli-lead-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (backend, url, scheme, ignores_term) in [
        ("redis", redis_url(), "redis", false),
        ("zookeeper", zk_url(), "zk", false),
        ("redis", redis_url(), "redis", true),
    ] {
        let name = unique(&format!("cli-lead-cut-{backend}"));
        let proxy = Proxy::start(&host_port(&url)).await;
        let pid_file = dir.join(format!("{}.pid", name.replace('/', "_")));
        // The first leader's command records its pid, then sleeps (or ignores SIGTERM and sleeps).
        let trap = if ignores_term { "trap '' TERM; " } else { "" };
        let first_cmd = format!("{trap}echo $$ > {}; echo ready; exec sleep 1000", pid_file.display());
        let first_cmd =
            if ignores_term { first_cmd.replace("exec sleep 1000", "while :; do sleep 0.05; done") } else { first_cmd };
        let mut first = tokio::process::Command::new(env!("CARGO_BIN_EXE_polylock"))
            .args(["lead", &name, "--url", &proxy.url(scheme), "--lease", "3", "--grace", "0.5", "--", "sh", "-c"])
            .arg(&first_cmd)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut ready = [0u8; 6];
        tokio::io::AsyncReadExt::read_exact(first.stdout.as_mut().unwrap(), &mut ready).await.unwrap();
        // The next leader's command: is the first one's process still running (a zombie is not)?
        let check = format!(
            "s=$(cut -d' ' -f3 /proc/$(cat {})/stat 2>/dev/null); if [ -n \"$s\" ] && [ \"$s\" != Z ]; then echo OVERLAP; else echo CLEAN; fi",
            pid_file.display()
        );
        let second = tokio::process::Command::new(env!("CARGO_BIN_EXE_polylock"))
            .args(["lead", &name, "--url", &url, "--timeout", "30", "--", "sh", "-c", &check])
            .output();
        let second = tokio::spawn(second);
        tokio::time::sleep(Duration::from_millis(300)).await;
        proxy.cut();
        let first_exit = tokio::time::timeout(Duration::from_secs(30), first.wait()).await.unwrap().unwrap();
        assert_eq!(first_exit.code(), Some(70), "{backend}: the cut-off leader's exit");
        let pid = std::fs::read_to_string(&pid_file).unwrap();
        assert!(
            !std::path::Path::new(&format!("/proc/{}", pid.trim())).exists(),
            "{backend} (ignores SIGTERM: {ignores_term}): the command outlived its leader's exit"
        );
        let second = second.await.unwrap().unwrap();
        assert_eq!(second.status.code(), Some(0), "{backend}: {second:?}");
        assert_eq!(
            String::from_utf8_lossy(&second.stdout).trim(),
            "CLEAN",
            "{backend} (ignores SIGTERM: {ignores_term}): the next leader's command started while the first one's ran"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A short `--lease` without `--grace` still runs: the default grace (3 s)
/// shrinks to what the lease allows (a third of it); an explicit `--grace`
/// the lease cannot honour is refused with 64.
#[test]
fn a_short_lease_without_grace_runs_and_an_impossible_grace_is_refused() {
    let url = redis_url();
    let name = unique("cli-short-lease");
    let o = polylock(&["run", &name, "--url", &url, "--lease", "1", "--", "true"]);
    assert_eq!(code(&o), 0, "a 1 s lease with the default grace: {o:?}");
    let o = polylock(&["lead", &name, "--url", &url, "--lease", "1", "--", "true"]);
    assert_eq!(code(&o), 0, "lead with a 1 s lease and the default grace: {o:?}");
    let o = polylock(&["run", &name, "--url", &url, "--lease", "1", "--grace", "2", "--", "true"]);
    assert_eq!(code(&o), 64, "a grace longer than a third of the lease: {o:?}");
}
