package rsock

import "github.com/rsock-go/rsock/verbs"

// How the stream's queue pair recovers losses: what both sides' Params
// allow, and the send window the peer's ring leaves room for.

// recovery is the loss recovery both sides of a stream support.
type recovery struct {
	selective  bool // selective repeat instead of go-back-N
	congestion bool // the congestion controller and pacing, on top of selective repeat
	wideSACK   bool // selective NAKs of up to 4096 PSNs, on top of selective repeat
	ecn        bool // ECN-capable requests, CE echoes and the reaction, on top of congestion control
	dupEcho    bool // duplicate echoes and undoing spurious reductions, on top of congestion control
	holdEcho   bool // hold echoes, the hosts' holds let in flight while competing, on top of congestion control
}

// recoveryFor is the loss recovery of a stream between an endpoint with
// local Params and a peer with peer Params: each feature only when both
// offer it, and the extensions of selective repeat only with it.
func recoveryFor(local, peer Params) recovery {
	sr := local.SelectiveRepeat && peer.SelectiveRepeat
	cc := sr && local.CongestionControl && peer.CongestionControl
	return recovery{
		selective:  sr,
		congestion: cc,
		wideSACK:   sr && local.WideSACK && peer.WideSACK,
		ecn:        cc && local.ECN && peer.ECN,
		dupEcho:    cc && local.DuplicateEcho && peer.DuplicateEcho,
		holdEcho:   cc && local.HoldEcho && peer.HoldEcho,
	}
}

// ringWindow is the most request packets a stream can have in flight
// toward a peer ring of ringSize bytes and depth receive requests at mtu
// bytes per packet (the path MTU's, or the packet MTU): the ring's bytes in full packets, and one
// partial packet for each of the two WRITEs a message may take (at the
// ring's end it wraps) and for each control SEND.
func ringWindow(ringSize, mtu, depth int) int {
	return (ringSize+mtu-1)/mtu + 2*depth
}

// setRecovery turns on what r says on the endpoint's QP, and with wide
// SACK bounds its send window by what the peer's ring can take: a window
// the ring can never fill only hides the congestion window's reductions.
// Without wide SACK the window stays as it has always been (512 packets),
// so that toward older peers nothing changes. The Params said the QP
// supports each feature.
func (e *Endpoint) setRecovery(r recovery, ringSize, mtu, depth int) error {
	if !r.selective {
		return nil
	}
	if err := e.qp.(verbs.SelectiveRepeater).SetSelectiveRepeat(true); err != nil {
		return err
	}
	if r.congestion {
		if err := e.qp.(verbs.CongestionController).SetCongestionControl(true); err != nil {
			return err
		}
	}
	if r.ecn {
		if err := e.qp.(verbs.ECNReactor).SetECN(true); err != nil {
			return err
		}
	}
	if r.dupEcho {
		if err := e.qp.(verbs.DuplicateEchoer).SetDuplicateEcho(true); err != nil {
			return err
		}
	}
	if r.holdEcho {
		if err := e.qp.(verbs.HoldEchoer).SetHoldEcho(true); err != nil {
			return err
		}
	}
	if !r.wideSACK {
		return nil
	}
	if err := e.qp.(verbs.WideSACKer).SetWideSACK(true); err != nil {
		return err
	}
	if l, ok := e.qp.(verbs.SendWindowLimiter); ok {
		return l.SetSendWindowLimit(ringWindow(ringSize, mtu, depth))
	}
	return nil
}
