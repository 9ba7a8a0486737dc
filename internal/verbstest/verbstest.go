// Package verbstest is the operation suite every verbs provider passes:
// the same SEND, SEND_WITH_IMM, RDMA WRITE, WRITE_WITH_IMM, READ and
// atomic checks run against soft-RoCE on each of its links and against
// rdma-core devices, over the verbs API alone. Tests import it; nothing
// else does.
package verbstest

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/rsock-go/rsock/verbs"
)

// Node is one end of a connected pair: a QP in RTS, its completion
// queues, and a registered buffer.
type Node struct {
	QP     verbs.QP
	SendCQ verbs.CQ
	RecvCQ verbs.CQ
	Buf    []byte
	MR     verbs.MR
}

// SGE names length bytes at off in the node's buffer.
func (n *Node) SGE(off, length int) verbs.SGE {
	return verbs.SGE{Addr: n.MR.Addr() + uint64(off), Length: uint32(length), LKey: n.MR.LKey()}
}

// PostSend posts wr, signaled.
func (n *Node) PostSend(t testing.TB, wr verbs.SendWR) {
	t.Helper()
	wr.Flags |= verbs.SendSignaled
	if _, err := n.QP.PostSend([]verbs.SendWR{wr}); err != nil {
		t.Fatal(err)
	}
}

// PostRecv posts a receive of length bytes at off.
func (n *Node) PostRecv(t testing.TB, id uint64, off, length int) {
	t.Helper()
	if _, err := n.QP.PostRecv([]verbs.RecvWR{{ID: id, SGL: []verbs.SGE{n.SGE(off, length)}}}); err != nil {
		t.Fatal(err)
	}
}

// WaitWC returns the next completion of cq, failing the test after
// timeout.
func WaitWC(t testing.TB, cq verbs.CQ, timeout time.Duration) verbs.WC {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var wc [1]verbs.WC
	for {
		n, err := cq.Poll(wc[:])
		if err != nil {
			t.Fatalf("poll: %v", err)
		}
		if n == 1 {
			return wc[0]
		}
		if err := cq.Wait(ctx); err != nil {
			t.Fatalf("no completion within %v: %v", timeout, err)
		}
	}
}

// ExpectWC waits for a completion and checks its id, opcode and status.
func ExpectWC(t testing.TB, cq verbs.CQ, id uint64, op verbs.WCOpcode, st verbs.WCStatus, timeout time.Duration) verbs.WC {
	t.Helper()
	wc := WaitWC(t, cq, timeout)
	if wc.WRID != id || wc.Opcode != op || wc.Status != st {
		t.Fatalf("got %v, want id=%d %v %v", wc, id, op, st)
	}
	return wc
}

// FillRandom fills b from r.
func FillRandom(r *rand.Rand, b []byte) {
	for i := range b {
		b[i] = byte(r.Uint32())
	}
}

