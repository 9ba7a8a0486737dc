package softroce

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/rsock-go/rsock/verbs"
	"github.com/rsock-go/rsock/verbs/softroce/link/pipe"
)

// TestRemoteAccessErrors: each bad remote access gets the right NAK, the
// right completion at the requester, and leaves memory untouched.
func TestRemoteAccessErrors(t *testing.T) {
	const size = 64 << 10
	cases := []struct {
		name   string
		access verbs.Access // of the target MR
		wr     func(a, b *node, extra verbs.MR) verbs.SendWR
		status verbs.WCStatus
	}{
		{"wrong rkey", 0, func(a, b *node, _ verbs.MR) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{a.sge(0, 100)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey() ^ 0x5a5a}
		}, verbs.WCRemAccessErr},
		{"out of bounds", 0, func(a, b *node, _ verbs.MR) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{a.sge(0, 3000)}, RemoteAddr: b.mr.Addr() + size - 1000, RKey: b.mr.RKey()}
		}, verbs.WCRemAccessErr},
		{"below start", 0, func(a, b *node, _ verbs.MR) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{a.sge(0, 10)}, RemoteAddr: b.mr.Addr() - 8, RKey: b.mr.RKey()}
		}, verbs.WCRemAccessErr},
		{"address wraps", 0, func(a, b *node, _ verbs.MR) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{a.sge(0, 10)}, RemoteAddr: ^uint64(3), RKey: b.mr.RKey()}
		}, verbs.WCRemAccessErr},
		{"write without remote write", verbs.AccessLocalWrite | verbs.AccessRemoteRead, func(a, b *node, m verbs.MR) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{a.sge(0, 10)}, RemoteAddr: m.Addr(), RKey: m.RKey()}
		}, verbs.WCRemAccessErr},
		{"read without remote read", verbs.AccessLocalWrite | verbs.AccessRemoteWrite, func(a, b *node, m verbs.MR) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.WRRDMARead, SGL: []verbs.SGE{a.sge(0, 10)}, RemoteAddr: m.Addr(), RKey: m.RKey()}
		}, verbs.WCRemAccessErr},
		{"atomic without remote atomic", verbs.AccessLocalWrite | verbs.AccessRemoteWrite, func(a, b *node, m verbs.MR) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.WRAtomicFetchAdd, SGL: []verbs.SGE{a.sge(0, 8)}, RemoteAddr: m.Addr(), RKey: m.RKey(), CompareAdd: 1}
		}, verbs.WCRemAccessErr},
		{"misaligned atomic", 0, func(a, b *node, _ verbs.MR) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.WRAtomicCmpAndSwp, SGL: []verbs.SGE{a.sge(0, 8)}, RemoteAddr: b.mr.Addr() + 4, RKey: b.mr.RKey(), Swap: 1}
		}, verbs.WCRemInvReqErr},
		{"MR of another PD", 0, func(a, b *node, m verbs.MR) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{a.sge(0, 10)}, RemoteAddr: m.Addr(), RKey: m.RKey()}
		}, verbs.WCRemAccessErr},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a, b := newPair(t, pipeLinks, pipe.Faults{}, pairOpts{bufSize: size})
			extra := b.mr
			if tc.access != 0 || tc.name == "MR of another PD" {
				buf, err := verbs.AllocBuffer(4096)
				must(t, err)
				t.Cleanup(func() { verbs.FreeBuffer(buf) })
				pd := b.pd
				access := tc.access
				if tc.name == "MR of another PD" {
					pd, err = b.dev.AllocPD()
					must(t, err)
					access = verbs.AccessLocalWrite | verbs.AccessRemoteWrite
				}
				extra, err = pd.RegMR(buf, access)
				must(t, err)
			}
			for i := range a.buf[:4096] {
				a.buf[i] = 0xee
			}
			before := append([]byte(nil), b.buf...)
			extraBefore := append([]byte(nil), extra.Buf()...)
			wr := tc.wr(a, b, extra)
			wr.ID = 42
			a.postSend(wr)
			wc := waitWC(t, a.scq, 5e9)
			if wc.WRID != 42 || wc.Status != tc.status {
				t.Fatalf("completion %v, want status %v", wc, tc.status)
			}
			if !bytes.Equal(before, b.buf) || !bytes.Equal(extraBefore, extra.Buf()) {
				t.Fatal("target memory changed")
			}
			if a.qp.State() != verbs.QPSErr {
				t.Fatalf("requester QP in %v, want ERR", a.qp.State())
			}
			if tc.status == verbs.WCRemAccessErr && b.dev.Counters().AccessErrors != 1 {
				t.Fatalf("responder counters %+v", b.dev.Counters())
			}
		})
	}
}

