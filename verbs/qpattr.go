package verbs

// QPAttrMask selects the QPAttr fields that Modify applies (ibv_qp_attr_mask).
type QPAttrMask uint32

// Attribute mask bits, numbered as in libibverbs.
const (
	AttrState            QPAttrMask = 1 << 0
	AttrCurState         QPAttrMask = 1 << 1
	AttrEnSQDAsyncNotify QPAttrMask = 1 << 2
	AttrAccessFlags      QPAttrMask = 1 << 3
	AttrPKeyIndex        QPAttrMask = 1 << 4
	AttrPort             QPAttrMask = 1 << 5
	AttrQKey             QPAttrMask = 1 << 6
	AttrAV               QPAttrMask = 1 << 7
	AttrPathMTU          QPAttrMask = 1 << 8
	AttrTimeout          QPAttrMask = 1 << 9
	AttrRetryCnt         QPAttrMask = 1 << 10
	AttrRNRRetry         QPAttrMask = 1 << 11
	AttrRQPSN            QPAttrMask = 1 << 12
	AttrMaxQPRdAtomic    QPAttrMask = 1 << 13
	AttrAltPath          QPAttrMask = 1 << 14
	AttrMinRNRTimer      QPAttrMask = 1 << 15
	AttrSQPSN            QPAttrMask = 1 << 16
	AttrMaxDestRdAtomic  QPAttrMask = 1 << 17
	AttrPathMigState     QPAttrMask = 1 << 18
	AttrCap              QPAttrMask = 1 << 19
	AttrDestQPN          QPAttrMask = 1 << 20
)

// AH is an address handle: where a connected QP's packets go.
type AH struct {
	// DGID is the peer's GID (its IP address for RoCEv2).
	DGID GID
	// SGIDIndex selects the local GID.
	SGIDIndex uint8
	HopLimit  uint8
	// TrafficClass is the IP traffic class / DSCP byte.
	TrafficClass uint8
	FlowLabel    uint32
	// DPort is a soft-RoCE extension: the peer's UDP port when its link
	// could not bind 4791. Zero means 4791. Hardware ignores it.
	DPort uint16
}

// QPAttr holds the attributes of a queue pair (ibv_qp_attr).
type QPAttr struct {
	State QPState
	// AccessFlags are the remote operations the responder allows.
	AccessFlags Access
	PKeyIndex   uint16
	Port        uint8
	AH          AH
	PathMTU     MTU
	// Timeout is the local ACK timeout, 4.096 µs × 2^Timeout; 0 waits forever.
	Timeout uint8
	// RetryCnt is how often a request is retried after a timeout or NAK
	// before the QP fails with WCRetryExcErr (0–7).
	RetryCnt uint8
	// RNRRetry is how often an RNR NAK is retried (0–6; 7 is forever).
	RNRRetry uint8
	// RQPSN is the PSN the responder expects first.
	RQPSN uint32
	// MaxRdAtomic bounds the READs and atomics in flight as initiator.
	MaxRdAtomic uint8
	// MinRNRTimer is the RNR NAK timer code this QP sends as responder.
	MinRNRTimer uint8
	// SQPSN is the first PSN the requester sends.
	SQPSN uint32
	// MaxDestRdAtomic bounds the READs and atomics held as responder.
	MaxDestRdAtomic uint8
	DestQPN         uint32
	Cap             QPCap
}

// QPCap sizes a queue pair's work queues (ibv_qp_cap).
type QPCap struct {
	MaxSendWR     uint32
	MaxRecvWR     uint32
	MaxSendSGE    uint32
	MaxRecvSGE    uint32
	MaxInlineData uint32
}

// QPInitAttr describes a queue pair to create (ibv_qp_init_attr, RC only).
type QPInitAttr struct {
	SendCQ CQ
	RecvCQ CQ
	Cap    QPCap
	// SigAll makes every send work request signaled.
	SigAll bool
}

