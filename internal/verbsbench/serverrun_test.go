package verbsbench

import (
	"context"
	"testing"
	"time"

	"github.com/rsock-go/rsock/verbs"
)

// idleCQ is a completion queue that never gets a completion.
type idleCQ struct{}

func (idleCQ) Poll([]verbs.WC) (int, error) { return 0, nil }
func (idleCQ) Wait(ctx context.Context) error {
	<-ctx.Done()
	return ctx.Err()
}
func (idleCQ) Notify() <-chan struct{} { return nil }
func (idleCQ) Close() error            { return nil }

// TestServerWaitAfterDone: Done may arrive between the server's check of
// its count and its wait; a count already complete must not wait for a
// completion that cannot come.
func TestServerWaitAfterDone(t *testing.T) {
	s := &serverRun{ctx: context.Background(), doneC: make(chan struct{}), done: Done{Msgs: 5}, grace: time.Minute}
	close(s.doneC)
	start := time.Now()
	if err := s.wait(idleCQ{}, 5); err != nil {
		t.Fatalf("wait with the count complete: %v", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("wait with the count complete took %v", d)
	}
	s.grace = 50 * time.Millisecond
	if err := s.wait(idleCQ{}, 4); err == nil {
		t.Fatal("wait one message short returned nil, want the shortfall")
	}
}
