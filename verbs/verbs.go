package verbs

import (
	"context"
	"time"
)

// Device is an opened RDMA device (ibv_context). All of its objects are
// released when it is closed.
type Device interface {
	// Name is the device name, e.g. "softroce0" or "rxe0".
	Name() string
	// Provider names the provider: "softroce", "shm" or "rdmacore".
	Provider() string
	// Link names how packets travel: "udp", "pipe", "dpdk", "shm" (no
	// packets: shared memory), or "ib"/"roce" for hardware.
	Link() string
	// Port describes the device's (single) port, including its GID table.
	Port() PortAttr
	// AllocPD allocates a protection domain.
	AllocPD() (PD, error)
	// CreateCQ creates a completion queue with room for at least depth completions.
	CreateCQ(depth int) (CQ, error)
	// Counters returns a snapshot of the device's statistics.
	Counters() Counters
	// Close destroys every object of the device. It is idempotent.
	Close() error
}

// PD is a protection domain: MRs and QPs of one PD are reachable only from
// each other.
type PD interface {
	// RegMR registers buf, which must not move or be freed until the MR is
	// closed (use AllocBuffer).
	RegMR(buf []byte, access Access) (MR, error)
	// CreateQP creates an RC queue pair in the RESET state.
	CreateQP(attr *QPInitAttr) (QP, error)
	// Close deallocates the PD. It fails with ErrBusy while MRs or QPs use it.
	Close() error
}

// MR is a registered memory region.
type MR interface {
	// Buf is the registered memory.
	Buf() []byte
	// Addr is the virtual address of Buf[0], as used in SGEs and by peers.
	Addr() uint64
	LKey() uint32
	RKey() uint32
	Access() Access
	// Close deregisters the region. After it returns no device access to
	// the memory is in progress or will start. It is idempotent.
	Close() error
}

// CQ is a completion queue.
type CQ interface {
	// Poll moves up to len(wcs) completions into wcs and returns how many.
	// It returns ErrCQOverrun (with the completions it has) once
	// completions were lost to a full queue.
	Poll(wcs []WC) (int, error)
	// Wait blocks until the CQ holds a completion, ctx ends (ctx.Err()),
	// or the CQ is closed (ErrClosed).
	Wait(ctx context.Context) error
	// Notify returns a channel that receives a token after completions
	// are added (like an ibv completion channel): wait on it in a select
	// with other events, then Poll. A token may be stale; Poll says.
	Notify() <-chan struct{}
	// Close destroys the CQ. It is idempotent.
	Close() error
}

// QP is a reliable-connected queue pair.
type QP interface {
	// QPN is the queue pair number.
	QPN() uint32
	// State is the current state.
	State() QPState
	// Query returns the current attributes.
	Query() QPAttr
	// Modify applies the attributes selected by mask; with AttrState in
	// mask it moves the QP to attr.State (see CheckTransition).
	Modify(attr *QPAttr, mask QPAttrMask) error
	// PostSend queues send work requests in order. It returns
	// ErrQueueFull, leaving the rest unposted, when the send queue is full,
	// and ErrInvalidState before RTS. In ERR the requests complete at once
	// with WCWRFlushErr. It does not allocate.
	PostSend(wrs []SendWR) (posted int, err error)
	// PostRecv queues receive work requests, as PostSend.
	PostRecv(wrs []RecvWR) (posted int, err error)
	// Close destroys the QP; outstanding requests are not completed.
	// It is idempotent.
	Close() error
}

