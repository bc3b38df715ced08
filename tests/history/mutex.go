package history

import (
	"fmt"
	"sort"
	"strings"

	"github.com/anishathalye/porcupine"
)

// The mutual-exclusion model: a lock (capacity 1), a semaphore of N permits
// (a grant takes Count of them), or a read-write lock (readers share, a
// writer excludes every other client; the writer itself may also read, a
// downgrade). Its state is the list of holds: a client's number for each
// place it takes of a lock or semaphore, "<client>:r" and "<client>:w" for
// the halves of a read-write lock. An acquire that returned a grant needs a
// free place (a read: no other client writing; a write: no other client
// holding) and a client not already holding that place;
// a release that returned normally needs the caller to hold. The only other
// way out is an expiry, which the history builder adds where the lease or
// session may have ended: between a grant and the moment its worker was told
// Lost (a reported loss), and after a worker's last word when it died
// holding. An expiry ends the client's hold if it has one. So two clients
// holding past one place, neither of them told, is Illegal.

// MutexOp names the three operations.
type MutexOp int

const (
	Acquire MutexOp = iota
	Release
	Expire
)

// MutexInput is an operation of one client on one lock, semaphore or half of
// a read-write lock.
type MutexInput struct {
	Op       MutexOp
	Client   int
	Capacity int
	// Count is the number of places an acquire takes (0 counts as 1).
	Count int
	// Mode is "read" or "write" for a half of a read-write lock, "" otherwise.
	Mode string
}

// place is what client c holds in mode: its number for a lock or semaphore,
// the number and the half for a read-write lock.
func place(c string, mode string) string {
	switch mode {
	case "read":
		return c + ":r"
	case "write":
		return c + ":w"
	}
	return c
}

// mayTake says whether client c can be granted in.Mode in holds h (c holds
// nothing of that mode yet).
func mayTake(h []string, c string, in MutexInput) bool {
	if holds(h, place(c, in.Mode)) {
		return false
	}
	switch in.Mode {
	case "read":
		for _, x := range h {
			if strings.HasSuffix(x, ":w") && x != place(c, "write") {
				return false
			}
		}
		return true
	case "write":
		for _, x := range h {
			if x != place(c, "read") {
				return false
			}
		}
		return true
	}
	return len(h)+places(in) <= in.Capacity
}

func places(in MutexInput) int {
	if in.Mode != "" || in.Count < 1 {
		return 1
	}
	return in.Count
}

// MutexOutput says whether it returned normally; Known is false when the
// worker died (or got an error) first: it may or may not have taken effect.
type MutexOutput struct {
	Known bool
	Ok    bool
}

// MutexState is the sorted list of holders, joined (a comparable value).
type MutexState string

func holders(s MutexState) []string {
	if s == "" {
		return nil
	}
	return strings.Split(string(s), ",")
}

func joinHolders(h []string) MutexState {
	sort.Strings(h)
	return MutexState(strings.Join(h, ","))
}

func holds(h []string, c string) bool {
	for _, x := range h {
		if x == c {
			return true
		}
	}
	return false
}

func without(h []string, c string) []string {
	out := make([]string, 0, len(h))
	for _, x := range h {
		if x != c {
			out = append(out, x)
		}
	}
	return out
}

// MutexStep lists the states after `in` answered `out` in `s`.
func MutexStep(s MutexState, in MutexInput, out MutexOutput) []MutexState {
	h := holders(s)
	c := fmt.Sprint(in.Client)
	mine := place(c, in.Mode)
	switch in.Op {
	case Acquire:
		can := mayTake(h, c, in)
		taken := append([]string{}, h...)
		for i := 0; i < places(in); i++ {
			taken = append(taken, mine)
		}
		if !out.Known {
			if can {
				return []MutexState{s, joinHolders(taken)}
			}
			return []MutexState{s}
		}
		if !out.Ok {
			return []MutexState{s}
		}
		if !can {
			return nil
		}
		return []MutexState{joinHolders(taken)}
	case Release:
		freed := joinHolders(without(h, mine))
		if !out.Known {
			return []MutexState{s, freed}
		}
		if !holds(h, mine) {
			return nil
		}
		return []MutexState{freed}
	default: // Expire
		return []MutexState{joinHolders(without(h, mine))}
	}
}

// MutexModel is the mutual-exclusion model as a Porcupine model.
func MutexModel() porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Init: func() []interface{} { return []interface{}{MutexState("")} },
		Step: func(state, input, output interface{}) []interface{} {
			next := MutexStep(state.(MutexState), input.(MutexInput), output.(MutexOutput))
			states := make([]interface{}, len(next))
			for i, n := range next {
				states[i] = n
			}
			return states
		},
		DescribeOperation: func(input, output interface{}) string {
			in, out := input.(MutexInput), output.(MutexOutput)
			result := "ok"
			if !out.Known {
				result = "?"
			} else if !out.Ok {
				result = "failed"
			}
			what := [...]string{"acquire", "release", "expire (lease/session over)"}[in.Op]
			if in.Mode != "" {
				what += " " + in.Mode
			} else if in.Op == Acquire && places(in) > 1 {
				what += fmt.Sprintf(" %d", places(in))
			}
			return fmt.Sprintf("%s -> %s", what, result)
		},
		DescribeState: func(state interface{}) string {
			if state.(MutexState) == "" {
				return "free"
			}
			return "held by client " + string(state.(MutexState))
		},
	}
	return nm.ToModel()
}
