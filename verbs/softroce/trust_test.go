package softroce

import (
	"bytes"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rsock-go/rsock/verbs"
	"github.com/rsock-go/rsock/verbs/softroce/link"
	"github.com/rsock-go/rsock/verbs/softroce/link/pipe"
	"github.com/rsock-go/rsock/verbs/softroce/wire"
)

// What a request packet must prove before it takes a PSN, and what the
// responder's work per received packet is bounded by (issue 27).

// request builds a request to the fuzz target's QP at psn: op, a RETH
// (va, rkey, dmaLen) if op has one, and payload.
func (ft *fuzzTarget) request(op wire.Opcode, psn uint32, va uint64, rkey, dmaLen uint32, payload []byte) []byte {
	pad := wire.PadFor(len(payload))
	b := make([]byte, op.HeaderLen()+len(payload)+pad)
	wire.BTH(b).Encode(&wire.BTHFields{Opcode: op, PadCount: uint8(pad), PKey: wire.DefaultPKey,
		DestQP: ft.n.qp.QPN(), AckReq: true, PSN: psn})
	h := wire.BTHLen
	if op.Flags().Has(wire.FlagRETH) {
		wire.RETH(b[h:]).Encode(va, rkey, dmaLen)
		h += wire.RETHLen
	}
	if op.Flags().Has(wire.FlagImm) {
		wire.ImmDt(b[h:]).Set(1)
		h += wire.ImmDtLen
	}
	copy(b[h:], payload)
	return b
}

// writeOnly is a WRITE ONLY of payload at offset off of the remote MR.
func (ft *fuzzTarget) writeOnly(psn uint32, off int, payload []byte) []byte {
	return ft.request(wire.RCWriteOnly, psn, ft.remote.Addr()+uint64(off), ft.remote.RKey(), uint32(len(payload)), payload)
}

// zeroWrite is a zero-length WRITE ONLY with a made-up address and key.
func (ft *fuzzTarget) zeroWrite(psn uint32) []byte {
	return ft.request(wire.RCWriteOnly, psn, 0xdead0000, 0xbad, 0, nil)
}

func (ft *fuzzTarget) qpState() verbs.QPState { return ft.n.qp.State() }

func (ft *fuzzTarget) remoteBytes(off, n int) []byte {
	return ft.mem[fuzzGuard+off : fuzzGuard+off+n]
}

// TestZeroLengthWriteNotPlacedAhead: with selective repeat, a zero-length
// WRITE ONLY past a gap (which carries no key that is checked) is left for
// its turn: the WRITE the requester really sent at that PSN is placed when
// it comes, not dropped as a duplicate with its bytes lost.
func TestZeroLengthWriteNotPlacedAhead(t *testing.T) {
	ft := newFuzzTarget(t)
	ft.selective = true
	ft.reset(t)
	data := bytes.Repeat([]byte{0x5a}, 200)
	ft.inject(ft.zeroWrite(0x101), ft.peer)                // forged, past the gap at 0x100
	ft.inject(ft.writeOnly(0x100, 0, data[:100]), ft.peer) // the real packets
	ft.inject(ft.writeOnly(0x101, 100, data[100:]), ft.peer)
	if got := ft.remoteBytes(0, 200); !bytes.Equal(got, data) {
		t.Fatalf("the WRITE at 0x101 was dropped: remote memory %x", got[100:110])
	}
	if ft.qpState() != verbs.QPSRTS {
		t.Fatalf("QP in %v", ft.qpState())
	}
	ft.check(t)
}

