package softroce

import (
	"fmt"

	"github.com/rsock-go/rsock/verbs"
)

var _ verbs.PacketMTUSetter = (*QP)(nil)

// packetMTUAlign divides a packet MTU: whole 64-byte lines per packet, and
// never a pad byte.
const packetMTUAlign = 64

// PacketMTUForIP returns the most payload bytes, a multiple of 64 up to
// 4096, that one RoCEv2 packet carries on a path of ipMTU bytes: 1408 on
// Ethernet's 1500 (IPv4 and IPv6), where the IBTA's largest path MTU that
// fits is 1024. It fails when not even 256 bytes fit.
func PacketMTUForIP(ipMTU int, ipv6 bool) (int, error) {
	room := ipMTU - roceOverhead4
	if ipv6 {
		room = ipMTU - roceOverhead6
	}
	n := min(room/packetMTUAlign*packetMTUAlign, 4096)
	if n < 256 {
		return 0, fmt.Errorf("softroce: an IP MTU of %d bytes cannot carry RoCEv2 packets of 256 bytes", ipMTU)
	}
	return n, nil
}

// SetPacketMTU makes the QP send and expect n bytes of payload per packet
// (a multiple of 64 in 256..4096) instead of its path MTU's, when n is
// larger: an extension both peers must agree on (rsock negotiates it), since
// a responder checks that every packet but a message's last carries
// exactly that much. It may be called before the QP reaches RTS; 0 turns
// it off.
func (q *QP) SetPacketMTU(n int) error {
	if n != 0 && (n < 256 || n > 4096 || n%packetMTUAlign != 0) {
		return fmt.Errorf("softroce: packet MTU %d, want a multiple of %d in 256..4096: %w", n, packetMTUAlign, verbs.ErrInvalidArgument)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	switch q.attr.State {
	case verbs.QPSReset, verbs.QPSInit:
	case verbs.QPSRTR:
		// The path MTU is set: the responder expects n from now on.
		q.packetMTU = uint32(n)
		q.mtu = q.mtuFor(q.attr.PathMTU)
		return nil
	default:
		return verbs.ErrInvalidState
	}
	q.packetMTU = uint32(n)
	return nil
}

// mtuFor is the payload per packet with path MTU m: m's bytes, or the
// packet MTU when that is set and larger.
func (q *QP) mtuFor(m verbs.MTU) uint32 {
	return max(uint32(m.Bytes()), q.packetMTU)
}