// transitionMasks lists, for each allowed state change, the attributes
// that must be given and those that may be (IBA 11.2.4.2, as the kernel's
// ib_modify_qp_is_ok checks them for RC).
type transitionMasks struct{ required, optional QPAttrMask }

var qpTransitions = map[[2]QPState]transitionMasks{
	{QPSReset, QPSInit}: {AttrPKeyIndex | AttrPort | AttrAccessFlags, 0},
	{QPSInit, QPSInit}:  {0, AttrPKeyIndex | AttrPort | AttrAccessFlags},
	{QPSInit, QPSRTR}: {AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN | AttrMaxDestRdAtomic | AttrMinRNRTimer,
		AttrPKeyIndex | AttrAccessFlags | AttrAltPath},
	{QPSRTR, QPSRTS}: {AttrSQPSN | AttrTimeout | AttrRetryCnt | AttrRNRRetry | AttrMaxQPRdAtomic,
		AttrCurState | AttrAltPath | AttrAccessFlags | AttrMinRNRTimer | AttrPathMigState},
	{QPSRTS, QPSRTS}: {0, AttrCurState | AttrAccessFlags | AttrAltPath | AttrPathMigState | AttrMinRNRTimer},
	{QPSSQE, QPSRTS}: {0, AttrCurState | AttrAccessFlags | AttrMinRNRTimer},
}

// Apply copies into a the attributes of src that mask names, as
// ibv_modify_qp takes them: access flags, P_Key index, port, address
// vector, path MTU, timeouts and retry counts, PSNs, RDMA-read depths and
// the destination QP. State and Cap are the provider's to handle.
func (a *QPAttr) Apply(src *QPAttr, mask QPAttrMask) {
	if mask&AttrAccessFlags != 0 {
		a.AccessFlags = src.AccessFlags
	}
	if mask&AttrPKeyIndex != 0 {
		a.PKeyIndex = src.PKeyIndex
	}
	if mask&AttrPort != 0 {
		a.Port = src.Port
	}
	if mask&AttrAV != 0 {
		a.AH = src.AH
	}
	if mask&AttrPathMTU != 0 {
		a.PathMTU = src.PathMTU
	}
	if mask&AttrTimeout != 0 {
		a.Timeout = src.Timeout
	}
	if mask&AttrRetryCnt != 0 {
		a.RetryCnt = src.RetryCnt
	}
	if mask&AttrRNRRetry != 0 {
		a.RNRRetry = src.RNRRetry
	}
	if mask&AttrRQPSN != 0 {
		a.RQPSN = src.RQPSN
	}
	if mask&AttrMaxQPRdAtomic != 0 {
		a.MaxRdAtomic = src.MaxRdAtomic
	}
	if mask&AttrMinRNRTimer != 0 {
		a.MinRNRTimer = src.MinRNRTimer
	}
	if mask&AttrSQPSN != 0 {
		a.SQPSN = src.SQPSN
	}
	if mask&AttrMaxDestRdAtomic != 0 {
		a.MaxDestRdAtomic = src.MaxDestRdAtomic
	}
	if mask&AttrDestQPN != 0 {
		a.DestQPN = src.DestQPN
	}
}

// CheckTransition reports whether moving a QP from cur to next with the
// attributes in mask is allowed for an RC QP. Moves to RESET and ERR are
// always allowed. Providers call it so they all reject the same things.
func CheckTransition(cur, next QPState, mask QPAttrMask) error {
	if next == QPSReset || next == QPSErr {
		return nil
	}
	t, ok := qpTransitions[[2]QPState{cur, next}]
	if !ok {
		return &TransitionError{From: cur, To: next}
	}
	mask &^= AttrState
	if missing := t.required &^ mask; missing != 0 {
		return &TransitionError{From: cur, To: next, Missing: missing}
	}
	if extra := mask &^ (t.required | t.optional); extra != 0 {
		return &TransitionError{From: cur, To: next, Extra: extra}
	}
	return nil
}
