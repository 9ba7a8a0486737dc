//go:build linux

package udp

import (
	"math/rand/v2"
	"testing"
	"time"
)

// TestArrived: every packet Recv returns carries the kernel's arrival
// time (SO_TIMESTAMPNS), with every combination of GSO and GRO: no
// earlier than the send and no later than the read's end, and before the
// read began for packets that waited in the socket: the receiver reads
// 200 ms after the send. (Not every packet: on a loaded machine the
// softirq that delivers a packet to the socket, and stamps it, ran 50 ms
// after the send.) Except for a GSO message looped back whole to a GRO
// socket: in about one run in thirty the kernel had not stamped it, and
// it carries the time it was read (so a hold measured by it reads as
// none, the safe side). The hold echoes (softroce/holdecho_qp.go) time a
// process's delay by it.
func TestArrived(t *testing.T) {
	for _, c := range offloadCombos {
		t.Run(c.name, func(t *testing.T) {
			a := listenOffloads(t, loop4, c.gso, false)
			b := listenOffloads(t, loop4, false, c.gro)
			r := rand.New(rand.NewPCG(9, 10))
			tx := bufs(40, 1028)
			for i := range tx {
				fill(&tx[i], 1024, b.LocalAddr(), r)
			}
			before := time.Now().UnixNano()
			if err := a.Send(tx); err != nil {
				t.Fatal(err)
			}
			time.Sleep(200 * time.Millisecond)
			read := time.Now().UnixNano()
			got := recvN(t, b, len(tx), 1028)
			after := time.Now().UnixNano()
			waited := 0
			for i, p := range got {
				if p.Arrived < before || p.Arrived > after {
					t.Fatalf("packet %d: arrived %v after the send began, read from %v to %v",
						i, time.Duration(p.Arrived-before), time.Duration(read-before), time.Duration(after-before))
				}
				if p.Arrived < read {
					waited++
				}
			}
			if waited == 0 && !(c.gso && c.gro) {
				t.Fatalf("no packet stamped before the read began, 200 ms after the send: the stamps are the read's")
			}
		})
	}
}