// Operations runs every two-sided and one-sided data operation from a to
// b as subtests, at sizes around the path MTU (0, 1, MTU-1, MTU, MTU+1)
// and big, then the atomics. Both buffers hold at least 2×big bytes; b's
// second half receives. Completions are awaited for at most timeout each.
func Operations(t *testing.T, a, b *Node, mtu verbs.MTU, big int, timeout time.Duration) {
	r := rand.New(rand.NewPCG(uint64(mtu), 1))
	m := mtu.Bytes()
	id := uint64(0)
	expect := func(t *testing.T, cq verbs.CQ, op verbs.WCOpcode) verbs.WC {
		t.Helper()
		return ExpectWC(t, cq, id, op, verbs.WCSuccess, timeout)
	}
	for _, size := range []int{0, 1, m - 1, m, m + 1, big} {
		src := a.Buf[:size]
		check := func(t *testing.T, got []byte) {
			t.Helper()
			if !bytes.Equal(got, src) {
				t.Fatalf("data differs (%d bytes)", size)
			}
		}
		t.Run(fmt.Sprintf("send/%d", size), func(t *testing.T) {
			FillRandom(r, src)
			id++
			b.PostRecv(t, id, big, max(size, 1))
			a.PostSend(t, verbs.SendWR{ID: id, Opcode: verbs.WRSend, SGL: []verbs.SGE{a.SGE(0, size)}})
			expect(t, a.SendCQ, verbs.WCSend)
			wc := expect(t, b.RecvCQ, verbs.WCRecv)
			if wc.ByteLen != uint32(size) || wc.Flags&verbs.WCWithImm != 0 || wc.QPN != b.QP.QPN() {
				t.Fatalf("recv completion %v", wc)
			}
			check(t, b.Buf[big:big+size])
		})
		t.Run(fmt.Sprintf("send_imm/%d", size), func(t *testing.T) {
			FillRandom(r, src)
			id++
			b.PostRecv(t, id, big, max(size, 1))
			a.PostSend(t, verbs.SendWR{ID: id, Opcode: verbs.WRSendWithImm, Imm: 0xa1b2c3d4, SGL: []verbs.SGE{a.SGE(0, size)}})
			expect(t, a.SendCQ, verbs.WCSend)
			wc := expect(t, b.RecvCQ, verbs.WCRecv)
			if wc.ByteLen != uint32(size) || wc.Flags&verbs.WCWithImm == 0 || wc.Imm != 0xa1b2c3d4 {
				t.Fatalf("recv completion %v", wc)
			}
			check(t, b.Buf[big:big+size])
		})
		t.Run(fmt.Sprintf("write/%d", size), func(t *testing.T) {
			FillRandom(r, src)
			id++
			a.PostSend(t, verbs.SendWR{ID: id, Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{a.SGE(0, size)},
				RemoteAddr: b.MR.Addr() + uint64(big), RKey: b.MR.RKey()})
			expect(t, a.SendCQ, verbs.WCRDMAWrite)
			check(t, b.Buf[big:big+size])
		})
		t.Run(fmt.Sprintf("write_imm/%d", size), func(t *testing.T) {
			FillRandom(r, src)
			id++
			b.PostRecv(t, id, 0, 0)
			a.PostSend(t, verbs.SendWR{ID: id, Opcode: verbs.WRRDMAWriteWithImm, Imm: uint32(size), SGL: []verbs.SGE{a.SGE(0, size)},
				RemoteAddr: b.MR.Addr() + uint64(big), RKey: b.MR.RKey()})
			expect(t, a.SendCQ, verbs.WCRDMAWrite)
			wc := expect(t, b.RecvCQ, verbs.WCRecvRDMAWithImm)
			if wc.ByteLen != uint32(size) || wc.Imm != uint32(size) || wc.Flags&verbs.WCWithImm == 0 {
				t.Fatalf("recv completion %v", wc)
			}
			check(t, b.Buf[big:big+size])
		})
		t.Run(fmt.Sprintf("read/%d", size), func(t *testing.T) {
			FillRandom(r, b.Buf[big:big+size])
			id++
			a.PostSend(t, verbs.SendWR{ID: id, Opcode: verbs.WRRDMARead, SGL: []verbs.SGE{a.SGE(big, size)},
				RemoteAddr: b.MR.Addr() + uint64(big), RKey: b.MR.RKey()})
			wc := expect(t, a.SendCQ, verbs.WCRDMARead)
			if wc.ByteLen != uint32(size) {
				t.Fatalf("read completion %v", wc)
			}
			if !bytes.Equal(a.Buf[big:big+size], b.Buf[big:big+size]) {
				t.Fatalf("read data differs (%d bytes)", size)
			}
		})
	}
	t.Run("atomics", func(t *testing.T) { Atomics(t, a, b, timeout) })
}

