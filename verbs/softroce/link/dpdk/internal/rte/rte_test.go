//go:build dpdk

package rte

import (
	"bytes"
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if err := Init([]string{"--no-huge", "-m", "128", "--no-pci", "--no-telemetry", "--file-prefix", fmt.Sprintf("rte-test-%d", os.Getpid())}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	dir := RuntimeDir()
	code := m.Run()
	if err := Cleanup(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	os.RemoveAll(dir)
	if err := goleak.Find(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	os.Exit(code)
}

// TestRingPairBurst sends a burst through a ring pair and checks what
// arrives at the other port.
func TestRingPairBurst(t *testing.T) {
	rp, err := NewRingPair("rte_test_a", "rte_test_b", 256)
	if err != nil {
		t.Fatal(err)
	}
	pool, err := NewPool("rte_test_pool", 1023, 2048)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, p := range []uint16{rp.A, rp.B} {
			Stop(p)
			Close(p)
		}
		rp.FreeRings()
		pool.Free()
	}()
	for _, p := range []uint16{rp.A, rp.B} {
		if err := Setup(p, false, 0, 256, 256, pool); err != nil {
			t.Fatal(err)
		}
	}
	if d, err := Driver(rp.A); err != nil || d != "net_ring" {
		t.Fatalf("driver %q, %v", d, err)
	}
	if PortName(rp.B) != "net_ring_rte_test_b" {
		t.Fatalf("port name %q", PortName(rp.B))
	}
	var tx Mbufs
	if err := pool.Alloc(&tx, 10); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		d := tx.Data(i, int(tx.Len[i]))
		tx.Len[i] = uint16(60 + i)
		for j := range int(tx.Len[i]) {
			d[j] = byte(i + j)
		}
	}
	if n := Tx(rp.A, &tx, 0); n != 10 {
		FreeTx(&tx, n)
		t.Fatalf("sent %d of 10", n)
	}
	var rx Mbufs
	n := Rx(rp.B, &rx, Burst)
	defer ReleaseRx(&rx)
	if n != 10 {
		t.Fatalf("received %d of 10", n)
	}
	for i := range n {
		want := make([]byte, 60+i)
		for j := range want {
			want[j] = byte(i + j)
		}
		if got := rx.Data(i, int(rx.Len[i])); !bytes.Equal(got, want) {
			t.Fatalf("packet %d: %x", i, got)
		}
	}
	if n := Rx(rp.A, &rx, Burst); n != 0 {
		t.Fatalf("the sender received %d", n)
	}
}

// TestPoolHandsBackHotMbufs checks that a pool is a stack: the mbufs
// freed last come back first, so that a link's working set of mbufs stays
// in the cache instead of cycling through the whole pool.
func TestPoolHandsBackHotMbufs(t *testing.T) {
	pool, err := NewPool("rte_test_lifo", 1023, 2048)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Free()
	if ops := pool.Ops(); ops != "stack" {
		t.Fatalf("mempool driver %q, want stack", ops)
	}
	for round := range 20 {
		var b Mbufs
		if err := pool.Alloc(&b, Burst); err != nil {
			t.Fatal(err)
		}
		var got = map[uintptr]bool{}
		for i := range b.N {
			got[b.M[i]] = true
		}
		FreeTx(&b, 0)
		var again Mbufs
		if err := pool.Alloc(&again, Burst); err != nil {
			t.Fatal(err)
		}
		for i := range again.N {
			if !got[again.M[i]] {
				FreeTx(&again, 0)
				t.Fatalf("round %d: mbuf %d of the second burst was not among the %d just freed", round, i, Burst)
			}
		}
		FreeTx(&again, 0)
	}
}