// Counters are device statistics, named after rxe's hw_counters.
type Counters struct {
	SentPackets      uint64 // packets handed to the link
	RecvPackets      uint64 // packets received from the link
	Retransmits      uint64 // request packets sent again (go-back-N or selective)
	Timeouts         uint64 // local ACK timeouts
	SeqNAKsSent      uint64 // PSN sequence NAKs sent (out_of_seq_request)
	SeqNAKsRecv      uint64 // PSN sequence NAKs received (rcvd_seq_err)
	RNRNAKsSent      uint64 // RNR NAKs sent (send_rnr_err)
	RNRNAKsRecv      uint64 // RNR NAKs received (rcvd_rnr_err)
	ICRCErrors       uint64 // packets dropped for a bad ICRC
	ICRCUnverified   uint64 // packets accepted whose ICRC the link could not check
	Duplicates       uint64 // duplicate requests answered (duplicate_request)
	AccessErrors     uint64 // remote access NAKs sent
	Malformed        uint64 // packets that did not parse
	UnknownQP        uint64 // packets for no QP, or for a QP not ready
	WrongPeer        uint64 // packets from an address other than the QP's peer
	RetryExceeded    uint64 // retry_exceeded_err
	RNRRetryExceeded uint64 // retry_rnr_exceeded_err
	CQOverruns       uint64 // completions lost to a full CQ
	SendErrors       uint64 // packets the link failed to send (EMSGSIZE, ENETUNREACH, …)
	OutOfOrder       uint64 // request packets placed ahead of a gap (selective repeat)
	// UnexpectedResponses counts responses dropped unread: their PSN lies
	// outside the outstanding range (oldest unacknowledged PSN through the
	// highest PSN sent), or no outstanding request of their kind has it.
	UnexpectedResponses uint64
	// OutOfSequence counts request packets ahead of the expected PSN that
	// were dropped unplaced (all of them with go-back-N; with selective
	// repeat those past its window, and those it cannot place early).
	OutOfSequence uint64
	// CongestionEvents counts the congestion controller's reductions of
	// the send window (rsock peers with congestion control): losses at a
	// standing queue, a queue over the target delay, timeouts.
	CongestionEvents uint64
	// ECNCapableRecv counts request packets that arrived ECN-capable
	// (ECT or CE), whatever the queue pair negotiated; ECNCERecv those
	// of them that arrived CE-marked (a queue on the path was over its
	// threshold). ECNEchoesSent and ECNEchoesRecv count the ECN echoes
	// that report CE marks to the requester (rsock peers with ECN), and
	// ECNMarksEchoed the CE marks those received reported.
	ECNCapableRecv uint64
	ECNCERecv      uint64
	ECNEchoesSent  uint64
	ECNEchoesRecv  uint64
	ECNMarksEchoed uint64
	// DupEchoesSent and DupEchoesRecv count the duplicate echoes that
	// report duplicate requests to the requester (rsock peers with
	// congestion control), rsock's DSACK; CongestionUndos counts the
	// window reductions the congestion controller undid because every
	// resend behind them proved spurious.
	DupEchoesSent   uint64
	DupEchoesRecv   uint64
	CongestionUndos uint64
	// HoldEchoesSent and HoldEchoesRecv count the hold echoes that tell
	// the requester how long the responder held requests before it
	// acknowledged them (rsock peers with congestion control).
	HoldEchoesSent uint64
	HoldEchoesRecv uint64
	// SpuriousTimeouts counts local ACK timeouts (selective repeat, with
	// duplicate echoes) whose first resend the peer reported receiving
	// twice: the acknowledgement was late, not lost. Each raises the
	// queue pair's retransmission-timeout floor for a while.
	SpuriousTimeouts uint64
}

// Add adds o's counts to c.
func (c *Counters) Add(o Counters) {
	c.SentPackets += o.SentPackets
	c.RecvPackets += o.RecvPackets
	c.Retransmits += o.Retransmits
	c.Timeouts += o.Timeouts
	c.SeqNAKsSent += o.SeqNAKsSent
	c.SeqNAKsRecv += o.SeqNAKsRecv
	c.RNRNAKsSent += o.RNRNAKsSent
	c.RNRNAKsRecv += o.RNRNAKsRecv
	c.ICRCErrors += o.ICRCErrors
	c.ICRCUnverified += o.ICRCUnverified
	c.Duplicates += o.Duplicates
	c.AccessErrors += o.AccessErrors
	c.Malformed += o.Malformed
	c.UnknownQP += o.UnknownQP
	c.WrongPeer += o.WrongPeer
	c.RetryExceeded += o.RetryExceeded
	c.RNRRetryExceeded += o.RNRRetryExceeded
	c.CQOverruns += o.CQOverruns
	c.SendErrors += o.SendErrors
	c.OutOfOrder += o.OutOfOrder
	c.UnexpectedResponses += o.UnexpectedResponses
	c.OutOfSequence += o.OutOfSequence
	c.CongestionEvents += o.CongestionEvents
	c.ECNCapableRecv += o.ECNCapableRecv
	c.ECNCERecv += o.ECNCERecv
	c.ECNEchoesSent += o.ECNEchoesSent
	c.ECNEchoesRecv += o.ECNEchoesRecv
	c.ECNMarksEchoed += o.ECNMarksEchoed
	c.DupEchoesSent += o.DupEchoesSent
	c.DupEchoesRecv += o.DupEchoesRecv
	c.CongestionUndos += o.CongestionUndos
	c.SpuriousTimeouts += o.SpuriousTimeouts
	c.HoldEchoesSent += o.HoldEchoesSent
	c.HoldEchoesRecv += o.HoldEchoesRecv
}