// Atomics runs FETCH_AND_ADD and a failing and a succeeding
// CMP_AND_SWP from a on a word of b's buffer (offset 64), with WR ids 1
// to 3.
func Atomics(t *testing.T, a, b *Node, timeout time.Duration) {
	word := func(n *Node, off int) uint64 { return binary.NativeEndian.Uint64(n.Buf[off:]) }
	binary.NativeEndian.PutUint64(b.Buf[64:], 1000)
	a.PostSend(t, verbs.SendWR{ID: 1, Opcode: verbs.WRAtomicFetchAdd, SGL: []verbs.SGE{a.SGE(8, 8)},
		RemoteAddr: b.MR.Addr() + 64, RKey: b.MR.RKey(), CompareAdd: 234})
	ExpectWC(t, a.SendCQ, 1, verbs.WCFetchAdd, verbs.WCSuccess, timeout)
	if got, mem := word(a, 8), word(b, 64); got != 1000 || mem != 1234 {
		t.Fatalf("fetch_add returned %d, memory %d; want 1000, 1234", got, mem)
	}
	// A failing compare leaves memory alone and returns the current value.
	a.PostSend(t, verbs.SendWR{ID: 2, Opcode: verbs.WRAtomicCmpAndSwp, SGL: []verbs.SGE{a.SGE(16, 8)},
		RemoteAddr: b.MR.Addr() + 64, RKey: b.MR.RKey(), CompareAdd: 1, Swap: 7})
	ExpectWC(t, a.SendCQ, 2, verbs.WCCompSwap, verbs.WCSuccess, timeout)
	if got, mem := word(a, 16), word(b, 64); got != 1234 || mem != 1234 {
		t.Fatalf("failed cmp_swap returned %d, memory %d; want 1234, 1234", got, mem)
	}
	a.PostSend(t, verbs.SendWR{ID: 3, Opcode: verbs.WRAtomicCmpAndSwp, SGL: []verbs.SGE{a.SGE(24, 8)},
		RemoteAddr: b.MR.Addr() + 64, RKey: b.MR.RKey(), CompareAdd: 1234, Swap: 7})
	ExpectWC(t, a.SendCQ, 3, verbs.WCCompSwap, verbs.WCSuccess, timeout)
	if got, mem := word(a, 24), word(b, 64); got != 1234 || mem != 7 {
		t.Fatalf("cmp_swap returned %d, memory %d; want 1234, 7", got, mem)
	}
}

// ForeignRKey checks that an rkey works only in its protection domain: a
// WRITE, READ and atomic from a that name other, a region of b's device
// in another PD than b's QP (another connection's ring, say), fail with
// WCRemAccessErr and move a's QP to ERR, and other's memory is untouched.
// Each runs on a fresh pair: mk returns two connected nodes and other.
func ForeignRKey(t *testing.T, mk func(t *testing.T) (a, b *Node, other verbs.MR), timeout time.Duration) {
	ops := []struct {
		name string
		wr   func(a *Node, other verbs.MR) verbs.SendWR
	}{
		{"write", func(a *Node, o verbs.MR) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{a.SGE(0, 64)}, RemoteAddr: o.Addr(), RKey: o.RKey()}
		}},
		{"write with immediate", func(a *Node, o verbs.MR) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.WRRDMAWriteWithImm, SGL: []verbs.SGE{a.SGE(0, 64)}, RemoteAddr: o.Addr(), RKey: o.RKey(), Imm: 1}
		}},
		{"read", func(a *Node, o verbs.MR) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.WRRDMARead, SGL: []verbs.SGE{a.SGE(0, 64)}, RemoteAddr: o.Addr(), RKey: o.RKey()}
		}},
		{"atomic", func(a *Node, o verbs.MR) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.WRAtomicFetchAdd, SGL: []verbs.SGE{a.SGE(0, 8)}, RemoteAddr: o.Addr(), RKey: o.RKey(), CompareAdd: 1}
		}},
	}
	for _, op := range ops {
		t.Run(op.name, func(t *testing.T) {
			a, b, other := mk(t)
			b.PostRecv(t, 7, 0, 64)
			before := append([]byte(nil), other.Buf()...)
			wr := op.wr(a, other)
			wr.ID = 42
			a.PostSend(t, wr)
			wc := WaitWC(t, a.SendCQ, timeout)
			if wc.WRID != 42 || wc.Status != verbs.WCRemAccessErr {
				t.Fatalf("completion %+v, want status %v", wc, verbs.WCRemAccessErr)
			}
			if st := a.QP.State(); st != verbs.QPSErr {
				t.Fatalf("requester QP in %v, want ERR", st)
			}
			if !bytes.Equal(before, other.Buf()) {
				t.Fatal("the other PD's region changed")
			}
		})
	}
}
