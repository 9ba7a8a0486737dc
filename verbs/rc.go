package verbs

import "fmt"

// Bringing a reliable-connected queue pair up: RESET to INIT (InitRC), then
// INIT through RTR to RTS (ConnectRC), with the attributes each transition
// requires (CheckTransition's table) and nothing else. Every user of a QP
// (rsock's streams, the benchmarks and the stand-ins for rdma-core's
// tools) goes through these two.

// InitRC moves qp from RESET to INIT on port 1, P_Key index 0, allowing
// the remote operations access. Receives may be posted from INIT on.
func InitRC(qp QP, access Access) error {
	err := qp.Modify(&QPAttr{State: QPSInit, Port: 1, AccessFlags: access},
		AttrState|AttrPKeyIndex|AttrPort|AttrAccessFlags)
	if err != nil {
		return fmt.Errorf("QP to INIT: %w", err)
	}
	return nil
}

// RCPeer is what ConnectRC aims a QP at, and its timers.
type RCPeer struct {
	// AH is the peer's address (GID, UDP port, hop limit).
	AH AH
	// PathMTU is the path MTU, at most the peer's and the port's.
	PathMTU MTU
	// DestQPN and RQPSN are the peer's QP number and its first PSN.
	DestQPN, RQPSN uint32
	// SQPSN is this QP's first PSN.
	SQPSN uint32
	// MaxDestRdAtomic is how many READs and atomics the peer may have
	// outstanding at this QP; MaxRdAtomic how many this QP may have at
	// the peer.
	MaxDestRdAtomic, MaxRdAtomic uint8
	// MinRNRTimer is the RNR NAK delay this QP asks for (IBTA's code).
	MinRNRTimer uint8
	// Timeout is the local ACK timeout (4.096 µs × 2^Timeout), RetryCnt
	// its retries, RNRRetry the RNR retries (7: forever).
	Timeout, RetryCnt, RNRRetry uint8
}

// ConnectRC moves qp from INIT through RTR to RTS, aimed at p.
func ConnectRC(qp QP, p RCPeer) error {
	err := qp.Modify(&QPAttr{State: QPSRTR, AH: p.AH, PathMTU: p.PathMTU, DestQPN: p.DestQPN, RQPSN: p.RQPSN,
		MaxDestRdAtomic: p.MaxDestRdAtomic, MinRNRTimer: p.MinRNRTimer},
		AttrState|AttrAV|AttrPathMTU|AttrDestQPN|AttrRQPSN|AttrMaxDestRdAtomic|AttrMinRNRTimer)
	if err != nil {
		return fmt.Errorf("QP to RTR: %w", err)
	}
	err = qp.Modify(&QPAttr{State: QPSRTS, SQPSN: p.SQPSN, Timeout: p.Timeout, RetryCnt: p.RetryCnt, RNRRetry: p.RNRRetry,
		MaxRdAtomic: p.MaxRdAtomic},
		AttrState|AttrSQPSN|AttrTimeout|AttrRetryCnt|AttrRNRRetry|AttrMaxQPRdAtomic)
	if err != nil {
		return fmt.Errorf("QP to RTS: %w", err)
	}
	return nil
}
