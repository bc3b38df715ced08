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
