package softroce

import (
	"fmt"
	"testing"
	"time"

	"github.com/rsock-go/rsock/verbs"
	"github.com/rsock-go/rsock/verbs/softroce/link/pipe"
	"github.com/rsock-go/rsock/verbs/softroce/wire"
)

// respKind is a kind of response packet a requester may receive.
type respKind int

const (
	respACK respKind = iota
	respRNR
	respSeqNAK
	respAccessNAK
	respSelectiveNAK
	respRead
	respAtomic
	numRespKinds
)

func (k respKind) String() string {
	return [...]string{"ACK", "RNR-NAK", "seq-NAK", "access-NAK", "selective-NAK", "READ-response", "atomic-ACK"}[k]
}

// forgeResponse builds a response of kind k for QP dqpn at psn, as a peer
// (or someone posing as one) would send it, without the ICRC.
func forgeResponse(k respKind, dqpn, psn uint32) []byte {
	b := make([]byte, 0, 256)
	bth := func(op wire.Opcode) {
		b = b[:wire.BTHLen]
		wire.BTH(b).Encode(&wire.BTHFields{Opcode: op, MigReq: true, PKey: wire.DefaultPKey, DestQP: dqpn, PSN: psn})
	}
	aeth := func(s wire.Syndrome) {
		n := len(b)
		b = b[:n+wire.AETHLen]
		wire.AETH(b[n:]).Encode(s, 0)
	}
	switch k {
	case respACK:
		bth(wire.RCAcknowledge)
		aeth(wire.ACKSyndrome(31))
	case respRNR:
		bth(wire.RCAcknowledge)
		aeth(wire.RNRSyndrome(1))
	case respSeqNAK:
		bth(wire.RCAcknowledge)
		aeth(wire.NAKSyndrome(wire.NAKPSNSeqErr))
	case respAccessNAK:
		bth(wire.RCAcknowledge)
		aeth(wire.NAKSyndrome(wire.NAKRemoteAccess))
	case respSelectiveNAK:
		bth(wire.RCSelectiveNAK)
		aeth(wire.NAKSyndrome(wire.NAKPSNSeqErr))
		n := len(b)
		b = b[:n+wire.SACKHeaderLen+8]
		wire.SACKInfo(b[n:]).SetNewest(psnAdd(psn, 40))
		for i := n + wire.SACKHeaderLen; i < len(b); i++ {
			b[i] = 0xff // everything after psn "arrived"
		}
	case respRead:
		bth(wire.RCReadResponseOnly)
		aeth(wire.ACKSyndrome(31))
		b = append(b, 1, 2, 3, 4)
	case respAtomic:
		bth(wire.RCAtomicAcknowledge)
		aeth(wire.ACKSyndrome(31))
		b = append(b, 0, 0, 0, 0, 0, 0, 0, 42)
	}
	return b
}

// inject hands a forged response to q's completer, as the receive loop
// does with a packet from q's peer.
func inject(t *testing.T, q *QP, b []byte) {
	t.Helper()
	pkt, err := wire.Parse(b)
	if err != nil {
		t.Fatalf("forged packet does not parse: %v", err)
	}
	q.mu.Lock()
	q.complete(&pkt)
	q.mu.Unlock()
}

// stalledPair connects a to b over a pipe network, runs one WRITE through
// (so that PSNs lie behind the acknowledged one), then cuts the wire and
// posts a second WRITE, which stays outstanding until the wire is mended.
func stalledPair(t *testing.T, selective bool) (a, b *node, mend func()) {
	t.Helper()
	return stalledPairWide(t, selective, false)
}

