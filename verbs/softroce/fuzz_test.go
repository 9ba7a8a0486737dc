package softroce

import (
	"bytes"
	"encoding/hex"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/rsock-go/rsock/verbs"
	"github.com/rsock-go/rsock/verbs/softroce/link"
	"github.com/rsock-go/rsock/verbs/softroce/link/pipe"
	"github.com/rsock-go/rsock/verbs/softroce/wire"
)

// fuzzTarget is a responder under attack: a connected QP whose peer is the
// fuzzer, and memory laid out as guard | remote MR | guard | local-only MR.
type fuzzTarget struct {
	n        *node
	mem      []byte
	remote   verbs.MR // remote read, write and atomic access
	local    verbs.MR // local access only
	peer     netip.AddrPort
	pristine []byte
	// selective turns selective repeat on at each reset; net is the
	// pipe network the QP's device sends on.
	selective bool
	net       *pipe.Network
	// wide turns wide SACK on at each reset; mtu is the path MTU, 256
	// when 0.
	wide bool
	mtu  verbs.MTU
}

const fuzzGuard = 4096

func newFuzzTarget(t testing.TB) *fuzzTarget { return newTarget(t, nil) }

// newTarget makes a fuzz target whose device's link is wrap(pipe
// endpoint), or the endpoint itself if wrap is nil.
func newTarget(t testing.TB, wrap func(link.Link) link.Link) *fuzzTarget {
	net := pipe.NewNetwork(pipe.Faults{})
	t.Cleanup(func() { net.Close() })
	var l link.Link
	l, err := net.Endpoint(netip.MustParseAddrPort("192.0.2.2:4791"))
	must(t, err)
	if wrap != nil {
		l = wrap(l)
	}
	o := pairOpts{mtu: verbs.MTU256, bufSize: 4096}
	o.defaults()
	n := newNode(t, l, o)
	mem, err := verbs.AllocBuffer(4 * fuzzGuard)
	must(t, err)
	t.Cleanup(func() { verbs.FreeBuffer(mem) })
	for i := range mem {
		mem[i] = byte(i*7 + 1)
	}
	ft := &fuzzTarget{n: n, mem: mem, peer: netip.MustParseAddrPort("192.0.2.1:4791"), pristine: append([]byte(nil), mem...), net: net}
	ft.remote, err = n.pd.RegMR(mem[fuzzGuard:2*fuzzGuard], o.access)
	must(t, err)
	ft.local, err = n.pd.RegMR(mem[3*fuzzGuard:], verbs.AccessLocalWrite)
	must(t, err)
	return ft
}

// reset brings the QP back to a fresh RTS with receives posted.
func (ft *fuzzTarget) reset(t testing.TB) {
	q := ft.n.qp
	must(t, q.Modify(&verbs.QPAttr{State: verbs.QPSReset}, verbs.AttrState))
	must(t, q.SetSelectiveRepeat(ft.selective))
	must(t, q.SetWideSACK(ft.wide))
	mtu := ft.mtu
	if mtu == 0 {
		mtu = verbs.MTU256
	}
	must(t, q.Modify(&verbs.QPAttr{State: verbs.QPSInit, Port: 1, AccessFlags: verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic},
		verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags))
	must(t, q.Modify(&verbs.QPAttr{State: verbs.QPSRTR, AH: verbs.AH{DGID: verbs.GIDFromAddr(ft.peer.Addr())},
		PathMTU: mtu, DestQPN: 0x11, RQPSN: 0x100, MaxDestRdAtomic: 4, MinRNRTimer: 1},
		verbs.AttrState|verbs.AttrAV|verbs.AttrPathMTU|verbs.AttrDestQPN|verbs.AttrRQPSN|verbs.AttrMaxDestRdAtomic|verbs.AttrMinRNRTimer))
	must(t, q.Modify(&verbs.QPAttr{State: verbs.QPSRTS, SQPSN: 0x200, Timeout: 14, RetryCnt: 1, RNRRetry: 1, MaxRdAtomic: 1},
		verbs.AttrState|verbs.AttrSQPSN|verbs.AttrTimeout|verbs.AttrRetryCnt|verbs.AttrRNRRetry|verbs.AttrMaxQPRdAtomic))
	// Receives land in the remote MR's second half.
	sge := verbs.SGE{Addr: ft.remote.Addr() + 2048, Length: 2048, LKey: ft.remote.LKey()}
	_, err := q.PostRecv([]verbs.RecvWR{{ID: 1, SGL: []verbs.SGE{sge}}, {ID: 2, SGL: []verbs.SGE{sge}}})
	must(t, err)
	copy(ft.mem[fuzzGuard:2*fuzzGuard], ft.pristine[fuzzGuard:2*fuzzGuard])
}

// inject delivers raw packet bytes (BTH onward, no ICRC) as if from src.
func (ft *fuzzTarget) inject(b []byte, src netip.AddrPort) {
	buf := make([]byte, len(b), len(b)+wire.ICRCLen)
	copy(buf, b)
	pkts := []link.Packet{{Buf: buf, N: len(b), Addr: src, ICRC: link.ICRCGood}}
	ft.n.dev.rx.process(pkts)
}

