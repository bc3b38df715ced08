// Package history turns the operation logs that the demo and fault-suite
// workers and the conformance runners (tests/conformance/README.md) write
// (one JSON line per call, return or loss, stamped on the machine's
// CLOCK_MONOTONIC, shared by every process of every language) into
// Porcupine histories, one per lock and one per fenced resource, and checks
// them against the models in fence.go and mutex.go.
package history

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Event is one line of a worker's history file.
//
//	{"client": "rust-0/4242", "backend": "redis", "lock": "faults/x", "resource": "demo:resource:redis:faults/x",
//	 "op": "acquire"|"read"|"write"|"release"|"lost", "kind": "call"|"return"|"event", "t_ns": 123, ...}
//
// Inputs on calls: acquire "permits" (absent: a lock, capacity 1) and "count" (the permits it asks
// for, absent: 1); read "token"; write "token" and "value" (the count written); release "token".
// "mode" ("read" or "write", on acquire, release and lost) names a half of a read-write lock: absent
// for a lock or a semaphore. A lock's acquire that returns while its client holds, with the token of
// that hold, is a reentry: it takes nothing more, and it takes one more release to let go. Outputs on returns: acquire "token" or "error"; read
// "value" (the count read, -1 when the resource refused the token); write "ok" (accepted); release
// "ok" (false: the worker was told it had lost the lock). "lost" (kind "event") is the moment the
// worker was told it lost the lock it holds.
type Event struct {
	Client   string `json:"client"`
	Backend  string `json:"backend"`
	Lock     string `json:"lock"`
	Resource string `json:"resource"`
	Op       string `json:"op"`
	Kind     string `json:"kind"`
	TNs      int64  `json:"t_ns"`
	Permits  *int   `json:"permits,omitempty"`
	Count    *int   `json:"count,omitempty"`
	Mode     string `json:"mode,omitempty"`
	Token    *int64 `json:"token,omitempty"`
	Value    *int64 `json:"value,omitempty"`
	Ok       *bool  `json:"ok,omitempty"`
	Error    string `json:"error,omitempty"`
}

// ReadPaths reads every history file named, or every *.jsonl file under a
// directory named. A truncated last line (a worker killed mid-write) is
// skipped: the call it would have closed stays pending.
func ReadPaths(paths []string) ([]Event, error) {
	var files []string
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return nil, err
		}
		if !st.IsDir() {
			files = append(files, p)
			continue
		}
		err = filepath.WalkDir(p, func(path string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() && strings.HasSuffix(path, ".jsonl") {
				files = append(files, path)
			}
			return err
		})
		if err != nil {
			return nil, err
		}
	}
	sort.Strings(files)
	var events []Event
	for _, f := range files {
		evs, err := readFile(f)
		if err != nil {
			return nil, err
		}
		events = append(events, evs...)
	}
	return events, nil
}

func readFile(path string) ([]Event, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var events []Event
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" {
			continue
		}
		var ev Event
		if err := json.Unmarshal([]byte(text), &ev); err != nil {
			continue // a line cut short by a kill
		}
		if ev.Client == "" || ev.Op == "" || ev.Kind == "" {
			return nil, fmt.Errorf("%s:%d: not a history event: %s", path, line, text)
		}
		events = append(events, ev)
	}
	return events, sc.Err()
}
