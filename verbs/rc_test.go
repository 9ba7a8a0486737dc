package verbs

import (
	"errors"
	"net/netip"
	"testing"
)

// stateQP is a QP that only keeps its state and checks each transition
// with CheckTransition, as the providers do: it isolates InitRC and
// ConnectRC from any provider.
type stateQP struct {
	QP
	state QPState
	attrs []QPAttr
}

func (q *stateQP) Modify(attr *QPAttr, mask QPAttrMask) error {
	if err := CheckTransition(q.state, attr.State, mask); err != nil {
		return err
	}
	q.state = attr.State
	q.attrs = append(q.attrs, *attr)
	return nil
}

// TestRCUp: InitRC and ConnectRC take a QP from RESET to RTS with the
// attributes each transition requires, and carry the caller's values;
// out of order they fail with the transition's error.
func TestRCUp(t *testing.T) {
	q := &stateQP{state: QPSReset}
	if err := ConnectRC(q, RCPeer{}); !errors.As(err, new(*TransitionError)) {
		t.Fatalf("ConnectRC from RESET: %v", err)
	}
	if err := InitRC(q, AccessRemoteWrite); err != nil || q.state != QPSInit {
		t.Fatalf("InitRC: %v, state %v", err, q.state)
	}
	peer := RCPeer{AH: AH{DGID: GIDFromAddr(netip.MustParseAddr("10.0.0.2")), DPort: RoCEv2Port, HopLimit: 64},
		PathMTU: MTU1024, DestQPN: 0x42, RQPSN: 7, SQPSN: 9, MaxDestRdAtomic: 1, MaxRdAtomic: 2,
		MinRNRTimer: 12, Timeout: 14, RetryCnt: 6, RNRRetry: 7}
	if err := ConnectRC(q, peer); err != nil || q.state != QPSRTS {
		t.Fatalf("ConnectRC: %v, state %v", err, q.state)
	}
	init, rtr, rts := q.attrs[0], q.attrs[1], q.attrs[2]
	if init.AccessFlags != AccessRemoteWrite || init.Port != 1 {
		t.Errorf("INIT attributes %+v", init)
	}
	if rtr.AH != peer.AH || rtr.PathMTU != peer.PathMTU || rtr.DestQPN != peer.DestQPN || rtr.RQPSN != peer.RQPSN ||
		rtr.MaxDestRdAtomic != peer.MaxDestRdAtomic || rtr.MinRNRTimer != peer.MinRNRTimer {
		t.Errorf("RTR attributes %+v, want those of %+v", rtr, peer)
	}
	if rts.SQPSN != peer.SQPSN || rts.Timeout != peer.Timeout || rts.RetryCnt != peer.RetryCnt ||
		rts.RNRRetry != peer.RNRRetry || rts.MaxRdAtomic != peer.MaxRdAtomic {
		t.Errorf("RTS attributes %+v, want those of %+v", rts, peer)
	}
	if err := InitRC(q, 0); err == nil {
		t.Error("InitRC from RTS succeeded")
	}
}