// TestZeroLengthWriteNeedsNoKey: IBA C9-88, a zero-length RDMA WRITE is
// not checked against rkey or address.
func TestZeroLengthWriteNeedsNoKey(t *testing.T) {
	a, b := newPair(t, pipeLinks, pipe.Faults{}, pairOpts{})
	a.postSend(verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, RemoteAddr: 0xdead, RKey: 0xbad})
	expectWC(t, a.scq, 1, verbs.WCRDMAWrite, verbs.WCSuccess)
	b.postRecv(2, 0, 0)
	a.postSend(verbs.SendWR{ID: 2, Opcode: verbs.WRRDMAWriteWithImm, Imm: 5, RemoteAddr: 0, RKey: 0})
	expectWC(t, a.scq, 2, verbs.WCRDMAWrite, verbs.WCSuccess)
	wc := expectWC(t, b.rcq, 2, verbs.WCRecvRDMAWithImm, verbs.WCSuccess)
	if wc.Imm != 5 || wc.ByteLen != 0 {
		t.Fatalf("completion %v", wc)
	}
}

// TestLocalErrors: a bad lkey fails locally; a receive buffer too small
// fails both sides.
func TestLocalErrors(t *testing.T) {
	t.Run("bad lkey", func(t *testing.T) {
		a, _ := newPair(t, pipeLinks, pipe.Faults{}, pairOpts{})
		a.postSend(verbs.SendWR{ID: 1, Opcode: verbs.WRSend, SGL: []verbs.SGE{{Addr: a.mr.Addr(), Length: 10, LKey: a.mr.LKey() + 1}}})
		expectWC(t, a.scq, 1, verbs.WCSend, verbs.WCLocProtErr)
	})
	t.Run("receive too small", func(t *testing.T) {
		a, b := newPair(t, pipeLinks, pipe.Faults{}, pairOpts{})
		b.postRecv(7, 0, 100)
		a.postSend(verbs.SendWR{ID: 1, Opcode: verbs.WRSend, SGL: []verbs.SGE{a.sge(0, 2000)}})
		expectWC(t, b.rcq, 7, verbs.WCRecv, verbs.WCLocLenErr)
		expectWC(t, a.scq, 1, verbs.WCSend, verbs.WCRemInvReqErr)
	})
	t.Run("invalid work requests", func(t *testing.T) {
		a, _ := newPair(t, pipeLinks, pipe.Faults{}, pairOpts{})
		bad := []verbs.SendWR{
			{Opcode: 99},
			{Opcode: verbs.WRAtomicFetchAdd, SGL: []verbs.SGE{a.sge(0, 4)}},
			{Opcode: verbs.WRSend, SGL: make([]verbs.SGE, 5)},
			{Opcode: verbs.WRRDMARead, Flags: verbs.SendInline, SGL: []verbs.SGE{a.sge(0, 4)}},
			{Opcode: verbs.WRSend, Flags: verbs.SendInline, SGL: []verbs.SGE{a.sge(0, 257)}},
		}
		for i, wr := range bad {
			if n, err := a.qp.PostSend([]verbs.SendWR{wr}); n != 0 || err == nil {
				t.Errorf("bad WR %d accepted", i)
			}
		}
	})
}

// TestInline: inline data is copied at post time.
func TestInline(t *testing.T) {
	a, b := newPair(t, pipeLinks, pipe.Faults{}, pairOpts{})
	copy(a.buf, "inline payload")
	b.postRecv(1, 1000, 100)
	a.postSend(verbs.SendWR{ID: 1, Opcode: verbs.WRSend, Flags: verbs.SendInline, SGL: []verbs.SGE{a.sge(0, 14)}})
	copy(a.buf, "overwritten!!!")
	expectWC(t, a.scq, 1, verbs.WCSend, verbs.WCSuccess)
	expectWC(t, b.rcq, 1, verbs.WCRecv, verbs.WCSuccess)
	if got := string(b.buf[1000:1014]); got != "inline payload" {
		t.Fatalf("received %q", got)
	}
}

// TestUnsignaled: unsignaled requests complete silently, and free their
// send queue slots when a later signaled one completes.
func TestUnsignaled(t *testing.T) {
	a, b := newPair(t, pipeLinks, pipe.Faults{}, pairOpts{sendWR: 4})
	var got []uint64
	for i := 0; i < 20; i++ {
		wr := []verbs.SendWR{{ID: uint64(i), Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{a.sge(i, 1)}, RemoteAddr: b.mr.Addr() + uint64(i), RKey: b.mr.RKey()}}
		if i%4 == 3 {
			wr[0].Flags = verbs.SendSignaled
		}
		for {
			_, err := a.qp.PostSend(wr)
			if err == nil {
				break
			}
			if err != verbs.ErrQueueFull {
				t.Fatal(err)
			}
			got = append(got, waitWC(t, a.scq, 5e9).WRID)
		}
	}
	for len(got) < 5 {
		got = append(got, waitWC(t, a.scq, 5e9).WRID)
	}
	noWC(t, a.scq, 5e6)
	if want := []uint64{3, 7, 11, 15, 19}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("completions %v, want %v", got, want)
	}
}
