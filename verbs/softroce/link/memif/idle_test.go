//go:build linux

package memif

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/rsock-go/rsock/internal/proccpu"
	"github.com/rsock-go/rsock/verbs/softroce/link"
)

// TestIdleCPU checks that two connected links with a receiver blocked on
// each cost (well) under 1% of a core while no traffic flows.
func TestIdleCPU(t *testing.T) {
	if testing.Short() {
		t.Skip("takes over a second")
	}
	srv, cli := pair(t, Config{}, Config{})
	var wg sync.WaitGroup
	for _, l := range []*Link{srv, cli} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// The receive loop, as a device runs it.
			err := l.RecvLoop(make([]link.Packet, 8), func([]link.Packet) {})
			if !errors.Is(err, link.ErrClosed) {
				var de *DisconnectError
				if !errors.As(err, &de) {
					t.Error(err)
				}
			}
		}()
	}
	// Some traffic first, so that the receivers have been polling.
	for i := range 100 {
		if err := cli.Send([]link.Packet{{Buf: mkPkt(64, byte(i)), N: 64, Addr: addrA}}); err != nil {
			t.Fatal(err)
		}
		if err := srv.Send([]link.Packet{{Buf: mkPkt(64, byte(i)), N: 64, Addr: addrB}}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(100 * time.Millisecond)
	share, shares := proccpu.LeastShare(3, time.Second)
	srv.Close()
	cli.Close()
	wg.Wait()
	t.Logf("idle: least %.3f%% of a core in windows %.4f; sleeps %d+%d", 100*share, shares,
		srv.Stats().Sleeps, cli.Stats().Sleeps)
	if share >= 0.01 {
		t.Fatalf("idle links used %.2f%% of a core", 100*share)
	}
}
