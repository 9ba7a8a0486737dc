//go:build linux

// The ICRC check on receive, with the search over the IPv4 IDs a GSO
// sender's segments carry, and over all IPv4 IDs.

package udp

import (
	"net/netip"

	"github.com/rsock-go/rsock/verbs/softroce/link"
	"github.com/rsock-go/rsock/verbs/softroce/wire"
)

// checkICRC checks the ICRC got of packet pkt from src. It tries IPv4 ID
// hint (the packet's index in a coalesced message), then ID 0, then IDs 1
// to maxSegs-1 (a GSO sender's segments received one by one): a match is
// link.ICRCGood. Over IPv6 every covered field is known, so anything else
// is link.ICRCBad. Over IPv4 it then asks whether any of the 65,536 IDs,
// with don't-fragment set or not, makes the ICRC match (peers such as rxe
// number their datagrams): if one does, the packet is
// link.ICRCUnverified (link.ICRCBad with StrictICRC), its ICRC checked in
// all but the 17 bits the unknown ID and DF take; if none does, the
// packet was damaged or forged carelessly, and is link.ICRCBad.
func (l *Link) checkICRC(s *rxScratch, src netip.AddrPort, pkt []byte, got uint32, hint int) link.ICRCStatus {
	ph := wire.PseudoHeader{Src: src, Dst: l.local}
	if l.is4 && hint != 0 {
		ph.IPID = uint16(hint)
		if wire.ComputeICRC(&ph, pkt) == got {
			return link.ICRCGood
		}
		ph.IPID = 0
	}
	diff := wire.ComputeICRC(&ph, pkt) ^ got
	if diff == 0 {
		return link.ICRCGood
	}
	if !l.is4 {
		return link.ICRCBad
	}
	t := s.ids.table(len(pkt))
	switch {
	case gsoID(t, diff):
		return link.ICRCGood
	case !t.AnyID(diff):
		return link.ICRCBad
	case l.strict:
		return link.ICRCBad
	}
	return link.ICRCUnverified
}

// idCacheSize is how many packet lengths an idCache holds: a stream's
// full-sized packets, its ACKs and a few short tails.
const idCacheSize = 4

// idCache holds the wire.ICRCIDTables of the packet lengths seen last.
type idCache struct {
	t    [idCacheSize]wire.ICRCIDTable
	next int // the entry replaced next
}

// table returns the wire.ICRCIDTable for packets of n bytes, computing it if
// needed in place of the oldest one. It does not allocate.
func (c *idCache) table(n int) *wire.ICRCIDTable {
	for i := range c.t {
		if c.t[i].Len() == n {
			return &c.t[i]
		}
	}
	t := &c.t[c.next]
	c.next = (c.next + 1) % len(c.t)
	t.Fill(n)
	return t
}

// gsoID reports whether diff is the difference an ID in 1 to maxSegs-1
// makes.
func gsoID(t *wire.ICRCIDTable, diff uint32) bool {
	id, ok := t.ID(diff)
	return ok && id != 0 && int(id) < maxSegs
}

// maxSegs IDs fit in a wire.ICRCIDTable.
var _ [wire.ICRCIDSpan - maxSegs]struct{}
