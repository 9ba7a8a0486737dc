package softroce

import (
	"fmt"

	"github.com/rsock-go/rsock/verbs"
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
