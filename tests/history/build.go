package history

import (
	"sort"

	"github.com/anishathalye/porcupine"
)

// Partition is the history of one lock (mutex model) or one resource (fence
// model): Porcupine operations, and the client names behind their ClientIds.
type Partition struct {
	Key     string
	Ops     []porcupine.Operation
	Clients []string
	// Pending marks the operations whose worker died before they returned.
	Pending map[int]bool
}

// infinite stands for the return of an operation whose worker died before
// the answer: after everything else in its partition.
const infinite = int64(-1)

type builder struct {
	parts map[string]*Partition
	ids   map[string]map[string]int
}

func newBuilder() *builder {
	return &builder{parts: map[string]*Partition{}, ids: map[string]map[string]int{}}
}

func (b *builder) add(key, client string, in, out interface{}, call, ret int64) {
	p := b.parts[key]
	if p == nil {
		p = &Partition{Key: key, Pending: map[int]bool{}}
		b.parts[key] = p
		b.ids[key] = map[string]int{}
	}
	id, ok := b.ids[key][client]
	if !ok {
		id = len(p.Clients)
		b.ids[key][client] = id
		p.Clients = append(p.Clients, client)
	}
	if in2, ok := in.(MutexInput); ok {
		in2.Client = id
		in = in2
	}
	p.Ops = append(p.Ops, porcupine.Operation{ClientId: id, Input: in, Output: out, Call: call, Return: ret, Metadata: client})
}

// done gives every infinite return a time after the partition's last one.
func (b *builder) done() []*Partition {
	keys := make([]string, 0, len(b.parts))
	for k := range b.parts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]*Partition, 0, len(keys))
	for _, k := range keys {
		p := b.parts[k]
		var last int64
		for _, op := range p.Ops {
			last = later(later(last, op.Call), op.Return)
		}
		for i := range p.Ops {
			if p.Ops[i].Return == infinite {
				p.Ops[i].Return = last + 1
				p.Pending[i] = true
			}
		}
		out = append(out, p)
	}
	return out
}

// byClient splits events per client, keeping each client's own order (one
// process, one operation at a time).
func byClient(events []Event) ([]string, map[string][]Event) {
	per := map[string][]Event{}
	var order []string
	for _, ev := range events {
		if _, ok := per[ev.Client]; !ok {
			order = append(order, ev.Client)
		}
		per[ev.Client] = append(per[ev.Client], ev)
	}
	return order, per
}

// FencePartitions builds the fenced-register histories, one per resource:
// each read and write, a call without a return being pending for ever.
func FencePartitions(events []Event) []*Partition {
	b := newBuilder()
	order, per := byClient(events)
	for _, c := range order {
		evs := per[c]
		for i, ev := range evs {
			if ev.Kind != "call" || (ev.Op != "read" && ev.Op != "write") || ev.Token == nil {
				continue
			}
			in := FenceInput{Write: ev.Op == "write", Token: *ev.Token}
			if in.Write && ev.Value != nil {
				in.Value = *ev.Value
			}
			out, ret := FenceOutput{}, infinite
			if i+1 < len(evs) && evs[i+1].Kind == "return" && evs[i+1].Op == ev.Op {
				r := evs[i+1]
				ret = r.TNs
				out.Known = true
				out.Ok = r.Ok != nil && *r.Ok
				if r.Value != nil {
					out.Value = *r.Value
				} else if !in.Write {
					out.Known = false // a read with no value: an error, its effect unknown
				}
			}
			b.add(ev.Resource, c, in, out, ev.TNs, ret)
		}
	}
	return b.done()
}