// TestForeignPacketAtPSNFailsQP: a packet that took an expected PSN (a
// zero-length WRITE, accepted without a key as IBA C9-88 says) followed by
// a different packet at the same PSN, the one the requester sent: the
// second is not a copy of the first, so the QP fails instead of
// acknowledging it as a duplicate while its bytes are lost. A true copy
// is acknowledged as before. Both loss-recovery modes.
func TestForeignPacketAtPSNFailsQP(t *testing.T) {
	for _, selective := range []bool{false, true} {
		ft := newFuzzTarget(t)
		ft.selective = selective
		ft.reset(t)
		data := bytes.Repeat([]byte{0x77}, 100)
		// A true duplicate first: nothing happens.
		ft.inject(ft.writeOnly(0x100, 0, data), ft.peer)
		ft.inject(ft.writeOnly(0x100, 0, data), ft.peer)
		if ft.qpState() != verbs.QPSRTS {
			t.Fatalf("selective %v: a true duplicate moved the QP to %v", selective, ft.qpState())
		}
		ft.inject(ft.zeroWrite(0x101), ft.peer)            // forged, at the expected PSN
		ft.inject(ft.writeOnly(0x101, 100, data), ft.peer) // the requester's
		if st := ft.qpState(); st != verbs.QPSErr {
			t.Fatalf("selective %v: the packet displaced by a zero-length WRITE was taken as a duplicate; QP in %v", selective, st)
		}
	}
}

// TestPlacedOnlyAtMessageBoundary: a WRITE ONLY placed past a gap is a
// whole message, so the packet before it must end one; if the gap is
// filled by a packet that starts a longer message, the placed packet was
// not what the requester sent at its PSN, and the QP fails.
func TestPlacedOnlyAtMessageBoundary(t *testing.T) {
	ft := newFuzzTarget(t)
	ft.selective = true
	ft.reset(t)
	ft.inject(ft.writeOnly(0x101, 1000, bytes.Repeat([]byte{1}, 64)), ft.peer)
	if c := ft.n.dev.Counters(); c.OutOfOrder != 1 {
		t.Fatalf("the WRITE ONLY past the gap was not placed: %+v", c)
	}
	first := ft.request(wire.RCWriteFirst, 0x100, ft.remote.Addr(), ft.remote.RKey(), 600, bytes.Repeat([]byte{2}, 256))
	ft.inject(first, ft.peer)
	if st := ft.qpState(); st != verbs.QPSErr {
		t.Fatalf("a placed WRITE ONLY was taken in the middle of a message; QP in %v", st)
	}
	ft.check(t)
}

// TestWrongRKeyAheadFailsQP: a WRITE ONLY, with or without immediate, past
// the gap with an rkey the QP
// may not use (another PD's region, or a made-up key) is not left for its
// turn, where the real packet at that PSN would take its place unseen: the
// QP fails with a remote access error, and nothing is written.
func TestWrongRKeyAheadFailsQP(t *testing.T) {
	for _, tc := range []struct {
		name string
		op   wire.Opcode
	}{
		{"made-up key", wire.RCWriteOnly},
		{"another PD's region", wire.RCWriteOnly},
		{"made-up key, with immediate", wire.RCWriteOnlyImm},
		{"another PD's region, with immediate", wire.RCWriteOnlyImm},
	} {
		name := tc.name
		ft := newFuzzTarget(t)
		ft.selective = true
		ft.reset(t)
		va, rkey := ft.remote.Addr(), ft.remote.RKey()^0x5a5a5a5a
		if strings.HasPrefix(name, "another PD's region") {
			pd, err := ft.n.dev.AllocPD()
			must(t, err)
			buf, err := verbs.AllocBuffer(4096)
			must(t, err)
			t.Cleanup(func() { verbs.FreeBuffer(buf) })
			mr, err := pd.RegMR(buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
			must(t, err)
			t.Cleanup(func() { mr.Close() })
			va, rkey = mr.Addr(), mr.RKey()
		}
		payload := bytes.Repeat([]byte{9}, 64)
		ft.inject(ft.request(tc.op, 0x105, va, rkey, 64, payload), ft.peer)
		if st := ft.qpState(); st != verbs.QPSErr {
			t.Fatalf("%s: QP in %v after a WRITE with a wrong rkey", name, st)
		}
		if c := ft.n.dev.Counters(); c.AccessErrors != 1 || c.OutOfOrder != 0 {
			t.Fatalf("%s: counters %+v", name, c)
		}
		ft.check(t)
	}
}

// lockSpy is a link whose Send notes whether the QP's lock was held.
type lockSpy struct {
	link.Link
	qp       atomic.Pointer[QP]
	sends    atomic.Int64
	heldSend atomic.Int64
}

func (l *lockSpy) Send(pkts []link.Packet) error {
	if q := l.qp.Load(); q != nil {
		l.sends.Add(1)
		if q.mu.TryLock() {
			q.mu.Unlock()
		} else {
			l.heldSend.Add(1)
		}
	}
	return l.Link.Send(pkts)
}

// receiveLoopSpy is a link that counts the packets sent from the
// receive loop's code (a method of receiver on the call stack), apart
// from those the QP's timer sends.
type receiveLoopSpy struct {
	link.Link
	fromReceiver atomic.Int64
}

func (l *receiveLoopSpy) Send(pkts []link.Packet) error {
	pcs := make([]uintptr, 32)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(2, pcs)])
	for {
		f, more := frames.Next()
		if strings.Contains(f.Function, "softroce.(*receiver).") {
			l.fromReceiver.Add(int64(len(pkts)))
			break
		}
		if !more {
			break
		}
	}
	return l.Link.Send(pkts)
}

