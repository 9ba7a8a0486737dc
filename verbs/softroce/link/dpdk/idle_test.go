//go:build dpdk

package dpdk

import (
	"testing"
	"time"

	"github.com/rsock-go/rsock/internal/proccpu"
	"github.com/rsock-go/rsock/verbs/softroce/link"
)

// TestIdleCPU checks that two links with their receive loops running
// cost under 1% of a core once traffic has stopped for deepIdle (net_ring
// has no rx interrupts: the loops back off in sleeps). The least of a few windows
// counts, as other processes on the machine add to this one's CPU time
// through the runtime's own threads.
func TestIdleCPU(t *testing.T) {
	if testing.Short() {
		t.Skip("takes over a second")
	}
	a, b := ringLinks(t)
	rx := map[*Link]<-chan link.Packet{a: receive(t, a), b: receive(t, b)}
	// Traffic first, so that the receivers have been polling.
	for i := range 100 {
		for _, dir := range [][2]*Link{{a, b}, {b, a}} {
			if err := dir[0].Send([]link.Packet{{Buf: mkPkt(64, byte(i)), N: 64, Addr: dir[1].LocalAddr()}}); err != nil {
				t.Fatal(err)
			}
			select {
			case <-rx[dir[1]]:
			case <-time.After(10 * time.Second):
				t.Fatalf("packet %d lost; stats %+v %+v", i, dir[0].Stats(), dir[1].Stats())
			}
		}
	}
	time.Sleep(deepIdle + 100*time.Millisecond)
	least, shares := proccpu.LeastShare(3, 400*time.Millisecond)
	t.Logf("idle windows: %.4f of a core", shares)
	sa, sb := a.Stats(), b.Stats()
	t.Logf("least %.3f%% of a core; sleeps %d+%d", 100*least, sa.Sleeps, sb.Sleeps)
	if sa.Sleeps == 0 || sb.Sleeps == 0 {
		t.Fatalf("a receiver never slept: %+v %+v", sa, sb)
	}
	if least >= 0.01 {
		t.Fatalf("idle links used %.2f%% of a core", 100*least)
	}
}
