package history

import (
	"fmt"
	"sort"
	"strings"

	"github.com/anishathalye/porcupine"
)

// The mutual-exclusion model: a lock (capacity 1) or a semaphore of N permits
// taken one at a time. Its state is the set of clients holding. An acquire
// that returned a grant needs a free place and a client not already holding;
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

// MutexInput is an operation of one client on one lock or semaphore.
type MutexInput struct {
	Op       MutexOp
	Client   int
	Capacity int
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
	switch in.Op {
	case Acquire:
		can := len(h) < in.Capacity && !holds(h, c)
		taken := joinHolders(append(append([]string{}, h...), c))
		if !out.Known {
			if can {
				return []MutexState{s, taken}
			}
			return []MutexState{s}
		}
		if !out.Ok {
			return []MutexState{s}
		}
		if !can {
			return nil
		}
		return []MutexState{taken}
	case Release:
		freed := joinHolders(without(h, c))
		if !out.Known {
			return []MutexState{s, freed}
		}
		if !holds(h, c) {
			return nil
		}
		return []MutexState{freed}
	default: // Expire
		return []MutexState{joinHolders(without(h, c))}
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
			return fmt.Sprintf("%s -> %s", [...]string{"acquire", "release", "expire (lease/session over)"}[in.Op], result)
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
