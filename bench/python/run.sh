#!/usr/bin/env bash
# Runs the Python benchmark: polylock vs redis-py, python-redis-lock,
# pottery and kazoo, against the servers of scripts/services.
#   bench/python/run.sh [bench.py args...]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
venv="${POLYLOCK_VENV:-/tmp/polylock-venv}"
[[ -x "$venv/bin/python" ]] || python3 -m venv "$venv"
# shellcheck disable=SC1091
source "$venv/bin/activate"
python -m pip install -q --disable-pip-version-check 'maturin>=1.5,<2' redis kazoo python-redis-lock pottery
if [[ -z "${POLYLOCK_TEST_REDIS:-}" || -z "${POLYLOCK_TEST_ZK:-}" ]]; then
    eval "$("$repo/scripts/services" env)"
fi
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$repo/target}"
(cd "$repo/bindings-python" && maturin develop --release --quiet)
# bench.py asks the Rust benchmark binary for polylock's raw script calls.
cargo build --release -q -p polylock-bench --manifest-path "$repo/Cargo.toml"
exec python "$here/bench.py" "$@"