// MutexPartitions builds the mutual-exclusion histories, one per backend and
// lock. A grant's hold ends at its release, or else by an expiry placed
// between the grant and the moment the worker was told Lost (a "lost" event
// or a release that returned ok=false), or, when the worker's history ends
// while it holds or may hold (it died), any time after its last word. The
// two halves of a read-write lock are followed apart (a client may hold
// both: a downgrade) in one partition. A lock's reentry (a grant, with the
// held token, to a client that holds) takes no place; the release that
// matches it lets go of nothing.
func MutexPartitions(events []Event) []*Partition {
	b := newBuilder()
	var order []string
	per := map[string][]Event{}
	for _, ev := range events {
		s := ev.Client + "\x00" + ev.Mode
		if _, ok := per[s]; !ok {
			order = append(order, s)
		}
		per[s] = append(per[s], ev)
	}
	for _, s := range order {
		evs := per[s]
		c, mode := evs[0].Client, evs[0].Mode
		var (
			key       string
			holding   bool  // a grant not yet released or reported lost
			reentries int   // grants of the held lock on top of the first
			held      int64 // the token of that grant
			maybe     bool  // an acquire or release whose outcome is unknown
			granted   int64 // when the current grant returned
			lastSeen  int64
			capacity  = 1
		)
		expire := func(from, to int64) {
			b.add(key, c, MutexInput{Op: Expire, Mode: mode}, MutexOutput{Known: true, Ok: true}, from, to)
		}
		for i := 0; i < len(evs); i++ {
			ev := evs[i]
			if ev.Op != "acquire" && ev.Op != "release" && ev.Op != "lost" {
				continue
			}
			key = ev.Backend + " " + ev.Lock
			lastSeen = later(lastSeen, ev.TNs)
			if ev.Op == "lost" {
				if holding {
					expire(granted+1, ev.TNs)
					holding, reentries = false, 0
				}
				continue
			}
			if ev.Kind != "call" {
				continue
			}
			var ret *Event
			if i+1 < len(evs) && evs[i+1].Kind == "return" && evs[i+1].Op == ev.Op {
				ret = &evs[i+1]
				i++
				lastSeen = later(lastSeen, ret.TNs)
			}
			if ev.Op == "acquire" {
				if ev.Permits != nil {
					capacity = *ev.Permits
				}
				in := MutexInput{Op: Acquire, Capacity: capacity, Mode: mode}
				if ev.Count != nil {
					in.Count = *ev.Count
				}
				switch {
				case ret == nil:
					b.add(key, c, in, MutexOutput{}, ev.TNs, infinite)
					maybe = true
				case ret.Token == nil:
					// An error: it may still have been granted (a lost reply), then expired.
					b.add(key, c, in, MutexOutput{}, ev.TNs, ret.TNs)
					expire(ret.TNs+1, infinite)
				case holding && ev.Permits == nil && *ret.Token == held:
					reentries++
				default:
					b.add(key, c, in, MutexOutput{Known: true, Ok: true}, ev.TNs, ret.TNs)
					holding, granted, held, reentries = true, ret.TNs, *ret.Token, 0
				}
				continue
			}
			// release
			if holding && reentries > 0 && (ret == nil || (ret.Ok != nil && *ret.Ok)) {
				reentries-- // the lock stays held (an unanswered one changes nothing either way)
				continue
			}
			reentries = 0
			switch {
			case ret == nil:
				if holding {
					b.add(key, c, MutexInput{Op: Release, Mode: mode}, MutexOutput{}, ev.TNs, infinite)
					holding, maybe = false, true
				}
			case ret.Ok != nil && *ret.Ok:
				b.add(key, c, MutexInput{Op: Release, Mode: mode}, MutexOutput{Known: true, Ok: true}, ev.TNs, ret.TNs)
				holding = false
			case ret.Error != "":
				// The release failed: the hold ends when the lease or session does.
				if holding {
					expire(ev.TNs, infinite)
					holding = false
				}
			default: // told Lost on release
				if holding {
					expire(granted+1, ret.TNs)
					holding = false
				}
			}
		}
		if holding || maybe {
			expire(lastSeen+1, infinite)
		}
	}
	return b.done()
}

// later is max for times (the module builds with Go 1.19, Debian 12's).
func later(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}
