// Command histcheck checks the operation histories the demo and fault-suite
// workers and the conformance runners record (POLYLOCK_HISTORY_DIR) with
// Porcupine, an independent linearizability checker, against two models: the fenced register (the
// resource refuses stale tokens: a stale write accepted, or a lost update, is
// a violation) and mutual exclusion (never more holders than places unless
// the extra holder is told it lost the lock).
//
//	histcheck [-models fence,mutex] [-timeout 120s] [-html DIR] [-quiet] PATH...
//
// -quiet prints, of the partitions that pass, only a count per model (the
// conformance runners record hundreds of small histories).
//
// PATH: history files (JSON lines, see package history) or directories of
// them. Exit status 0 when every partition is linearizable under every model
// asked for, 1 on a violation (printed as a minimal failing history, with a
// Porcupine visualization written as HTML) or when the checker gives up, 2 on
// bad input.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	history "polylock/tests/history"
)

func main() {
	models := flag.String("models", "fence,mutex", "models to check: fence, mutex, or both")
	timeout := flag.Duration("timeout", 120*time.Second, "per partition and model; past it the check fails as undecided")
	htmlDir := flag.String("html", "", "where to write visualizations of violations (default: next to the first PATH)")
	quiet := flag.Bool("quiet", false, "print only violations and a count of the linearizable partitions per model")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: histcheck [-models fence,mutex] [-timeout D] [-html DIR] PATH...")
		os.Exit(2)
	}
	events, err := history.ReadPaths(flag.Args())
	if err != nil {
		fmt.Fprintln(os.Stderr, "histcheck:", err)
		os.Exit(2)
	}
	if len(events) == 0 {
		fmt.Fprintf(os.Stderr, "histcheck: no history events in %s (did the workers record? POLYLOCK_HISTORY_DIR)\n",
			strings.Join(flag.Args(), " "))
		os.Exit(1)
	}
	dir := *htmlDir
	if dir == "" {
		dir = flag.Arg(0)
		if st, err := os.Stat(dir); err == nil && !st.IsDir() {
			dir = filepath.Dir(dir)
		}
	}
	failed := false
	for _, name := range strings.Split(*models, ",") {
		var model porcupine.Model
		var parts []*history.Partition
		switch name {
		case "fence":
			model, parts = history.FenceModel(), history.FencePartitions(events)
		case "mutex":
			model, parts = history.MutexModel(), history.MutexPartitions(events)
		default:
			fmt.Fprintf(os.Stderr, "histcheck: unknown model %q\n", name)
			os.Exit(2)
		}
		passed, ops := 0, 0
		for _, p := range parts {
			v := history.Check(name, model, p, *timeout)
			if v.Result == porcupine.Ok {
				passed++
				ops += len(p.Ops)
			}
			if !*quiet || v.Result != porcupine.Ok {
				fmt.Printf("histcheck %s %s: %d operations of %d clients: %s\n", name, p.Key, len(p.Ops), len(p.Clients), verdict(v.Result))
			}
			if v.Result == porcupine.Ok {
				continue
			}
			failed = true
			fmt.Print(v.Report)
			if v.Result == porcupine.Illegal {
				html := filepath.Join(dir, "violation-"+name+"-"+safe(p.Key)+".html")
				if err := porcupine.VisualizePath(model, v.Info, html); err != nil {
					fmt.Fprintln(os.Stderr, "histcheck: visualization:", err)
				} else {
					fmt.Printf("  visualization: %s\n", html)
				}
			}
		}
		if *quiet {
			fmt.Printf("histcheck %s: %d of %d histories linearizable (%d operations)\n", name, passed, len(parts), ops)
		}
	}
	if failed {
		os.Exit(1)
	}
}

func verdict(r porcupine.CheckResult) string {
	switch r {
	case porcupine.Ok:
		return "linearizable"
	case porcupine.Illegal:
		return "VIOLATION (not linearizable)"
	default:
		return "UNDECIDED (checker timed out): treated as a failure"
	}
}

var unsafe = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

func safe(s string) string { return unsafe.ReplaceAllString(s, "_") }