// stalledPairWide is stalledPair with wide SACK on both QPs when wide
// (and selective) is set.
func stalledPairWide(t *testing.T, selective, wide bool) (a, b *node, mend func()) {
	t.Helper()
	o := pairOpts{selective: selective, wide: wide && selective, timeout: 16, mtu: verbs.MTU1024} // ~270 ms ACK timeout
	o.defaults()
	n, la, lb := pipeNetwork(t, pipe.Faults{})
	a, b = newNode(t, la, o), newNode(t, lb, o)
	connect(t, a, b, o)
	a.postSend(verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{a.sge(0, 8<<10)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	expectWC(t, a.scq, 1, verbs.WCRDMAWrite, verbs.WCSuccess)
	n.SetFaults(pipe.Faults{Loss: 1})
	a.postSend(verbs.SendWR{ID: 2, Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{a.sge(0, 4<<10)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	return a, b, func() { n.SetFaults(pipe.Faults{}) }
}

// completerView is the completer state a dropped response must not move.
type completerView struct {
	state           verbs.QPState
	acked, next     uint32
	cwnd, ssthresh  int
	rnrWait, rewind bool
	sacked          int
	retryLeft       uint8
}

func viewCompleter(q *QP) completerView {
	q.mu.Lock()
	defer q.mu.Unlock()
	v := completerView{state: q.attr.State, acked: q.comp.ackedPSN, next: q.req.nextPSN,
		cwnd: q.comp.win.cwnd, ssthresh: q.comp.win.ssthresh, rnrWait: q.req.rnrWait,
		rewind: q.comp.rewound, retryLeft: q.comp.retryLeft}
	if q.comp.sb != nil {
		v.sacked = q.comp.sb.sacked
	}
	return v
}

// TestResponsesOutsideOutstandingRangeDropped: every kind of response
// whose PSN is not outstanding (long acknowledged, the newest
// acknowledged, never sent, half the PSN space away) is counted and
// dropped without moving the completer, and the connection carries on.
// Before the check, a NAK for an acknowledged PSN failed the oldest
// outstanding request and the QP, an RNR NAK paused it, a sequence NAK
// cut its window, and a selective NAK marked PSNs that never arrived.
func TestResponsesOutsideOutstandingRangeDropped(t *testing.T) {
	for _, selective := range []bool{false, true} {
		for k := range numRespKinds {
			if k == respSelectiveNAK && !selective {
				continue // a go-back-N QP never asked for one
			}
			t.Run(fmt.Sprintf("selective=%v/%v", selective, k), func(t *testing.T) {
				a, _, mend := stalledPair(t, selective)
				before := viewCompleter(a.qp)
				high := func() uint32 { a.qp.mu.Lock(); defer a.qp.mu.Unlock(); return a.qp.req.highPSN }()
				psns := map[string]uint32{
					"long acknowledged":   psnAdd(before.acked, wire.PSNMask-5), // inside the first WRITE
					"newest acknowledged": before.acked,
					"never sent":          psnAdd(high, 3),
					"half the space away": psnAdd(before.acked, 1<<23),
				}
				c0 := a.qp.Counters().UnexpectedResponses
				for name, psn := range psns {
					inject(t, a.qp, forgeResponse(k, a.qp.QPN(), psn))
					if after := viewCompleter(a.qp); after != before {
						t.Fatalf("%v at a PSN %s (%#x; acked %#x, high %#x) moved the completer:\n%+v\nto\n%+v",
							k, name, psn, before.acked, high, before, after)
					}
				}
				if got := a.qp.Counters().UnexpectedResponses - c0; got != uint64(len(psns)) {
					t.Errorf("UnexpectedResponses grew by %d, want %d", got, len(psns))
				}
				noWC(t, a.scq, 10*time.Millisecond)
				mend()
				expectWC(t, a.scq, 2, verbs.WCRDMAWrite, verbs.WCSuccess)
			})
		}
	}
}

// TestOutstandingNAKActedOn is the control of the test above: the same
// forged remote access NAK, at the oldest outstanding PSN, does fail the
// request, so the forged packets reach the completer.
func TestOutstandingNAKActedOn(t *testing.T) {
	a, _, _ := stalledPair(t, false)
	v := viewCompleter(a.qp)
	inject(t, a.qp, forgeResponse(respAccessNAK, a.qp.QPN(), psnAdd(v.acked, 1)))
	expectWC(t, a.scq, 2, verbs.WCRDMAWrite, verbs.WCRemAccessErr)
	if c := a.qp.Counters().UnexpectedResponses; c != 0 {
		t.Errorf("an outstanding NAK was counted unexpected (%d)", c)
	}
}

// TestUnmatchedResponsesDropped: a READ response or atomic ACK whose PSN
// is outstanding but belongs to a WRITE is counted and dropped.
func TestUnmatchedResponsesDropped(t *testing.T) {
	for _, k := range []respKind{respRead, respAtomic} {
		t.Run(k.String(), func(t *testing.T) {
			a, _, mend := stalledPair(t, false)
			before := viewCompleter(a.qp)
			inject(t, a.qp, forgeResponse(k, a.qp.QPN(), psnAdd(before.acked, 2)))
			if after := viewCompleter(a.qp); after != before {
				t.Fatalf("%v for a WRITE's PSN moved the completer:\n%+v\nto\n%+v", k, before, after)
			}
			if c := a.qp.Counters().UnexpectedResponses; c != 1 {
				t.Errorf("UnexpectedResponses = %d, want 1", c)
			}
			mend()
			expectWC(t, a.scq, 2, verbs.WCRDMAWrite, verbs.WCSuccess)
		})
	}
}

// TestRequestsAheadCounted: a request ahead of the expected PSN, dropped
// by a go-back-N responder, is counted, and so is every further one
// after the single sequence NAK.
func TestRequestsAheadCounted(t *testing.T) {
	ft := newFuzzTarget(t)
	ft.reset(t)
	w := ft.seedPackets()[3] // WRITE_ONLY at the expected PSN 0x100
	for i, psn := range []uint32{0x105, 0x100 + 1<<22, 0x101} {
		wire.BTH(w).SetPSN(psn)
		ft.inject(w, ft.peer)
		if c := ft.n.dev.Counters(); c.OutOfSequence != uint64(i+1) || c.SeqNAKsSent != 1 {
			t.Fatalf("after %d requests ahead: OutOfSequence %d, SeqNAKsSent %d", i+1, c.OutOfSequence, c.SeqNAKsSent)
		}
	}
	ft.check(t)
}

// TestForgedSACKRecovered: a selective NAK inside the outstanding range
// that reports PSNs as arrived which never did (forged, or from a
// responder that lost what it reported) cannot stall the QP: once a
// second timeout passes without progress, the requester forgets the
// reports and sends everything unacknowledged again.
func TestForgedSACKRecovered(t *testing.T) {
	a, _, mend := stalledPair(t, true)
	v := viewCompleter(a.qp)
	inject(t, a.qp, forgeResponse(respSelectiveNAK, a.qp.QPN(), psnAdd(v.acked, 1)))
	if after := viewCompleter(a.qp); after.sacked == 0 {
		t.Fatalf("the forged selective NAK marked nothing: %+v", after)
	}
	mend()
	expectWC(t, a.scq, 2, verbs.WCRDMAWrite, verbs.WCSuccess)
}
