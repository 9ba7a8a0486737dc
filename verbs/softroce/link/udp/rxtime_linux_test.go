//go:build linux

package udp

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestRxTime sends packets over loopback, with and without GRO, and checks
// that Recv stamps each with the kernel's receive time (SO_TIMESTAMPNS):
// after the send began, and before Recv returned.
func TestRxTime(t *testing.T) {
	for _, c := range offloadCombos {
		t.Run(c.name, func(t *testing.T) {
			a := listenOffloads(t, loop4, c.gso, false)
			b := listenOffloads(t, loop4, false, c.gro)
			r := rand.New(rand.NewPCG(9, 10))
			tx := bufs(32, 1028)
			for i := range tx {
				fill(&tx[i], 1024, b.LocalAddr(), r)
			}
			before := time.Now().UnixNano()
			if err := a.Send(tx); err != nil {
				t.Fatal(err)
			}
			got := recvN(t, b, len(tx), 1028)
			after := time.Now().UnixNano()
			for i := range got {
				if rt := got[i].RxTime; rt < before || rt > after {
					t.Fatalf("packet %d stamped %d, want within [%d, %d] (sent, received)", i, rt, before, after)
				}
			}
		})
	}
}

// TestParseControlTimestamp: a receive timestamp is read from its control
// message, beside a TOS; a malformed one (nanoseconds past a second) is
// not believed.
func TestParseControlTimestamp(t *testing.T) {
	ts := func(sec, nsec uint64) []byte {
		b := make([]byte, unix.CmsgSpace(16))
		h := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
		h.Level, h.Type = unix.SOL_SOCKET, unix.SCM_TIMESTAMPNS
		h.SetLen(unix.CmsgLen(16))
		binary.NativeEndian.PutUint64(b[unix.CmsgLen(0):], sec)
		binary.NativeEndian.PutUint64(b[unix.CmsgLen(0)+8:], nsec)
		return b
	}
	tos := make([]byte, unix.CmsgSpace(1))
	h := (*unix.Cmsghdr)(unsafe.Pointer(&tos[0]))
	h.Level, h.Type = unix.IPPROTO_IP, unix.IP_TOS
	h.SetLen(unix.CmsgLen(1))
	tos[unix.CmsgLen(0)] = 3
	c := parseControl(append(append([]byte{}, tos...), ts(1700000000, 123)...))
	if c.rxTime != 1700000000*1e9+123 || c.ecn != 3 {
		t.Fatalf("parsed %+v, want rxTime %d and ECN 3", c, int64(1700000000*1e9+123))
	}
	if c := parseControl(ts(1700000000, 1e9)); c.rxTime != 0 {
		t.Fatalf("nanoseconds past a second: rxTime %d, want 0", c.rxTime)
	}
	if c := parseControl(ts(1700000000, 5)[:unix.CmsgLen(0)+8]); c.rxTime != 0 {
		t.Fatalf("a truncated timestamp: rxTime %d, want 0", c.rxTime)
	}
}
