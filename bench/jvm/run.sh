#!/usr/bin/env bash
# Runs the JVM benchmark: installs the polylock jar (release native build),
# then bench/jvm's harness. Prints a Markdown table; writes results.md and
# results.json beside this script. Needs the servers of scripts/services.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
if [[ -z "${POLYLOCK_TEST_REDIS:-}" || -z "${POLYLOCK_TEST_ZK:-}" ]]; then
    eval "$(scripts/services env)"
fi
mvn -B -q -f bindings-jvm/pom.xml install -DskipTests
# The harness asks the Rust benchmark binary for polylock's raw script calls.
cargo build --release -q -p polylock-bench
mvn -B -q -f bench/jvm/pom.xml compile exec:java -Dexec.args="bench/jvm" "$@"
