#!/usr/bin/env bash
# Builds the native library (cargo, shared target dir), the jar, and runs the
# JUnit 5 suite against the real servers. Maven fetches everything it needs
# from Maven Central on the first run (an empty ~/.m2 is fine).
# Needs POLYLOCK_TEST_REDIS and POLYLOCK_TEST_ZK; taken from scripts/services
# when unset.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
if [[ -z "${POLYLOCK_TEST_REDIS:-}" || -z "${POLYLOCK_TEST_ZK:-}" ]]; then
    eval "$(scripts/services env)"
fi
rm -rf bindings-jvm/target/surefire-reports  # count this run only
# The conformance runner (ConformanceTest) records its operation histories
# there; histcheck (tests/history, built with Go) checks them after the
# suite: a violation fails it and prints the minimal failing history.
ROOT="$root"
# shellcheck source=../../scripts/lib.sh
. "$root/scripts/lib.sh"
histories="$(new_history_dir jvm)"
status=0
POLYLOCK_HISTORY_DIR="$histories" mvn -B -q -ntp -f bindings-jvm/pom.xml verify -Dpolylock.cargoFeatures=test-hooks "$@" ||
    status=$?
# A run given arguments (-Dtest=...) may leave the conformance runner out.
check_histories "$histories" "$([[ $# -eq 0 ]] && echo required)" || status=1
# -q hides Surefire's summary: print one closing line from its reports.
reports=(bindings-jvm/target/surefire-reports/TEST-*.xml)
if [[ -e "${reports[0]}" ]]; then
    sed -n 's/.*<testsuite [^>]*tests="\([0-9]*\)"[^>]*/&/p' "${reports[@]}" | python3 -c '
import re, sys
t = f = e = s = 0
for line in sys.stdin:
    get = lambda k: int(re.search(k + r"=\"(\d+)\"", line).group(1))
    t += get("tests"); f += get("failures"); e += get("errors"); s += get("skipped")
print(f"jvm: {t - f - e - s} passed, {f + e} failed, {s} skipped")'
fi
exit $status
