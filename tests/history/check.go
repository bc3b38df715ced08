package history

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// Verdict is the outcome of checking one partition against one model.
type Verdict struct {
	Model     string
	Partition *Partition
	Result    porcupine.CheckResult
	// Report explains an Illegal or Unknown result: the longest prefix
	// Porcupine could linearize, the state it reached, and the operations
	// none of which can come next (the minimal failing history).
	Report string
	Info   porcupine.LinearizationInfo
}

// Check runs Porcupine on one partition.
func Check(name string, model porcupine.Model, p *Partition, timeout time.Duration) Verdict {
	res, info := porcupine.CheckOperationsVerbose(model, p.Ops, timeout)
	v := Verdict{Model: name, Partition: p, Result: res, Info: info}
	switch res {
	case porcupine.Illegal:
		v.Report = explain(model, p, info)
	case porcupine.Unknown:
		v.Report = fmt.Sprintf("the checker gave up after %s on %d operations: neither linearizable nor shown "+
			"not to be (a history this large with this many unknown outcomes needs a longer -timeout, or "+
			"shorter rows)", timeout, len(p.Ops))
	}
	return v
}

func describe(model porcupine.Model, p *Partition, id int) string {
	op := p.Ops[id]
	ret := fmt.Sprint(op.Return)
	if p.Pending[id] {
		ret = "open (no answer: it may take effect any time after its call)"
	}
	return fmt.Sprintf("%-16s %-55s call %d return %s", p.Clients[op.ClientId],
		model.DescribeOperation(op.Input, op.Output), op.Call, ret)
}

// explain prints the tail of the longest partial linearization with the
// state it reached, then the operations that could come next by real time
// (called before the earliest return among those not linearized) and that
// the model refuses there.
func explain(model porcupine.Model, p *Partition, info porcupine.LinearizationInfo) string {
	var best []int
	for _, lin := range info.PartialLinearizations()[0] {
		if len(lin) > len(best) {
			best = lin
		}
	}
	var b strings.Builder
	states := []interface{}{model.Init()}
	for _, id := range best {
		op := p.Ops[id]
		_, next := model.Step(states[len(states)-1], op.Input, op.Output)
		states = append(states, next)
	}
	fmt.Fprintf(&b, "linearizable up to %d of %d operations; the last of them, in that order:\n", len(best), len(p.Ops))
	from := len(best) - 6
	if from < 0 {
		from = 0
	}
	for i := from; i < len(best); i++ {
		fmt.Fprintf(&b, "    %s\n", describe(model, p, best[i]))
	}
	fmt.Fprintf(&b, "  state then: %s\n", model.DescribeState(states[len(states)-1]))
	done := map[int]bool{}
	for _, id := range best {
		done[id] = true
	}
	var rest []int
	earliest := int64(1<<63 - 1)
	for i, op := range p.Ops {
		if !done[i] {
			rest = append(rest, i)
			if op.Return < earliest {
				earliest = op.Return
			}
		}
	}
	sort.Slice(rest, func(a, c int) bool { return p.Ops[rest[a]].Call < p.Ops[rest[c]].Call })
	fmt.Fprintf(&b, "  none of these can come next:\n")
	for _, id := range rest {
		if p.Ops[id].Call > earliest {
			break
		}
		fmt.Fprintf(&b, "    %s\n", describe(model, p, id))
	}
	return b.String()
}
