package history

import (
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// A tiny builder of worker events: each helper appends one client's call and
// return at the given times.
type hist struct{ evs []Event }

func i64(v int64) *int64 { return &v }
func bptr(v bool) *bool  { return &v }

func (h *hist) ev(client, op, kind string, t int64) *Event {
	h.evs = append(h.evs, Event{Client: client, Backend: "redis", Lock: "l", Resource: "r", Op: op, Kind: kind, TNs: t})
	return &h.evs[len(h.evs)-1]
}

func (h *hist) acquire(c string, call, ret, token int64) {
	h.ev(c, "acquire", "call", call)
	h.ev(c, "acquire", "return", ret).Token = i64(token)
}

func (h *hist) acquirePermit(c string, permits int, call, ret, token int64) {
	h.ev(c, "acquire", "call", call).Permits = &permits
	h.ev(c, "acquire", "return", ret).Token = i64(token)
}

func (h *hist) release(c string, call, ret int64, ok bool) {
	h.ev(c, "release", "call", call)
	h.ev(c, "release", "return", ret).Ok = bptr(ok)
}

func (h *hist) read(c string, token int64, call, ret, value int64) {
	h.ev(c, "read", "call", call).Token = i64(token)
	h.ev(c, "read", "return", ret).Value = i64(value)
}

func (h *hist) write(c string, token, value int64, call, ret int64, ok bool) {
	e := h.ev(c, "write", "call", call)
	e.Token, e.Value = i64(token), i64(value)
	h.ev(c, "write", "return", ret).Ok = bptr(ok)
}

// section: a grant, the fenced read, the write of count+1, a release.
func (h *hist) section(c string, t0, token, count int64, accepted bool) {
	h.acquire(c, t0, t0+1, token)
	h.read(c, token, t0+2, t0+3, count)
	h.write(c, token, count+1, t0+4, t0+5, accepted)
	h.release(c, t0+6, t0+7, true)
}

func verdicts(t *testing.T, h *hist, model string) []porcupine.CheckResult {
	t.Helper()
	var parts []*Partition
	var m porcupine.Model
	if model == "fence" {
		parts, m = FencePartitions(h.evs), FenceModel()
	} else {
		parts, m = MutexPartitions(h.evs), MutexModel()
	}
	if len(parts) == 0 {
		t.Fatalf("no %s partition built from %d events", model, len(h.evs))
	}
	var out []porcupine.CheckResult
	for _, p := range parts {
		v := Check(model, m, p, 10*time.Second)
		if v.Result == porcupine.Illegal && v.Report == "" {
			t.Errorf("an Illegal verdict with no report")
		}
		out = append(out, v.Result)
	}
	return out
}

func expect(t *testing.T, h *hist, model string, want porcupine.CheckResult) {
	t.Helper()
	for _, got := range verdicts(t, h, model) {
		if got != want {
			t.Fatalf("%s model: got %v, want %v", model, got, want)
		}
	}
}

func TestLegalHistoryPassesBothModels(t *testing.T) {
	h := &hist{}
	h.section("a", 0, 1, 0, true)
	h.section("b", 10, 2, 1, true)
	h.section("a", 20, 3, 2, true)
	expect(t, h, "fence", porcupine.Ok)
	expect(t, h, "mutex", porcupine.Ok)
}

// A paused holder (token 1) resumes after its successor's read: its write is
// refused and it is told Lost. Both models accept that.
func TestPausedHolderRefusedAndToldLostIsLegal(t *testing.T) {
	h := &hist{}
	h.acquire("a", 0, 1, 1)
	h.read("a", 1, 2, 3, 0)
	h.acquire("b", 5, 10, 2)
	h.read("b", 2, 11, 12, 0)
	h.write("a", 1, 1, 13, 14, false)
	h.ev("a", "lost", "event", 15)
	h.release("a", 16, 17, false)
	h.write("b", 2, 1, 18, 19, true)
	h.release("b", 20, 21, true)
	expect(t, h, "fence", porcupine.Ok)
	expect(t, h, "mutex", porcupine.Ok)
}

func TestStaleWriteAcceptedIsAViolation(t *testing.T) {
	h := &hist{}
	h.acquire("a", 0, 1, 1)
	h.read("a", 1, 2, 3, 0)
	h.acquire("b", 5, 10, 2)
	h.read("b", 2, 11, 12, 0)
	h.write("b", 2, 1, 13, 14, true)
	h.write("a", 1, 1, 15, 16, true) // token 1 after token 2 was accepted
	expect(t, h, "fence", porcupine.Illegal)
}

func TestStaleWriteRefusedWithoutANewerTokenIsAViolation(t *testing.T) {
	h := &hist{}
	h.acquire("a", 0, 1, 5)
	h.read("a", 5, 2, 3, 0)
	h.write("a", 5, 1, 4, 5, false) // nothing above 5 was ever let through
	expect(t, h, "fence", porcupine.Illegal)
}

func TestLostUpdateIsAViolation(t *testing.T) {
	h := &hist{}
	h.section("a", 0, 1, 0, true)
	h.section("b", 10, 2, 0, true) // read 0 after a's accepted write of 1
	expect(t, h, "fence", porcupine.Illegal)
}

// A worker killed before its write returned: the write may or may not have
// happened, and either later count is legal.
func TestUnknownWriteMayOrMayNotHaveApplied(t *testing.T) {
	for _, seen := range []int64{0, 1} {
		h := &hist{}
		h.acquire("a", 0, 1, 1)
		h.read("a", 1, 2, 3, 0)
		e := h.ev("a", "write", "call", 4)
		e.Token, e.Value = i64(1), i64(1)
		h.section("b", 10, 2, seen, true)
		expect(t, h, "fence", porcupine.Ok)
		expect(t, h, "mutex", porcupine.Ok)
	}
}

func TestOverlappingHoldersViolateMutualExclusion(t *testing.T) {
	h := &hist{}
	h.acquire("a", 0, 1, 1)
	h.acquire("b", 2, 3, 2) // granted while a holds, and a is never told
	h.release("a", 4, 5, true)
	h.release("b", 6, 7, true)
	expect(t, h, "mutex", porcupine.Illegal)
}

func TestOverlapWithTheOldHolderToldLostIsLegal(t *testing.T) {
	h := &hist{}
	h.acquire("a", 0, 1, 1)
	h.acquire("b", 2, 3, 2)
	h.ev("a", "lost", "event", 4)
	h.release("a", 5, 6, false)
	h.release("b", 6, 7, true)
	expect(t, h, "mutex", porcupine.Ok)
}

// The loss must be reported after the successor's grant could have happened:
// a grant before the old holder's expiry window opened is still a violation.
func TestLossOnlyExcusesOverlapInsideItsWindow(t *testing.T) {
	h := &hist{}
	h.acquire("b", 0, 1, 1)
	h.acquire("a", 2, 3, 2) // b still holds and is told nothing until it releases
	h.release("b", 4, 5, true)
	h.ev("a", "lost", "event", 6)
	expect(t, h, "mutex", porcupine.Illegal)
}

func TestReleaseByANonHolderIsAViolation(t *testing.T) {
	h := &hist{}
	h.acquire("a", 0, 1, 1)
	h.release("a", 2, 3, true)
	h.release("a", 4, 5, true)
	expect(t, h, "mutex", porcupine.Illegal)
}

// A holder SIGKILLed (its history just stops) may keep the lock until its
// lease or session ends, then the next grant is legal.
func TestKilledHolderExpiresLater(t *testing.T) {
	h := &hist{}
	h.acquire("a", 0, 1, 1)
	h.acquire("b", 2, 30, 2)
	h.release("b", 31, 32, true)
	expect(t, h, "mutex", porcupine.Ok)
}

func TestSemaphoreAllowsItsPermitsAndNoMore(t *testing.T) {
	h := &hist{}
	h.acquirePermit("a", 2, 0, 1, 1)
	h.acquirePermit("b", 2, 2, 3, 2)
	h.release("a", 4, 5, true)
	h.release("b", 6, 7, true)
	expect(t, h, "mutex", porcupine.Ok)
	h.acquirePermit("c", 2, 8, 9, 3)
	h.acquirePermit("d", 2, 10, 11, 4)
	h.acquirePermit("e", 2, 12, 13, 5) // a third holder of two permits
	h.release("c", 14, 15, true)
	h.release("d", 16, 17, true)
	h.release("e", 18, 19, true)
	expect(t, h, "mutex", porcupine.Illegal)
}

// Porcupine finds the same violation among many legal sections, and the
// report names the offending operations.
func TestViolationReportNamesTheOffendingOperations(t *testing.T) {
	h := &hist{}
	for i := int64(0); i < 200; i++ {
		h.section("w", i*10, i+1, i, true)
	}
	h.acquire("x", 2000, 2001, 300)
	h.read("x", 300, 2002, 2003, 199) // the count is 200
	parts := FencePartitions(h.evs)
	v := Check("fence", FenceModel(), parts[0], 10*time.Second)
	if v.Result != porcupine.Illegal {
		t.Fatalf("got %v", v.Result)
	}
	for _, want := range []string{"read(token 300) -> 199", "token 200, count 200"} {
		if !strings.Contains(v.Report, want) {
			t.Errorf("report lacks %q:\n%s", want, v.Report)
		}
	}
}

// A lock's reentry returns the held token and takes one more release; the
// lock is free only after the last.
func TestReentryWithTheHeldTokenIsLegal(t *testing.T) {
	h := &hist{}
	h.acquire("a", 0, 1, 7)
	h.acquire("a", 2, 3, 7)
	h.release("a", 4, 5, true)
	h.release("a", 6, 7, true)
	h.acquire("b", 8, 9, 8)
	h.release("b", 10, 11, true)
	expect(t, h, "mutex", porcupine.Ok)
}

// A second grant with another token to a client that holds is a second
// place, not a reentry: a double grant.
func TestSecondGrantWithAnotherTokenIsAViolation(t *testing.T) {
	h := &hist{}
	h.acquire("a", 0, 1, 7)
	h.acquire("a", 2, 3, 8)
	h.release("a", 4, 5, true)
	h.release("a", 6, 7, true)
	expect(t, h, "mutex", porcupine.Illegal)
}

// A grant to another client between a reentrant holder's releases, before
// its last one, overlaps its hold.
func TestGrantBeforeTheLastReentrantReleaseIsAViolation(t *testing.T) {
	h := &hist{}
	h.acquire("a", 0, 1, 7)
	h.acquire("a", 2, 3, 7)
	h.release("a", 4, 5, true)
	h.acquire("b", 6, 7, 8)
	h.release("a", 8, 9, true)
	h.release("b", 10, 11, true)
	expect(t, h, "mutex", porcupine.Illegal)
}

func (h *hist) acquireMode(c, mode string, call, ret, token int64) {
	h.ev(c, "acquire", "call", call).Mode = mode
	h.ev(c, "acquire", "return", ret).Token = i64(token)
	h.evs[len(h.evs)-1].Mode = mode
}

func (h *hist) releaseMode(c, mode string, call, ret int64) {
	h.ev(c, "release", "call", call).Mode = mode
	h.ev(c, "release", "return", ret).Ok = bptr(true)
	h.evs[len(h.evs)-1].Mode = mode
}

// Readers share; a writer downgrades by reading before it lets go of the
// write half; the next writer comes after every reader.
func TestReadersShareAndADowngradeIsLegal(t *testing.T) {
	h := &hist{}
	h.acquireMode("a", "read", 0, 1, 1)
	h.acquireMode("b", "read", 2, 3, 1)
	h.releaseMode("a", "read", 4, 5)
	h.releaseMode("b", "read", 6, 7)
	h.acquireMode("c", "write", 8, 9, 2)
	h.acquireMode("c", "read", 10, 11, 3)
	h.releaseMode("c", "write", 12, 13)
	h.acquireMode("d", "read", 14, 15, 3)
	h.releaseMode("c", "read", 16, 17)
	h.releaseMode("d", "read", 18, 19)
	h.acquireMode("a", "write", 20, 21, 4)
	h.releaseMode("a", "write", 22, 23)
	expect(t, h, "mutex", porcupine.Ok)
}

func TestWriterBesideAReaderIsAViolation(t *testing.T) {
	h := &hist{}
	h.acquireMode("a", "read", 0, 1, 1)
	h.acquireMode("b", "write", 2, 3, 2)
	h.releaseMode("a", "read", 4, 5)
	h.releaseMode("b", "write", 6, 7)
	expect(t, h, "mutex", porcupine.Illegal)
}

func TestReaderBesideAnotherWriterIsAViolation(t *testing.T) {
	h := &hist{}
	h.acquireMode("a", "write", 0, 1, 1)
	h.acquireMode("b", "read", 2, 3, 1)
	h.releaseMode("a", "write", 4, 5)
	h.releaseMode("b", "read", 6, 7)
	expect(t, h, "mutex", porcupine.Illegal)
}

// A grant of two permits takes two places of the semaphore.
func TestSemaphoreGrantOfTwoTakesTwoPlaces(t *testing.T) {
	two := 2
	h := &hist{}
	h.ev("a", "acquire", "call", 0).Permits = &two
	h.evs[len(h.evs)-1].Count = &two
	h.ev("a", "acquire", "return", 1).Token = i64(1)
	h.release("a", 2, 3, true)
	h.acquirePermit("b", 2, 4, 5, 2)
	h.acquirePermit("c", 2, 6, 7, 3)
	expect(t, h, "mutex", porcupine.Ok)
	h.ev("a", "acquire", "call", 8).Permits = &two
	h.evs[len(h.evs)-1].Count = &two
	h.ev("a", "acquire", "return", 9).Token = i64(4) // b and c still hold
	h.release("b", 10, 11, true)
	h.release("c", 12, 13, true)
	expect(t, h, "mutex", porcupine.Illegal)
}
