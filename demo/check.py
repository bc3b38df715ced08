#!/usr/bin/env python3
"""Verifies the records of workers that contended on one lock.

Input: JSON lines, one per critical section:
  {"worker": str, "lang": str, "backend": str, "token": int,
   "start_ns": int, "end_ns": int, "accepted": bool}
(start/end on the machine's CLOCK_MONOTONIC, shared by every process), and
the resource's final hash (count, accepted, refused).

Checks, per backend:
  - no accepted write from a stale token (the resource refused every token
    lower than one it had accepted: re-checked here from the records);
  - with no faults, no two critical sections overlap;
  - tokens increase in grant order;
  - the final count equals the accepted writes.
Exit status 0 when every check holds.
"""

import argparse
import json
import sys
from collections import defaultdict
from itertools import pairwise


def check(records, resource, faults):
    problems = []
    by_start = sorted(records, key=lambda r: r["start_ns"])
    overlaps = 0
    for a, b in pairwise(by_start):
        if b["start_ns"] < a["end_ns"]:
            overlaps += 1
            if not faults:
                problems.append(
                    f"overlap: {a['lang']}/{a['worker']} token {a['token']} and "
                    f"{b['lang']}/{b['worker']} token {b['token']}"
                )
    for a, b in pairwise(by_start):
        if not faults and b["token"] <= a["token"]:
            problems.append(f"token {b['token']} granted after token {a['token']}")
    last = 0
    stale_accepted = 0
    for r in sorted((r for r in records if r["accepted"]), key=lambda r: r["end_ns"]):
        if r["token"] < last:
            stale_accepted += 1
        last = max(last, r["token"])
    if stale_accepted:
        problems.append(f"{stale_accepted} stale writes accepted")
    accepted = sum(1 for r in records if r["accepted"])
    if int(resource.get("count", 0)) != accepted or int(resource.get("accepted", 0)) != accepted:
        problems.append(f"count {resource.get('count')} but {accepted} accepted writes")
    return problems, overlaps, accepted


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("records", help="JSON lines file")
    ap.add_argument("resource", help="JSON object: the resource hash per backend")
    ap.add_argument("--faults", action="store_true", help="overlaps are expected; only fencing must hold")
    args = ap.parse_args()
    records = defaultdict(list)
    with open(args.records) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                r = json.loads(line)
                if r.get("event") == "grant":
                    continue  # progress lines; the record follows at the section's end
                records[r["backend"]].append(r)
    with open(args.resource) as f:
        resources = json.load(f)
    ok = True
    for backend, recs in sorted(records.items()):
        problems, overlaps, accepted = check(recs, resources.get(backend, {}), args.faults)
        langs = sorted({r["lang"] for r in recs})
        print(
            f"{backend}: {len(recs)} grants across {', '.join(langs)}; {accepted} writes accepted, "
            f"{resources.get(backend, {}).get('refused', 0)} stale writes refused; overlaps {overlaps}; "
            + ("OK: no overlap, tokens increasing, count exact" if not problems else "FAILED")
        )
        for p in problems:
            print("  - " + p)
            ok = False
    if not records:
        print("no records")
        ok = False
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
