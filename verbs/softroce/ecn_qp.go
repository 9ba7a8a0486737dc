package softroce

import (
	"github.com/rsock-go/rsock/verbs/softroce/link"
	"github.com/rsock-go/rsock/verbs/softroce/wire"
)

// ECN between rsock peers (negotiated, on top of congestion control): the
// requester sends its request packets ECN-capable, a queue on the path
// that would otherwise build or drop marks them CE, the responder counts
// the marks and echoes the counts (wire.ECNEcho), and the requester's
// controller reacts to the share of its packets that were marked
// (congestion_ecn.go). Toward peers that did not negotiate it, nothing is
// marked ECN-capable, and no echo is sent or believed.

// ecnCodepoint is what requests of a QP with ECN go out with: ECT(0),
// the classic codepoint. ECT(1) would claim L4S treatment (RFC 9331),
// whose senders must also meet requirements rsock does not (detecting a
// classic queue that marks, RTT independence); a queue that marks CE at
// a threshold, as routers' RED and DCTCP switches do, treats both alike.
const ecnCodepoint = link.ECNECT0

// maxECNDelta bounds the new CE marks one echo may report: more than any
// window's packets. An echo reporting more (a reordered echo, whose count
// is behind the last one acted on, wraps to a huge delta) is ignored.
const maxECNDelta = 1 << 20

// ecnState is the QP's ECN bookkeeping.
type ecnState struct {
	// Responder: request packets that arrived ECN-capable, and those of
	// them CE-marked, modulo 2^32 (what echoes carry); the CE count last
	// echoed; whether the QP is on the receiver's list for an echo.
	ect, ce, echoedCE uint32
	// Requester: the peer's CE count as of the last echo acted on.
	peerCE uint32
}

// SetECN turns ECN on or off for the QP: its requests go out
// ECN-capable, CE marks on what it receives are echoed to the peer, and
// the peer's echoes reduce its congestion window. It applies only with
// congestion control (SetCongestionControl), between rsock peers that
// both asked for it (rsock negotiates it in its handshake). It may be
// called in RESET, INIT or RTR.
func (q *QP) SetECN(on bool) error {
	return q.setOption(&q.ecn, on)
}

// requestECN is the ECN codepoint of the QP's next request packet:
// ecnCodepoint with ECN on and a congestion controller to react to the
// marks, else Not-ECT.
func (q *QP) requestECN() link.ECN {
	if q.ecn && q.comp.win.cc != nil {
		return ecnCodepoint
	}
	return link.ECNNotECT
}

// noteECN counts the ECN codepoint of a request packet that arrived for
// the QP, and with ECN on has an echo sent at the end of the batch when
// it is CE-marked. The caller holds q.mu.
func (q *QP) noteECN(e link.ECN, rx *receiver) {
	if e == link.ECNNotECT {
		return
	}
	q.count(cECNCapableRecv, 1)
	q.ecnCounts.ect++
	if e != link.ECNCE {
		return
	}
	q.count(cECNCERecv, 1)
	q.ecnCounts.ce++
	if q.ecn {
		q.queueOwed(rx)
	}
}

// sendECNEcho sends an ECN echo if CE marks arrived since the last one.
// The caller holds q.mu and reserved a response.
func (q *QP) sendECNEcho(rx *receiver) {
	s := &q.ecnCounts
	if !q.ecn || s.ce == s.echoedCE {
		return
	}
	s.echoedCE = s.ce
	wire.ECNEcho(q.echo(rx, wire.RCECNEcho, wire.ECNEchoLen)).Encode(s.ect, s.ce)
	q.count(cECNEchoesSent, 1)
}

// echo builds an echo packet of opcode op (a BTH whose PSN is the one
// the responder expects next, then n header bytes) in a response buffer,
// and returns its header for the caller to write. The caller holds q.mu
// and reserved a response.
func (q *QP) echo(rx *receiver, op wire.Opcode, n int) []byte {
	p := rx.packet()
	b := p.Buf[:wire.BTHLen+n]
	q.encodeResponseBTH(b, op, q.resp.epsn, 0)
	p.N = len(b)
	p.Addr = q.peer
	return b[wire.BTHLen:]
}

// onECNEcho hands the CE marks an echo reports that the last one did not
// to the congestion controller. An echo toward a QP without ECN, or one
// whose count is behind (reordered) or implausibly far ahead, is dropped.
// The caller holds q.mu.
func (q *QP) onECNEcho(pkt *wire.Packet) {
	cc := q.comp.win.cc
	if !q.ecn || cc == nil {
		q.count(cUnexpectedResponses, 1)
		return
	}
	q.count(cECNEchoesRecv, 1)
	ce := pkt.ECNEcho.CE()
	delta := ce - q.ecnCounts.peerCE
	if delta == 0 || delta > maxECNDelta {
		return
	}
	q.ecnCounts.peerCE = ce
	q.count(cECNMarksEchoed, uint64(delta))
	cc.OnECNMarks(int(delta))
}
