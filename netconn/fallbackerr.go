package netconn

import (
	"errors"
	"strings"
)

// Fallback kinds: why a conn that could have run on RDMA runs on TCP, as
// a small fixed set for counting, for metric labels and for the Decline
// a listener sends (which carries the kind and never local error text).
const (
	FallbackPlainServer = "plain_server"  // the server is not an rsock listener (now, or remembered)
	FallbackDeclined    = "declined"      // the listener declined RDMA, for a reason it did not name
	FallbackBusy        = "busy"          // the listener had too many handshakes in progress
	FallbackRDMAOff     = "rdma_off"      // RDMA is turned off (provider tcp) on the listener
	FallbackDialer      = "dialer_failed" // the dialer could not connect its queue pair
	FallbackSetup       = "setup"         // no device, no route for RoCEv2, an incompatible link, a failed queue pair
	// FallbackNoFastPath: auto found no link faster than TCP on this path
	// (between hosts without an RDMA device at both ends, or on one host
	// when the same-host link cannot be set up).
	FallbackNoFastPath = "no_fast_path"
	// FallbackPeerAddress: the RoCE address in the peer's Hello is not the
	// address the TCP connection reached.
	FallbackPeerAddress = "peer_address"
	// FallbackNotSameHost: a same-host link (memif) was offered by, or
	// required with, a peer on another host.
	FallbackNotSameHost = "not_same_host"
	// FallbackShmBinding: a proposal to reuse a same-host shm channel was
	// not bound to this TCP connection on the channel (see shmbind.go):
	// a Hello or Accept that names a channel it did not come over.
	FallbackShmBinding = "shm_binding"
)

// FallbackKinds lists the kinds of State.Fallbacks and of FallbackError.
var FallbackKinds = []string{FallbackPlainServer, FallbackDeclined, FallbackBusy, FallbackRDMAOff,
	FallbackDialer, FallbackSetup, FallbackNoFastPath, FallbackPeerAddress, FallbackNotSameHost, FallbackShmBinding}

// kindText is what a peer is told about a kind, in a Decline: fixed text
// that says nothing about this host.
var kindText = map[string]string{
	FallbackDeclined:    "declined",
	FallbackBusy:        "too many rsock handshakes in progress",
	FallbackRDMAOff:     "RDMA is turned off",
	FallbackDialer:      "the dialer could not connect its queue pair",
	FallbackSetup:       "RDMA could not be set up",
	FallbackNoFastPath:  "no link faster than TCP between the two",
	FallbackPeerAddress: "the RoCE address in the Hello is not the TCP peer's address",
	FallbackNotSameHost: "a same-host link needs both ends on one host",
	FallbackShmBinding:  "the shm channel named is not bound to this connection",
}

// Sides of a FallbackError: which end decided.
const (
	SideDialer   = "dialer"
	SideListener = "listener"
)

// FallbackError says why a connection that could have run on RDMA runs on
// TCP (or, on an RDMA conn, why a faster choice was passed over), in the
// manner of net.OpError: Kind is one of FallbackKinds, Side the end that
// decided (SideDialer or SideListener), and Err the cause. A conn's
// FallbackError returns it; FallbackReason is its text.
//
// Errors from the peer (a Decline) carry only its kind: a listener never
// tells a client its local error text.
type FallbackError struct {
	Kind string
	Side string
	Err  error
}

// Error describes the fallback: "declined by the listener: ..." when the
// peer decided, else the cause.
func (e *FallbackError) Error() string {
	if e == nil {
		return "<nil>"
	}
	msg := "<nil>"
	if e.Err != nil {
		msg = e.Err.Error()
	}
	return msg
}

// Unwrap returns the cause.
func (e *FallbackError) Unwrap() error { return e.Err }

// fallbackf makes a FallbackError of kind, decided by side, with msg as
// its cause.
func fallbackf(kind, side, msg string) *FallbackError {
	return &FallbackError{Kind: kind, Side: side, Err: errors.New(msg)}
}

// declineText is the Decline reason for a kind: "kind: fixed text".
func declineText(kind string) string {
	t, ok := kindText[kind]
	if !ok {
		kind, t = FallbackDeclined, kindText[FallbackDeclined]
	}
	return kind + ": " + t
}

// fromDecline reads the kind out of a Decline reason from the peer (side
// is the peer's side). A reason without a known kind (an older peer, a
// malformed Hello refused by package fallback) is FallbackDeclined.
func fromDecline(reason, side string) *FallbackError {
	kind, _, _ := strings.Cut(reason, ":")
	if _, ok := kindText[kind]; !ok || kind == FallbackDeclined {
		kind = FallbackDeclined
	}
	prefix := "declined by the listener: "
	if side == SideDialer {
		prefix = "the dialer could not connect: "
		if kind == FallbackDeclined {
			kind = FallbackDialer
		}
	}
	return &FallbackError{Kind: kind, Side: side, Err: errors.New(prefix + reason)}
}

// kindIndex is kind's index in FallbackKinds, that of FallbackSetup if it
// is none of them.
func kindIndex(kind string) int {
	for i, k := range FallbackKinds {
		if k == kind {
			return i
		}
	}
	return kindIndex(FallbackSetup)
}
