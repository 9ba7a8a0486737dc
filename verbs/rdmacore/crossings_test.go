//go:build rdmacore

package rdmacore

import (
	"io"
	"testing"

	"github.com/rsock-go/rsock/rsock"
)

// TestCgoCallsPerMessage streams 64-byte messages over an rsock stream
// between two endpoints on the device and counts the data path's cgo
// calls per message, both ends together: one post per write, polls and
// receive reposts per batch of completions, completion events.
func TestCgoCallsPerMessage(t *testing.T) {
	d := openTestDevice(t)
	var eps [2]*rsock.Endpoint
	var err error
	for i := range eps {
		if eps[i], err = rsock.NewEndpoint(d, rsock.Config{KeepAlive: -1}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { eps[i].Close() })
	}
	var ss [2]*rsock.Stream
	for i := range ss {
		if ss[i], err = eps[i].Connect(eps[1-i].Params(), rsock.ConnectOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ss[i].Close() })
	}
	// Batching depends on timing: the reader batches when it falls
	// behind. Under heavy load on the emulated guest one run can come out
	// at the bound (4.03 seen in CI), so the test takes the best of three
	// runs. Unbatched code costs 5 or more in every run.
	const msgs, size, runs = 4000, 64, 3
	var seen []float64
	for range runs {
		per := cgoCallsPerMessage(t, ss[0], ss[1], msgs, size)
		seen = append(seen, per)
		if per <= maxCgoCallsPerMessage {
			return
		}
	}
	t.Errorf("cgo calls per message in %d runs: %.2f; want at most %.1f in one: completions or reposts are not batched", runs, seen, maxCgoCallsPerMessage)
}

// cgoCallsPerMessage writes msgs messages of size bytes on w, reads them
// all from r, and returns the data path's cgo calls per message, writer
// and reader together.
func cgoCallsPerMessage(t *testing.T, w, r *rsock.Stream, msgs, size int) float64 {
	t.Helper()
	read := make(chan error, 1)
	go func() {
		_, err := io.CopyN(io.Discard, r, int64(msgs*size))
		read <- err
	}()
	before := cgoCalls.Load()
	msg := make([]byte, size)
	for range msgs {
		if _, err := w.Write(msg); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-read; err != nil {
		t.Fatal(err)
	}
	calls := cgoCalls.Load() - before
	per := float64(calls) / float64(msgs)
	// Without batching a message costs the writer a post and a poll and
	// the reader a poll, a repost and an event: 5 or more (5.03 counted on
	// rxe0 with one completion per poll). Batched, the README counts 2.35
	// on a quiet machine; a loaded one batches less (3.30 and 4.03 seen
	// under emulation on a loaded host).
	t.Logf("%d messages of %d B: %d cgo calls, %.2f per message (writer and reader together)", msgs, size, calls, per)
	return per
}

// maxCgoCallsPerMessage is the README's bound on the data path's cgo
// calls per 64 B message, writer and reader together: between batched
// (2.35) and unbatched (5).
const maxCgoCallsPerMessage = 4.0