// SelectiveRepeater is implemented by QPs that can recover losses
// selectively instead of with the IBTA's go-back-N: the responder places
// packets that arrive past a gap and says which PSNs it holds, and the
// requester resends only what is missing. Both ends must enable it, before
// the QP reaches RTS; it is not part of RoCEv2, so peers negotiate it.
type SelectiveRepeater interface {
	SetSelectiveRepeat(on bool) error
}

// CongestionController is implemented by QPs that can run a congestion
// controller with pacing on top of selective repeat, one that backs off
// at a queue that builds rather than at every loss. Both ends must enable
// it (its loss and delay signals need a peer that answers as rsock's
// does), before the QP reaches RTS; peers negotiate it.
type CongestionController interface {
	SetCongestionControl(on bool) error
}

// ECNReactor is implemented by QPs that can use ECN on top of congestion
// control: send their requests ECN-capable, echo the CE marks on what
// they receive to the peer, and reduce their window on the marks the
// peer echoes. Both ends must enable it, before the QP reaches RTS;
// peers negotiate it.
type ECNReactor interface {
	SetECN(on bool) error
}

// PathRTTHinter is implemented by QPs whose congestion controller can be
// told the least round trip measured on the same path by other means (the
// TCP connection of the handshake): a floor under the least round trip it
// samples itself, so that a queue another flow already holds when the QP
// starts sending counts as a queue rather than as the path. It may be
// called before the QP reaches RTS.
type PathRTTHinter interface {
	SetPathRTT(d time.Duration) error
}

// PacketMTUSetter is implemented by QPs that can carry a payload per
// packet the IBTA's path MTUs (powers of two) do not name, such as 1408
// bytes on an Ethernet path where the path MTU is 1024. Both peers must
// set the same size; rsock negotiates it. It may be called before the QP
// reaches RTS.
type PacketMTUSetter interface {
	SetPacketMTU(bytes int) error
}

// DuplicateEchoer is implemented by QPs that can echo, on top of
// congestion control, the count of duplicate requests they receive, and
// learn from the peer's echoes which of their resends were spurious
// (rsock's DSACK): the path reordered, and a window reduced for the
// resends is restored. Both ends must enable it, before the QP reaches
// RTS; peers negotiate it.
type DuplicateEchoer interface {
	SetDuplicateEcho(on bool) error
}

// HoldEchoer is implemented by QPs that can echo, on top of congestion
// control, how long the responder held requests before it acknowledged
// them, and tell the controller the holds of both hosts. Both ends must enable it, before the QP reaches RTS;
// peers negotiate it.
type HoldEchoer interface {
	SetHoldEcho(on bool) error
}

// WideSACKer is implemented by QPs whose selective repeat can track and
// report more PSNs past a gap than the 1024 of a 128-byte SACK bitmap,
// and so keep more packets in flight: up to a bitmap of what a selective
// NAK of the path MTU carries. Both ends must enable it, with selective
// repeat, before the QP reaches RTS; peers negotiate it.
type WideSACKer interface {
	SetWideSACK(on bool) error
}

// SendWindowLimiter is implemented by QPs whose send window can be bounded
// by their user: one that can never have more than packets in flight (a
// receive ring's credit) says so before the QP reaches RTS, so that the
// window, and a congestion window, never grow past what can be used.
type SendWindowLimiter interface {
	SetSendWindowLimit(packets int) error
}

// Causer is implemented by QPs that can say why they moved to the error
// state when the completion status alone does not (for example the link
// error behind a local length error). Cause returns nil otherwise.
type Causer interface {
	Cause() error
}