// TestReceiveBatchSendsWithoutQPLock: a receive batch whose responses
// fill the send batch sends them without holding the QP's lock (the
// guide: no lock across a system call on the data path).
func TestReceiveBatchSendsWithoutQPLock(t *testing.T) {
	spy := &lockSpy{}
	ft := newTarget(t, func(l link.Link) link.Link { spy.Link = l; return spy })
	ft.reset(t)
	spy.qp.Store(ft.n.qp)
	// One-packet READs at consecutive PSNs: each builds one response.
	n := len(ft.n.dev.rx.out) + 8
	var pkts []link.Packet
	for i := range n {
		b := ft.request(wire.RCReadRequest, psnAdd(0x100, uint32(i)), ft.remote.Addr(), ft.remote.RKey(), 64, nil)
		buf := make([]byte, len(b), len(b)+wire.ICRCLen)
		copy(buf, b)
		pkts = append(pkts, link.Packet{Buf: buf, N: len(b), Addr: ft.peer, ICRC: link.ICRCGood})
	}
	ft.n.dev.rx.process(pkts)
	if spy.sends.Load() < 2 {
		t.Fatalf("%d READs sent in %d batches; the test needs a full batch", n, spy.sends.Load())
	}
	if h := spy.heldSend.Load(); h != 0 {
		t.Fatalf("%d of %d sends held the QP's lock", h, spy.sends.Load())
	}
}

// peerLink attaches the fuzz target's peer to its network, to see the
// responses.
func (ft *fuzzTarget) peerLink(t *testing.T) link.Link {
	l, err := ft.net.Endpoint(ft.peer)
	must(t, err)
	return l
}

// recvResponses reads packets at l until none comes for quiet, and
// returns the READ responses.
func recvResponses(t *testing.T, l link.Link, quiet time.Duration) []wire.Packet {
	t.Helper()
	var got []wire.Packet
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]link.Packet, 64)
		for i := range buf {
			buf[i].Buf = make([]byte, maxPacketLen+wire.ICRCLen)
		}
		for {
			n, err := l.Recv(buf)
			if err != nil {
				return
			}
			for _, p := range buf[:n] {
				pkt, err := wire.Parse(append([]byte(nil), p.Bytes()...))
				if err == nil && pkt.BTH.Opcode().Flags().Has(wire.FlagRead|wire.FlagResponse) {
					got = append(got, pkt)
				}
			}
		}
	}()
	time.Sleep(quiet)
	l.Close()
	<-done
	return got
}

