package softroce

import (
	"fmt"
	"syscall"

	"github.com/rsock-go/rsock/verbs"
	"github.com/rsock-go/rsock/verbs/softroce/link"
	"github.com/rsock-go/rsock/verbs/softroce/wire"
)

// Bytes a RoCEv2 packet adds to its payload on an IP path: the IP header
// (20 or 40), UDP (8), the largest headers of a packet with payload (BTH,
// RETH and ImmDt of a WRITE ONLY with immediate) and the ICRC.
const (
	roceOverhead4 = 20 + 8 + wire.BTHLen + wire.RETHLen + wire.ImmDtLen + wire.ICRCLen
	roceOverhead6 = 40 + 8 + wire.BTHLen + wire.RETHLen + wire.ImmDtLen + wire.ICRCLen
)

// MTUForIP returns the largest RoCE path MTU (256 to 4096 bytes of
// payload) whose packets fit an IP MTU of ipMTU bytes, as rxe derives a
// device's active MTU from its netdev: 1024 for Ethernet's 1500, 4096 for
// jumbo frames. It fails when not even 256 bytes fit.
func MTUForIP(ipMTU int, ipv6 bool) (verbs.MTU, error) {
	room := ipMTU - roceOverhead4
	if ipv6 {
		room = ipMTU - roceOverhead6
	}
	for m := verbs.MTU4096; m >= verbs.MTU256; m-- {
		if m.Bytes() <= room {
			return m, nil
		}
	}
	return 0, fmt.Errorf("softroce: an IP MTU of %d bytes cannot carry RoCEv2 packets of 256 bytes", ipMTU)
}

// pathMTUCause explains a QP whose retries ran out while the host knows,
// from ICMP perhaps, that the path to the peer carries less than the QP's
// packets: an error that names that path MTU and wraps EMSGSIZE, or nil.
// The link sends up to the interface's MTU whatever ICMP says (so that a
// forged ICMP resets nothing), and the QP does not re-segment packets in
// flight: a real drop of the path MTU below them loses every full-sized
// packet until the retries run out, and then this says why.
func (q *QP) pathMTUCause() error {
	h, ok := q.dev.link.(link.PathMTUHinter)
	if !ok || !q.peer.IsValid() || q.mtu == 0 {
		return nil
	}
	dst := q.peer.Addr().Unmap()
	ipMTU, ok := h.PathMTUHint(dst)
	if !ok {
		return nil
	}
	if n, err := PacketMTUForIP(ipMTU, !dst.Is4()); err == nil && n >= int(q.mtu) {
		return nil
	}
	return fmt.Errorf("softroce: no acknowledgement after %d retries; the path MTU to %v is %d bytes (learned from ICMP), too small for the QP's packets of %d-byte MTU: %w",
		q.attr.RetryCnt, dst, ipMTU, q.mtu, syscall.EMSGSIZE)
}
