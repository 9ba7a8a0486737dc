package softroce

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/rsock-go/rsock/verbs"
	"github.com/rsock-go/rsock/verbs/softroce/link/pipe"
)

func fillRandom(r *rand.Rand, b []byte) {
	for i := range b {
		b[i] = byte(r.Uint32())
	}
}

// TestOperations runs every operation end to end between two devices, at
// message sizes around the path MTU and up to 1 MiB.
func TestOperations(t *testing.T) {
	for _, k := range append([]linkKind{pipeLinks, udpLinks}, extraLinks...) {
		for _, mtu := range []verbs.MTU{verbs.MTU256, verbs.MTU1024, verbs.MTU4096} {
			t.Run(fmt.Sprintf("%s/mtu%v", k.name, mtu), func(t *testing.T) {
				const big = 1 << 20
				o := pairOpts{mtu: mtu, bufSize: 2 * big}
				a, b := newPair(t, k, pipe.Faults{}, o)
				r := rand.New(rand.NewPCG(uint64(mtu), 1))
				m := mtu.Bytes()
				id := uint64(0)
				for _, size := range []int{0, 1, m - 1, m, m + 1, big} {
					src := a.buf[:size]
					check := func(t *testing.T, got []byte) {
						t.Helper()
						if !bytes.Equal(got, src) {
							t.Fatalf("data differs (%d bytes)", size)
						}
					}
					t.Run(fmt.Sprintf("send/%d", size), func(t *testing.T) {
						fillRandom(r, src)
						id++
						b.postRecv(id, big, max(size, 1))
						a.postSend(verbs.SendWR{ID: id, Opcode: verbs.WRSend, SGL: []verbs.SGE{a.sge(0, size)}})
						expectWC(t, a.scq, id, verbs.WCSend, verbs.WCSuccess)
						wc := expectWC(t, b.rcq, id, verbs.WCRecv, verbs.WCSuccess)
						if wc.ByteLen != uint32(size) || wc.Flags&verbs.WCWithImm != 0 {
							t.Fatalf("recv completion %v", wc)
						}
						check(t, b.buf[big:big+size])
					})
					t.Run(fmt.Sprintf("send_imm/%d", size), func(t *testing.T) {
						fillRandom(r, src)
						id++
						b.postRecv(id, big, max(size, 1))
						a.postSend(verbs.SendWR{ID: id, Opcode: verbs.WRSendWithImm, Imm: 0xa1b2c3d4, SGL: []verbs.SGE{a.sge(0, size)}})
						expectWC(t, a.scq, id, verbs.WCSend, verbs.WCSuccess)
						wc := expectWC(t, b.rcq, id, verbs.WCRecv, verbs.WCSuccess)
						if wc.ByteLen != uint32(size) || wc.Flags&verbs.WCWithImm == 0 || wc.Imm != 0xa1b2c3d4 {
							t.Fatalf("recv completion %v", wc)
						}
						check(t, b.buf[big:big+size])
					})
					t.Run(fmt.Sprintf("write/%d", size), func(t *testing.T) {
						fillRandom(r, src)
						id++
						a.postSend(verbs.SendWR{ID: id, Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{a.sge(0, size)},
							RemoteAddr: b.mr.Addr() + big, RKey: b.mr.RKey()})
						expectWC(t, a.scq, id, verbs.WCRDMAWrite, verbs.WCSuccess)
						check(t, b.buf[big:big+size])
					})
					t.Run(fmt.Sprintf("write_imm/%d", size), func(t *testing.T) {
						fillRandom(r, src)
						id++
						b.postRecv(id, 0, 0)
						a.postSend(verbs.SendWR{ID: id, Opcode: verbs.WRRDMAWriteWithImm, Imm: uint32(size), SGL: []verbs.SGE{a.sge(0, size)},
							RemoteAddr: b.mr.Addr() + big, RKey: b.mr.RKey()})
						expectWC(t, a.scq, id, verbs.WCRDMAWrite, verbs.WCSuccess)
						wc := expectWC(t, b.rcq, id, verbs.WCRecvRDMAWithImm, verbs.WCSuccess)
						if wc.ByteLen != uint32(size) || wc.Imm != uint32(size) || wc.Flags&verbs.WCWithImm == 0 {
							t.Fatalf("recv completion %v", wc)
						}
						check(t, b.buf[big:big+size])
					})
					t.Run(fmt.Sprintf("read/%d", size), func(t *testing.T) {
						fillRandom(r, b.buf[big:big+size])
						id++
						a.postSend(verbs.SendWR{ID: id, Opcode: verbs.WRRDMARead, SGL: []verbs.SGE{a.sge(big, size)},
							RemoteAddr: b.mr.Addr() + big, RKey: b.mr.RKey()})
						wc := expectWC(t, a.scq, id, verbs.WCRDMARead, verbs.WCSuccess)
						if wc.ByteLen != uint32(size) {
							t.Fatalf("read completion %v", wc)
						}
						if !bytes.Equal(a.buf[big:big+size], b.buf[big:big+size]) {
							t.Fatalf("read data differs (%d bytes)", size)
						}
					})
				}
				t.Run("atomics", func(t *testing.T) { testAtomics(t, a, b) })
				if c := a.dev.Counters(); c.ICRCErrors+c.Malformed+c.WrongPeer != 0 {
					t.Errorf("unexpected error counters: %+v", c)
				}
			})
		}
	}
}

func testAtomics(t *testing.T, a, b *node) {
	word := func(n *node, off int) uint64 { return binary.NativeEndian.Uint64(n.buf[off:]) }
	binary.NativeEndian.PutUint64(b.buf[64:], 1000)
	a.postSend(verbs.SendWR{ID: 1, Opcode: verbs.WRAtomicFetchAdd, SGL: []verbs.SGE{a.sge(8, 8)},
		RemoteAddr: b.mr.Addr() + 64, RKey: b.mr.RKey(), CompareAdd: 234})
	expectWC(t, a.scq, 1, verbs.WCFetchAdd, verbs.WCSuccess)
	if got, mem := word(a, 8), word(b, 64); got != 1000 || mem != 1234 {
		t.Fatalf("fetch_add returned %d, memory %d; want 1000, 1234", got, mem)
	}
	// A failing compare leaves memory alone and returns the current value.
	a.postSend(verbs.SendWR{ID: 2, Opcode: verbs.WRAtomicCmpAndSwp, SGL: []verbs.SGE{a.sge(16, 8)},
		RemoteAddr: b.mr.Addr() + 64, RKey: b.mr.RKey(), CompareAdd: 1, Swap: 7})
	expectWC(t, a.scq, 2, verbs.WCCompSwap, verbs.WCSuccess)
	if got, mem := word(a, 16), word(b, 64); got != 1234 || mem != 1234 {
		t.Fatalf("failed cmp_swap returned %d, memory %d; want 1234, 1234", got, mem)
	}
	a.postSend(verbs.SendWR{ID: 3, Opcode: verbs.WRAtomicCmpAndSwp, SGL: []verbs.SGE{a.sge(24, 8)},
		RemoteAddr: b.mr.Addr() + 64, RKey: b.mr.RKey(), CompareAdd: 1234, Swap: 7})
	expectWC(t, a.scq, 3, verbs.WCCompSwap, verbs.WCSuccess)
	if got, mem := word(a, 24), word(b, 64); got != 1234 || mem != 7 {
		t.Fatalf("cmp_swap returned %d, memory %d; want 1234, 7", got, mem)
	}
}