// TestReadAnsweredInBursts: a READ of many packets is answered with at
// most readBurst packets by the receive loop; the QP's timer sends the
// rest, in order, and all of them arrive.
func TestReadAnsweredInBursts(t *testing.T) {
	spy := &receiveLoopSpy{}
	ft := newTarget(t, func(l link.Link) link.Link { spy.Link = l; return spy })
	ft.reset(t)
	peer := ft.peerLink(t)
	const size = 64 << 10
	const npkts = size / 256 // at MTU 256
	buf, err := verbs.AllocBuffer(size)
	must(t, err)
	t.Cleanup(func() { verbs.FreeBuffer(buf) })
	for i := range buf {
		buf[i] = byte(i * 13)
	}
	mr, err := ft.n.pd.RegMR(buf, verbs.AccessLocalWrite|verbs.AccessRemoteRead)
	must(t, err)
	t.Cleanup(func() { mr.Close() })
	ft.inject(ft.request(wire.RCReadRequest, 0x100, mr.Addr(), mr.RKey(), size, nil), ft.peer)
	// The QP's timer is due at once and may send its bursts before
	// inject returns, so the device's counters cannot tell whose packets
	// they were; the spy counts those sent from the receive loop's code.
	if sent := spy.fromReceiver.Load(); sent == 0 || sent > readBurst {
		t.Fatalf("the receive loop sent %d READ responses for one request, want 1 to %d", sent, readBurst)
	}
	got := recvResponses(t, peer, 300*time.Millisecond)
	if len(got) != npkts {
		t.Fatalf("%d READ responses arrived, want %d", len(got), npkts)
	}
	for i, p := range got {
		if p.BTH.PSN() != psnAdd(0x100, uint32(i)) || !bytes.Equal(p.Payload, buf[i*256:(i+1)*256]) {
			t.Fatalf("response %d: PSN %#x, payload wrong or out of order", i, p.BTH.PSN())
		}
	}
	if ft.qpState() != verbs.QPSRTS {
		t.Fatalf("QP in %v", ft.qpState())
	}
}

// TestDuplicateReadAnsweredFromResource: a repeated READ is answered from
// what the original asked for, never from the duplicate's own RETH (which
// a forger would set to the largest region it can name), and a duplicate
// of a READ never executed is not answered at all.
func TestDuplicateReadAnsweredFromResource(t *testing.T) {
	ft := newFuzzTarget(t)
	ft.reset(t)
	peer := ft.peerLink(t)
	va, rkey := ft.remote.Addr(), ft.remote.RKey()
	ft.inject(ft.request(wire.RCReadRequest, 0x100, va, rkey, 512, nil), ft.peer) // 0x100, 0x101
	// A WRITE moves the expected PSN on, so 0x100 is behind it.
	ft.inject(ft.writeOnly(0x102, 0, []byte{1, 2, 3, 4}), ft.peer)
	// Duplicates: of the READ's second packet, naming the whole MR; and
	// one at an old PSN no READ had.
	ft.inject(ft.request(wire.RCReadRequest, 0x101, va, rkey, fuzzGuard, nil), ft.peer)
	ft.inject(ft.request(wire.RCReadRequest, 0xf0, va, rkey, 256, nil), ft.peer)
	got := recvResponses(t, peer, 300*time.Millisecond)
	var psns []uint32
	for _, p := range got {
		psns = append(psns, p.BTH.PSN())
	}
	// The READ's two responses, then the replay of its second part.
	if len(psns) != 3 || psns[0] != 0x100 || psns[1] != 0x101 || psns[2] != 0x101 {
		t.Fatalf("READ responses at PSNs %#x, want 0x100 0x101 0x101", psns)
	}
	if !bytes.Equal(got[2].Payload, ft.remoteBytes(256, 256)) {
		t.Fatal("the replay sent other bytes than the original READ's second part")
	}
}