// check fails if anything outside the remote MR changed.
func (ft *fuzzTarget) check(t testing.TB) {
	for _, r := range [][2]int{{0, fuzzGuard}, {2 * fuzzGuard, 4 * fuzzGuard}} {
		if !bytes.Equal(ft.mem[r[0]:r[1]], ft.pristine[r[0]:r[1]]) {
			t.Fatalf("memory outside the remotely writable MR changed in [%d,%d)", r[0], r[1])
		}
	}
}

// seedPackets returns well-formed requests to the fuzz target's QP.
func (ft *fuzzTarget) seedPackets() [][]byte {
	qpn := ft.n.qp.QPN()
	build := func(op wire.Opcode, psn uint32, payload int, ext func(b []byte)) []byte {
		pad := wire.PadFor(payload)
		b := make([]byte, op.HeaderLen()+payload+pad)
		wire.BTH(b).Encode(&wire.BTHFields{Opcode: op, PadCount: uint8(pad), PKey: wire.DefaultPKey, DestQP: qpn, AckReq: true, PSN: psn})
		if ext != nil {
			ext(b[wire.BTHLen:])
		}
		return b
	}
	va, rkey := ft.remote.Addr(), ft.remote.RKey()
	return [][]byte{
		build(wire.RCSendOnly, 0x100, 13, nil),
		build(wire.RCSendFirst, 0x100, 256, nil),
		build(wire.RCSendOnlyImm, 0x100, 4, func(b []byte) { wire.ImmDt(b).Set(7) }),
		build(wire.RCWriteOnly, 0x100, 100, func(b []byte) { wire.RETH(b).Encode(va+10, rkey, 100) }),
		build(wire.RCWriteFirst, 0x100, 256, func(b []byte) { wire.RETH(b).Encode(va, rkey, 600) }),
		build(wire.RCWriteOnlyImm, 0x100, 0, func(b []byte) { wire.RETH(b).Encode(0, 0, 0); wire.ImmDt(b[16:]).Set(1) }),
		build(wire.RCReadRequest, 0x100, 0, func(b []byte) { wire.RETH(b).Encode(va, rkey, 1000) }),
		build(wire.RCFetchAdd, 0x100, 0, func(b []byte) { wire.AtomicETH(b).Encode(va+8, rkey, 5, 0) }),
		build(wire.RCCompareSwap, 0x100, 0, func(b []byte) { wire.AtomicETH(b).Encode(va+16, rkey, 5, 0) }),
		build(wire.RCWriteOnly, 0x100, 100, func(b []byte) { wire.RETH(b).Encode(ft.local.Addr(), ft.local.RKey(), 100) }),
		build(wire.RCAcknowledge, 0x200, 0, func(b []byte) { wire.AETH(b).Encode(wire.ACKSyndrome(31), 0) }),
	}
}

// vectorPackets returns the shared RoCEv2 vectors, BTH through pad.
func vectorPackets(t testing.TB) [][]byte {
	data, err := os.ReadFile("wire/testdata/vectors.hex")
	must(t, err)
	var out [][]byte
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 || strings.HasPrefix(f[0], "#") {
			continue
		}
		frame, err := hex.DecodeString(f[1])
		must(t, err)
		if len(frame) > 14+28+4 {
			out = append(out, frame[14+28:len(frame)-4])
		}
	}
	if len(out) == 0 {
		t.Fatal("no vectors")
	}
	return out
}

// FuzzResponder feeds arbitrary packets from the connected peer (and from
// a stranger) to a QP, with go-back-N or selective repeat. Nothing may
// panic, and no byte outside the MR registered for remote access may
// change.
func FuzzResponder(f *testing.F) {
	ft := newFuzzTarget(f)
	for _, selective := range []bool{false, true} {
		for _, p := range ft.seedPackets() {
			f.Add(p, false, selective)
		}
		for _, p := range vectorPackets(f) {
			f.Add(p, false, selective)
		}
	}
	stranger := netip.MustParseAddrPort("192.0.2.77:4791")
	f.Fuzz(func(t *testing.T, pkt []byte, fromStranger, selective bool) {
		ft.selective = selective
		ft.reset(t)
		src := ft.peer
		if fromStranger {
			src = stranger
		}
		// Twice, so duplicate handling runs too.
		ft.inject(pkt, src)
		ft.inject(pkt, src)
		ft.check(t)
	})
}

// TestResponderSeeds runs the fuzz seeds as a plain test and checks that
// the well-formed ones did what they say.
func TestResponderSeeds(t *testing.T) {
	ft := newFuzzTarget(t)
	seeds := ft.seedPackets()
	ft.reset(t)
	ft.inject(seeds[3], ft.peer) // WRITE_ONLY of 100 bytes at offset 10
	ft.check(t)
	if c := ft.n.dev.Counters(); c.AccessErrors != 0 || c.Malformed != 0 {
		t.Fatalf("counters %+v", c)
	}
	ft.reset(t)
	ft.inject(seeds[9], ft.peer) // WRITE into the local-only MR
	ft.check(t)
	if c := ft.n.dev.Counters(); c.AccessErrors != 1 {
		t.Fatalf("write into a local-only MR: counters %+v", c)
	}
	if ft.n.qp.State() != verbs.QPSErr {
		t.Fatalf("QP in %v after a remote access error", ft.n.qp.State())
	}
	for _, p := range append(seeds, vectorPackets(t)...) {
		ft.reset(t)
		ft.inject(p, ft.peer)
		ft.inject(p, ft.peer)
		ft.check(t)
	}
}
