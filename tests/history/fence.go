package history

import (
	"fmt"

	"github.com/anishathalye/porcupine"
)

// The fenced register: the protected resource of demo/resource.lua. Its state
// is the greatest token it has let through and the count stored. An access
// (the fenced read, or the write of count+1) with token t goes through only
// if t is not below that greatest token, and then raises it to t; a refused
// access changes nothing. Tokens are unique per grant, so "not below" lets a
// holder's write follow its own read and nothing else: a write accepted from
// a token lower than one accepted before (a stale write) is Illegal, and so is
// a read that returns a count no linearization of the accepted writes stored
// (a lost update).

// FenceInput is a read or a write on the resource.
type FenceInput struct {
	Write bool
	Token int64
	Value int64 // write: the count written
}

// FenceOutput is what the resource answered; Known is false when the worker
// died before the answer (the access may or may not have happened).
type FenceOutput struct {
	Known bool
	Ok    bool  // write: accepted
	Value int64 // read: the count, -1 when refused
}

// FenceState is the resource's greatest token and count.
type FenceState struct {
	Max   int64
	Count int64
}

// FenceStep lists the states the resource can be in after `in` answered
// `out` in `s` (none: that answer is impossible there).
func FenceStep(s FenceState, in FenceInput, out FenceOutput) []FenceState {
	admits := in.Token >= s.Max
	applied := s
	applied.Max = in.Token
	if in.Write {
		applied.Count = in.Value
	}
	if !out.Known {
		// Either it never reached the resource, or it did and was judged as any access is.
		if admits {
			return []FenceState{s, applied}
		}
		return []FenceState{s}
	}
	if in.Write {
		if out.Ok != admits {
			return nil
		}
		if out.Ok {
			return []FenceState{applied}
		}
		return []FenceState{s}
	}
	if out.Value < 0 {
		if admits {
			return nil
		}
		return []FenceState{s}
	}
	if !admits || out.Value != s.Count {
		return nil
	}
	return []FenceState{applied}
}

// FenceModel is the fenced register as a Porcupine model.
func FenceModel() porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Init: func() []interface{} { return []interface{}{FenceState{}} },
		Step: func(state, input, output interface{}) []interface{} {
			next := FenceStep(state.(FenceState), input.(FenceInput), output.(FenceOutput))
			states := make([]interface{}, len(next))
			for i, n := range next {
				states[i] = n
			}
			return states
		},
		DescribeOperation: func(input, output interface{}) string {
			in, out := input.(FenceInput), output.(FenceOutput)
			result := "?"
			switch {
			case !out.Known:
			case in.Write && out.Ok:
				result = "accepted"
			case in.Write:
				result = "refused"
			case out.Value < 0:
				result = "refused"
			default:
				result = fmt.Sprint(out.Value)
			}
			if in.Write {
				return fmt.Sprintf("write(token %d, count %d) -> %s", in.Token, in.Value, result)
			}
			return fmt.Sprintf("read(token %d) -> %s", in.Token, result)
		},
		DescribeState: func(state interface{}) string {
			s := state.(FenceState)
			return fmt.Sprintf("token %d, count %d", s.Max, s.Count)
		},
	}
	return nm.ToModel()
}
