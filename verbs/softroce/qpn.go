package softroce

import (
	"crypto/rand"
	"encoding/binary"

	"github.com/rsock-go/rsock/verbs/softroce/wire"
)

// QP numbers are drawn at random from the 24-bit space, so that a packet
// forged by someone who cannot see the traffic must guess one: with
// numbers handed out in sequence, the first QPs of every device were the
// same few numbers.

const (
	// minQPN is the lowest QPN handed out: QP0 and QP1 are the special
	// QPs of the IBA, and the numbers up to 0x10 stay reserved, as in the
	// Linux drivers.
	minQPN = 0x11
	// maxQPN is the highest QPN handed out: 0xFFFFFF is the multicast QPN.
	maxQPN = wire.PSNMask - 1
	// qpnDraws is how many random draws pickQPN tries before it scans.
	qpnDraws = 64
)

// pickQPN returns a QPN in [minQPN, maxQPN] for which taken reports false,
// drawing candidates from draw (any 32 random bits); it reports false if
// every QPN is taken. After qpnDraws collisions it scans upward from the
// last draw, so that a nearly full space still ends.
func pickQPN(draw func() uint32, taken func(uint32) bool) (uint32, bool) {
	const span = maxQPN - minQPN + 1
	var n uint32
	for range qpnDraws {
		n = minQPN + draw()%span
		if !taken(n) {
			return n, true
		}
	}
	for range span {
		n = minQPN + (n-minQPN+1)%span
		if !taken(n) {
			return n, true
		}
	}
	return 0, false
}

// randomUint32 returns 32 bits from crypto/rand.
func randomUint32() uint32 {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("softroce: crypto/rand failed: " + err.Error())
	}
	return binary.LittleEndian.Uint32(b[:])
}
