# Shared by scripts/demo and scripts/test. Source it; it defines functions only.
# shellcheck shell=bash

say() { printf '\n== %s\n' "$*" >&2; }
die() {
    printf 'error: %s\n' "$*" >&2
    exit 1
}

# rustup installs into ~/.cargo/bin; make sure it is on PATH.
ensure_rust() {
    if ! command -v cargo >/dev/null 2>&1 && [[ -f "$HOME/.cargo/env" ]]; then
        # shellcheck disable=SC1091
        . "$HOME/.cargo/env"
    fi
    command -v cargo >/dev/null 2>&1 || die "cargo not found: install Rust with rustup first"
}

# Cleanups run at exit, last registered first, on success, failure and
# Ctrl-C alike. Register with `on_exit 'command'`: one EXIT trap runs them
# all, so a later cleanup never replaces an earlier one (a second
# `trap ... EXIT` would). INT and TERM exit, which runs the EXIT trap.
_polylock_cleanups=()
_polylock_run_cleanups() {
    local i
    for ((i = ${#_polylock_cleanups[@]} - 1; i >= 0; i--)); do
        eval "${_polylock_cleanups[i]}" || true
    done
}
on_exit() {
    _polylock_cleanups+=("$1")
    trap _polylock_run_cleanups EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
}

# Starts Redis and ZooKeeper (installing them when missing) unless the
# caller already did; stops them on exit only if we started them.
start_services_if_needed() {
    if [[ -n "${POLYLOCK_TEST_REDIS:-}" && -n "${POLYLOCK_TEST_ZK:-}" ]]; then
        return 0
    fi
    local exports
    exports="$("$ROOT/scripts/services" start --ensemble --redis2)" || die "could not start the services"
    eval "$exports"
    on_exit "\"$ROOT/scripts/services\" stop >/dev/null 2>&1"
}

# Go, for tests/history's histcheck (the Porcupine check of the workers'
# histories): from PATH, /usr/local/go, or else Debian's golang-go (1.19,
# which the module is written for) installed with apt-get when root.
ensure_go() {
    command -v go >/dev/null 2>&1 && return 0
    if [[ -x /usr/local/go/bin/go ]]; then
        export PATH="$PATH:/usr/local/go/bin"
        return 0
    fi
    [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1 ||
        die "go not found: install Go (Debian: apt-get install golang-go) for tests/history's histcheck"
    say "installing golang-go with apt-get (for tests/history's histcheck)"
    { apt-get -o DPkg::Lock::Timeout=300 update -q &&
        DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -q golang-go; } >&2 ||
        die "apt-get install golang-go failed"
}

# Builds tests/history's histcheck as $1 (Porcupine comes from the Go module proxy).
build_histcheck() {
    ensure_go
    (cd "$ROOT/tests/history" && go build -o "$1" ./cmd/histcheck) || die "could not build tests/history's histcheck"
}

# A fresh directory for one conformance runner's operation histories (set it
# as POLYLOCK_HISTORY_DIR for the runner); check_histories removes it.
new_history_dir() {
    mktemp -d "${TMPDIR:-/tmp}/polylock-histories-$1.XXXXXX"
}

# Checks the histories a conformance runner recorded in $1 with histcheck's
# mutual-exclusion model (tests/history): a violation prints the minimal
# failing history and fails, and the directory stays for its visualization.
# With $2 = required, a directory with nothing recorded fails too (the runner
# ran but recorded nothing); without it, that only says so (a suite run on a
# selection of tests that left the conformance runner out).
check_histories() {
    local dir="$1" bin
    if [[ "${2:-}" != required ]] && ! compgen -G "$dir/*.jsonl" >/dev/null; then
        echo "histcheck: no conformance histories recorded in this run" >&2
        rm -rf "$dir"
        return 0
    fi
    bin="$(mktemp -d "${TMPDIR:-/tmp}/polylock-histcheck.XXXXXX")/histcheck"
    build_histcheck "$bin"
    if "$bin" -models mutex -quiet "$dir"; then
        rm -rf "$dir" "$(dirname "$bin")"
        return 0
    fi
    echo "histcheck: the check of the conformance histories failed (they stay in $dir)" >&2
    rm -rf "$(dirname "$bin")"
    return 1
}
