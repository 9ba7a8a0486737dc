package softroce

import (
	"time"

	"github.com/rsock-go/rsock/verbs/softroce/wire"
)

// Hold echoes between rsock peers (negotiated, on top of congestion
// control): how long each host held the packets of a round trip. A round
// trip sampled in user space counts the time the peer's process took to
// read a request from its socket and acknowledge it, and the time this
// process took to read the ACK: on a host whose CPUs are busy, as on a
// two-CPU machine that also forwards a TCP flow at 1 Gbit/s,
// milliseconds at each end, more than the network's queue. TCP's kernel
// acknowledges in the softirq that receives, and its round trip holds
// neither. A controller fed the whole round trip takes the hosts' delay
// for a longer path: its window buys a lower rate than the same window
// buys TCP, and at a shared bottleneck it got a third of the link.
//
// So the link stamps each packet with the kernel's arrival time
// (link.Packet.Arrived: SO_TIMESTAMPNS on the udp link), the responder
// echoes how long it held the newest request before acknowledging it
// (wire.HoldEcho), and the requester adds its own hold of the ACK to the
// peer's and hands the sum to the controller with each round-trip sample
// (congestion.go, OnHostDelay). The samples keep the holds; while
// competing on loss, the controller lets the packets the hosts hold be
// in flight beyond its window (Inflight).

const (
	// maxHold bounds a hold the requester believes: a larger one (a
	// clock step, a forged echo) is taken as no hold.
	maxHold = int64(time.Second)
	// minHoldEcho is the least hold echoed: a shorter one changes no
	// round trip that matters, and a process that keeps up (a
	// request-response exchange on an idle host) sends no echo.
	minHoldEcho = int64(50 * time.Microsecond)
)

// holdState is the QP's hold echo bookkeeping.
type holdState struct {
	// Responder: the kernel arrival time (wall clock, ns) and PSN of the
	// newest request received; 0 when not known.
	arrived int64
	psn     uint32
	// Requester: the kernel arrival time of the response being handled
	// (0: not known), and the peer's last echoed hold (ns) and the PSN it
	// timed, valid until used.
	respArrived int64
	peer        int64
	peerPSN     uint32
	peerValid   bool
}

// SetHoldEcho turns hold echoes on or off for the QP: its responder
// echoes how long it held requests before acknowledging them, and its
// requester tells its congestion controller the peer's holds and its
// own. It applies only with congestion control (SetCongestionControl),
// between rsock peers that both asked for it (rsock negotiates it in its
// handshake). It may be called in RESET, INIT or RTR.
func (q *QP) SetHoldEcho(on bool) error {
	return q.setOption(&q.holdEcho, on)
}

// noteArrival records when request psn arrived (the kernel's wall-clock
// timestamp, 0 if unknown). The caller holds q.mu.
func (q *QP) noteArrival(psn uint32, arrived int64) {
	if q.holdEcho && arrived != 0 {
		q.hold.arrived, q.hold.psn = arrived, psn
	}
}

// sendHoldEcho sends, before an ACK or selective NAK, how long the
// newest request has been held since it arrived, once per request, when
// that is at least minHoldEcho. The caller holds q.mu and reserved a
// response.
func (q *QP) sendHoldEcho(rx *receiver) {
	h := &q.hold
	if !q.holdEcho || h.arrived == 0 {
		return
	}
	held := time.Now().UnixNano() - h.arrived
	h.arrived = 0
	if held < minHoldEcho || held > maxHold {
		return
	}
	wire.HoldEcho(q.echo(rx, wire.RCHoldEcho, wire.HoldEchoLen)).Encode(uint32(held/1000), h.psn)
	q.count(cHoldEchoesSent, 1)
}

// onHoldEcho keeps the hold an echo reports for the sample of its PSN.
// An echo toward a QP without hold echoes is dropped. The caller holds
// q.mu.
func (q *QP) onHoldEcho(pkt *wire.Packet) {
	if !q.holdEcho || q.comp.win.cc == nil {
		q.count(cUnexpectedResponses, 1)
		return
	}
	q.count(cHoldEchoesRecv, 1)
	h := &q.hold
	h.peer = int64(pkt.HoldEcho.Hold()) * 1000
	h.peerPSN, h.peerValid = pkt.HoldEcho.PSN(), h.peer <= maxHold
}

// hostDelay is how much of the round trip of psn, sampled now, the hosts
// held it: this process's hold of the response being handled, and the
// peer's echoed hold of psn. The caller holds q.mu.
func (q *QP) hostDelay(psn uint32) int64 {
	if !q.holdEcho {
		return 0
	}
	h := &q.hold
	var d int64
	if h.respArrived != 0 {
		if own := time.Now().UnixNano() - h.respArrived; own > 0 && own <= maxHold {
			d = own
		}
	}
	if h.peerValid && h.peerPSN == psn {
		d += h.peer
		h.peerValid = false
	}
	return d
}