// cutPair connects a to b over a pipe network, runs one WRITE through (so
// that the round trip is measured and PSNs lie behind the acknowledged
// one), then cuts the wire and posts wr, which stays outstanding.
func cutPair(t *testing.T, mkWR func(a *node) verbs.SendWR) (a, b *node) {
	t.Helper()
	o := pairOpts{mtu: verbs.MTU1024, timeout: 18} // ~1 s ACK timeout: no timeouts meanwhile
	o.defaults()
	n, la, lb := pipeNetwork(t, pipe.Faults{})
	a, b = newNode(t, la, o), newNode(t, lb, o)
	connect(t, a, b, o)
	a.postSend(verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{a.sge(0, 8<<10)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	expectWC(t, a.scq, 1, verbs.WCRDMAWrite, verbs.WCSuccess)
	n.SetFaults(pipe.Faults{Loss: 1})
	wr := mkWR(a)
	if wr.Opcode != verbs.WRSend {
		wr.RemoteAddr, wr.RKey = b.mr.Addr(), b.mr.RKey()
	}
	a.postSend(wr)
	return a, b
}

// forgeRNR is an RNR NAK for dqpn at psn with RNR timer code code.
func forgeRNR(dqpn, psn uint32, code uint8) []byte {
	b := make([]byte, wire.BTHLen+wire.AETHLen)
	wire.BTH(b).Encode(&wire.BTHFields{Opcode: wire.RCAcknowledge, MigReq: true, PKey: wire.DefaultPKey, DestQP: dqpn, PSN: psn})
	wire.AETH(b[wire.BTHLen:]).Encode(wire.RNRSyndrome(code), 0)
	return b
}

func rnrState(q *QP) (wait bool, deadline int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.req.rnrWait, q.comp.rnrDeadline
}

// TestForgedRNRNAKs: an RNR NAK counts only at a PSN that needs a receive
// WQE (the last packet of a WRITE with immediate here, not its first) and
// not while an RNR wait is on (no responder sends one then: nothing was
// sent to it), so a flood of them cannot keep extending the wait.
func TestForgedRNRNAKs(t *testing.T) {
	var a *node
	wr := func() verbs.SendWR {
		return verbs.SendWR{ID: 2, Opcode: verbs.WRRDMAWriteWithImm, SGL: []verbs.SGE{a.sge(0, 4096)}, Imm: 1}
	}
	a, _ = cutPair(t, func(n *node) verbs.SendWR { a = n; return wr() })
	v := viewCompleter(a.qp)
	first, last := psnAdd(v.acked, 1), psnAdd(v.acked, 4) // four packets of 1 KiB
	inject(t, a.qp, forgeRNR(a.qp.QPN(), first, 0))
	if wait, _ := rnrState(a.qp); wait {
		t.Fatal("an RNR NAK at the first packet of a WRITE with immediate started an RNR wait")
	}
	inject(t, a.qp, forgeRNR(a.qp.QPN(), last, 0))
	wait, d1 := rnrState(a.qp)
	if !wait {
		t.Fatal("an RNR NAK at the packet that needs the receive WQE was ignored")
	}
	time.Sleep(2 * time.Millisecond)
	for range 10 {
		inject(t, a.qp, forgeRNR(a.qp.QPN(), last, 0))
	}
	if _, d2 := rnrState(a.qp); d2 != d1 {
		t.Fatalf("RNR NAKs during the RNR wait moved its end by %v", time.Duration(d2-d1))
	}
}

// TestRNRWaitBounded: with rnr_retry 7 (retry forever, for the IBTA), RNR
// NAKs for one request, each sent after the wait before it ended (as a
// forger that floods them achieves), stop holding it once its waits
// total maxRNRWait: it completes with WCRNRRetryExcErr.
func TestRNRWaitBounded(t *testing.T) {
	defer func(old int64) { maxRNRWait = old }(maxRNRWait)
	maxRNRWait = int64(30 * time.Millisecond)
	a, _ := cutPair(t, func(n *node) verbs.SendWR {
		return verbs.SendWR{ID: 2, Opcode: verbs.WRSend, SGL: []verbs.SGE{n.sge(0, 100)}}
	})
	psn := psnAdd(viewCompleter(a.qp).acked, 1)
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		if wc, ok := tryPoll(a.scq); ok {
			if wc.WRID != 2 || wc.Status != verbs.WCRNRRetryExcErr {
				t.Fatalf("completion %+v", wc)
			}
			return
		}
		if wait, _ := rnrState(a.qp); !wait {
			inject(t, a.qp, forgeRNR(a.qp.QPN(), psn, 13)) // 0.96 ms
		}
		time.Sleep(100 * time.Microsecond)
	}
	t.Fatal("RNR NAKs held the SEND for 3 s")
}

// tryPoll polls one completion, if there is one.
func tryPoll(cq verbs.CQ) (verbs.WC, bool) {
	var wc [1]verbs.WC
	n, err := cq.Poll(wc[:])
	return wc[0], err == nil && n == 1
}

// TestSequenceNAKFloodBounded: sequence NAKs at ever newer PSNs (each one
// moving the acknowledged PSN on by one, as a forger tracking the stream
// can send them) resend the window at most once per half the shortest
// round trip, not once per NAK (before: 30 NAKs resent 1485 packets).
func TestSequenceNAKFloodBounded(t *testing.T) {
	a, _ := cutPair(t, func(n *node) verbs.SendWR {
		return verbs.SendWR{ID: 2, Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{n.sge(0, 64<<10)}}
	})
	v := viewCompleter(a.qp)
	window := int(psnDiff(v.next, v.acked)) - 1
	if window < 8 {
		t.Fatalf("only %d packets outstanding", window)
	}
	// The shortest round trip measured, set long so that the NAKs below
	// all come within half of it, however slowly the test runs.
	a.qp.mu.Lock()
	a.qp.comp.rtt.min = int64(time.Second)
	a.qp.mu.Unlock()
	before := a.qp.Counters().Retransmits
	const naks = 30
	for i := range naks {
		inject(t, a.qp, forgeResponse(respSeqNAK, a.qp.QPN(), psnAdd(v.acked, uint32(i+1))))
	}
	re := a.qp.Counters().Retransmits - before
	t.Logf("%d sequence NAKs, window %d: %d packets resent", naks, window, re)
	if re > uint64(window) {
		t.Fatalf("%d sequence NAKs within half a round trip resent %d packets, more than one window of %d", naks, re, window)
	}
}

// TestPlainSeqNAKIgnoredBySelectiveQP: a selective-repeat responder
// reports gaps with selective NAKs only, so a plain sequence NAK to a
// selective-repeat requester is forged: it is counted and dropped, and
// neither acknowledges anything nor rewinds.
func TestPlainSeqNAKIgnoredBySelectiveQP(t *testing.T) {
	a, _, _ := stalledPair(t, true)
	v := viewCompleter(a.qp)
	before := a.qp.Counters()
	inject(t, a.qp, forgeResponse(respSeqNAK, a.qp.QPN(), psnAdd(v.acked, 2)))
	after := a.qp.Counters()
	if w := viewCompleter(a.qp); w.acked != v.acked || after.Retransmits != before.Retransmits {
		t.Fatalf("a plain sequence NAK moved a selective-repeat requester: acked %#x -> %#x, %d packets resent", v.acked, w.acked, after.Retransmits-before.Retransmits)
	}
	if after.UnexpectedResponses != before.UnexpectedResponses+1 {
		t.Fatalf("UnexpectedResponses %d, want %d", after.UnexpectedResponses, before.UnexpectedResponses+1)
	}
}
