package memif

import (
	"errors"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rsock-go/rsock/verbs/softroce/link"
)

func cpuTime(t *testing.T) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

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
	// The least of three windows: the process's CPU time also counts the
	// runtime's own work (GC, the race detector), which a loaded machine
	// can bunch into one window.
	var used, wall time.Duration
	share := 1.0
	for range 3 {
		c0, w0 := cpuTime(t), time.Now()
		time.Sleep(time.Second)
		u, w := cpuTime(t)-c0, time.Since(w0)
		if s := float64(u) / float64(w); s < share {
			share, used, wall = s, u, w
		}
	}
	srv.Close()
	cli.Close()
	wg.Wait()
	t.Logf("idle: %v CPU in %v (%.3f%% of a core); sleeps %d+%d", used, wall.Round(time.Millisecond),
		100*share, srv.Stats().Sleeps, cli.Stats().Sleeps)
	if share >= 0.01 {
		t.Fatalf("idle links used %.2f%% of a core", 100*share)
	}
}
