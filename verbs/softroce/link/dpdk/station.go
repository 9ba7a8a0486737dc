package dpdk

import (
	"net/netip"
	"time"

	"github.com/rsock-go/rsock/verbs/softroce/link/internal/ethframe"
	"github.com/rsock-go/rsock/verbs/softroce/wire"
)

// station is what the link answers to on the wire: its MAC and IP.
type station struct {
	mac wire.MAC
	ip  netip.Addr
}

// frameKind is what a received frame is to the link.
type frameKind uint8

const (
	// frameOther: not for us, or not RoCEv2 or ARP; dropped.
	frameOther frameKind = iota
	// frameRoCE: a RoCEv2 packet to our IP and port 4791.
	frameRoCE
	// frameARP: an ARP packet (for IPv4 over Ethernet).
	frameARP
	// frameND: an IPv6 neighbour solicitation or advertisement for us.
	frameND
)

// arpFrameLen is the length of the ARP frames sent: Ethernet and ARP,
// padded to Ethernet's minimum of 60 bytes (without FCS).
const arpFrameLen = 60

// classify says what frame f is; for a RoCEv2 packet it also returns the
// decoded frame. Frames to another unicast MAC are not for us (a port in
// promiscuous mode, or af_packet, sees the host's traffic too).
func (st *station) classify(f []byte) (frameKind, ethframe.Frame) {
	if len(f) < wire.EthernetLen {
		return frameOther, ethframe.Frame{}
	}
	e := wire.Ethernet(f)
	dst := e.Dst()
	switch e.EtherType() {
	case wire.EtherTypeARP:
		if (dst == st.mac || dst == wire.BroadcastMAC) && wire.ARP(f[wire.EthernetLen:]).IsValid() {
			return frameARP, ethframe.Frame{}
		}
		return frameOther, ethframe.Frame{}
	case wire.EtherTypeIPv6:
		if st.isND(f, dst) {
			return frameND, ethframe.Frame{}
		}
	}
	if dst != st.mac {
		return frameOther, ethframe.Frame{}
	}
	fr, ok := ethframe.Decode(f)
	if !ok || fr.Dst != st.ip {
		return frameOther, ethframe.Frame{}
	}
	return frameRoCE, fr
}

// arpInput handles an ARP frame f (classified frameARP) at now. A reply
// to us is taken into t if it answers a request of ours (learned is then
// true); anything else (requests, gratuitous ARP) only confirms or
// questions an entry already known (neighTable.refresh). For a request
// for our address it writes the reply frame into reply (at least
// arpFrameLen bytes) and returns its length, else 0. Frames beyond t's
// rate limits are dropped unread, replies beyond them not sent.
func (st *station) arpInput(f []byte, t *neighTable, now time.Time, reply []byte) (n int, learned bool) {
	a := wire.ARP(f[wire.EthernetLen:])
	sip, smac := a.SenderIP(), a.SenderMAC()
	forUs := st.ip.Is4() && a.TargetIP() == st.ip
	if sip.IsUnspecified() || sip == st.ip || smac == st.mac || smac == wire.BroadcastMAC || smac[0]&1 != 0 {
		return 0, false // a probe, our own, or a bogus sender
	}
	if !t.take.allow(now) {
		return 0, false
	}
	if a.Op() == wire.ARPReply && forUs && a.TargetMAC() == st.mac {
		learned = t.answer(sip, smac, now)
	} else {
		t.refresh(sip, smac, now)
	}
	if !forUs || a.Op() != wire.ARPRequest || !t.replies.allow(now) {
		return 0, learned
	}
	return st.arpFrame(reply, wire.ARPReply, smac, sip), learned
}

// arpFrame writes an ARP frame of operation op to (targetMAC, targetIP)
// into b and returns its length; a request goes to the broadcast address.
func (st *station) arpFrame(b []byte, op uint16, targetMAC wire.MAC, targetIP netip.Addr) int {
	b = b[:arpFrameLen]
	clear(b)
	dst := targetMAC
	if op == wire.ARPRequest {
		dst, targetMAC = wire.BroadcastMAC, wire.MAC{}
	}
	wire.Ethernet(b).Encode(dst, st.mac, wire.EtherTypeARP)
	wire.ARP(b[wire.EthernetLen:]).Encode(op, st.mac, st.ip, targetMAC, targetIP)
	return arpFrameLen
}
