package dpdk

import (
	"net/netip"
	"time"

	"github.com/rsock-go/rsock/verbs/softroce/wire"
)

// IPv6 neighbour discovery (RFC 4861), the IPv6 counterpart of ARP: the
// link answers solicitations for its address, solicits the next hops it
// sends to, and keeps what it learns in the same neighbour table.

// ndFrameLen is the length of the neighbour discovery frames sent:
// Ethernet, IPv6, the ICMPv6 header, a solicitation's or advertisement's
// body and one link-layer address option.
const ndFrameLen = wire.EthernetLen + wire.IPv6Len + wire.ICMPv6MinLen + wire.NDPNeighborSolicitMinLen + wire.NDPLinkLayerOptionLen

// ndHopLimit is the hop limit of every neighbour discovery message: one
// with another did not come from the link (RFC 4861 7.1).
const ndHopLimit = 255

// allNodes is the link-local all-nodes multicast address.
var allNodes = netip.MustParseAddr("ff02::1")

// isND reports whether f, an IPv6 frame to Ethernet address dst, is a
// neighbour solicitation or advertisement the link should read: sent to
// our address, our solicited-node address or all nodes (at our MAC or
// the address's multicast MAC), and valid as RFC 4861 7.1 has it (hop
// limit 255, code 0, the checksum, the length, options of non-zero
// length, a target that is not multicast).
func (st *station) isND(f []byte, dst wire.MAC) bool {
	if !st.ip.Is6() {
		return false
	}
	ip := wire.IPv6(f[wire.EthernetLen:])
	if !ip.IsValid(len(ip)) || ip.NextHeader() != wire.IPProtoICMPv6 || ip.HopLimit() != ndHopLimit {
		return false
	}
	to := ip.Dst()
	switch {
	case to == st.ip && dst == st.mac:
	case to.IsMulticast() && dst == wire.IPv6MulticastMAC(to) && (to == wire.SolicitedNodeAddr(st.ip) || to == allNodes):
	default:
		return false
	}
	m := wire.ICMPv6(ip.Payload())
	if len(m) < wire.ICMPv6MinLen+wire.NDPNeighborSolicitMinLen || m.Code() != 0 ||
		(m.Type() != wire.ICMPv6NeighborSolicit && m.Type() != wire.ICMPv6NeighborAdvert) ||
		!m.ChecksumValid(ip.Src(), to) {
		return false
	}
	// A solicitation and an advertisement have the same layout: target
	// at 4, options at 20.
	ns := wire.NDPNeighborSolicit(m.Body())
	return !ns.TargetAddress().IsMulticast() && ns.Options().IsValid()
}

// ndInput handles a neighbour discovery frame f (classified frameND) at
// now, as arpInput does ARP: a solicited advertisement sent to our
// address is taken into t if it answers a solicitation of ours (learned
// is then true); a solicitation's sender and an unsolicited
// advertisement only confirm or question an entry already known. For a
// solicitation of our address it writes the advertisement that answers
// it into reply (at least ndFrameLen bytes) and returns its length, else
// 0, within t's rate limits.
func (st *station) ndInput(f []byte, t *neighTable, now time.Time, reply []byte) (n int, learned bool) {
	ip := wire.IPv6(f[wire.EthernetLen:])
	m := wire.ICMPv6(ip.Payload())
	src := ip.Src()
	usable := func(mac wire.MAC) bool { return mac != st.mac && mac[0]&1 == 0 }
	if !t.take.allow(now) {
		return 0, false
	}
	switch m.Type() {
	case wire.ICMPv6NeighborSolicit:
		ns := wire.NDPNeighborSolicit(m.Body())
		if src.IsUnspecified() || src == st.ip {
			return 0, false // duplicate address detection, or our own
		}
		forUs := ns.TargetAddress() == st.ip
		mac, ok := ns.Options().LinkLayerAddress(wire.NDPOptionSourceLinkLayer)
		if ok && usable(mac) {
			t.refresh(src, mac, now)
		}
		if !forUs {
			return 0, false
		}
		if !ok {
			mac = wire.Ethernet(f).Src() // a unicast solicitation may leave it out
		}
		if !usable(mac) || !t.replies.allow(now) {
			return 0, false
		}
		return st.ndFrame(reply, wire.ICMPv6NeighborAdvert, mac, src, st.ip), false
	case wire.ICMPv6NeighborAdvert:
		na := wire.NDPNeighborAdvert(m.Body())
		target := na.TargetAddress()
		mac, ok := na.Options().LinkLayerAddress(wire.NDPOptionTargetLinkLayer)
		if !ok || !usable(mac) || target == st.ip {
			return 0, false
		}
		if na.Flags()&wire.NDPAdvertSolicited != 0 && ip.Dst() == st.ip {
			return 0, t.answer(target, mac, now)
		}
		t.refresh(target, mac, now)
	}
	return 0, false
}

// ndSolicit writes a solicitation for target, to its solicited-node
// address, into b and returns its length.
func (st *station) ndSolicit(b []byte, target netip.Addr) int {
	to := wire.SolicitedNodeAddr(target)
	return st.ndFrame(b, wire.ICMPv6NeighborSolicit, wire.IPv6MulticastMAC(to), to, target)
}

// ndFrame writes a neighbour discovery frame of type typ (a solicitation
// or a solicited advertisement) about target, from us to (dstMAC, dst),
// with our MAC in its link-layer address option, into b and returns its
// length.
func (st *station) ndFrame(b []byte, typ uint8, dstMAC wire.MAC, dst, target netip.Addr) int {
	b = b[:ndFrameLen]
	clear(b)
	wire.Ethernet(b).Encode(dstMAC, st.mac, wire.EtherTypeIPv6)
	wire.IPv6(b[wire.EthernetLen:]).Encode(&wire.IPv6Fields{
		PayloadLen: ndFrameLen - wire.EthernetLen - wire.IPv6Len, NextHeader: wire.IPProtoICMPv6,
		HopLimit: ndHopLimit, Src: st.ip, Dst: dst,
	})
	m := wire.ICMPv6(b[wire.EthernetLen+wire.IPv6Len:])
	m.Encode(typ, 0)
	if typ == wire.ICMPv6NeighborSolicit {
		ns := wire.NDPNeighborSolicit(m.Body())
		ns.Encode(target)
		ns.Options().EncodeLinkLayer(wire.NDPOptionSourceLinkLayer, st.mac)
	} else {
		na := wire.NDPNeighborAdvert(m.Body())
		na.Encode(wire.NDPAdvertSolicited|wire.NDPAdvertOverride, target)
		na.Options().EncodeLinkLayer(wire.NDPOptionTargetLinkLayer, st.mac)
	}
	m.SetChecksum(st.ip, dst)
	return ndFrameLen
}
