package softroce

import (
	"fmt"

	"github.com/rsock-go/rsock/verbs"
	"github.com/rsock-go/rsock/verbs/softroce/wire"
)

// The size of a selective-repeat QP's window, and the wide SACK that
// lets it exceed 512 packets between rsock peers that negotiated it.
//
// A responder indexes the PSNs it placed past a gap by PSN modulo the
// bitmap's size, so a set bit is unambiguous only while the requester
// sends less than that far past the first missing PSN. The requester
// keeps the span of PSNs in flight, arrived past a gap or not, below its
// scoreboard's size, which is at most the bitmap's (windowFull), so that
// every PSN in flight lies inside the responder's bitmap. Its window
// (the packets in flight not known to have arrived) is half the bitmap,
// as it has been with the 1024-PSN bitmap of MaxSACKBytes: the other half
// holds what arrived past a gap while the gap is repaired, so that a
// loss does not stall the window at once. Wide SACK (SetWideSACK) grows the
// bitmap to what a selective NAK's payload of the path MTU holds, up to
// MaxWideSACKBytes: 4096 PSNs and a window of 2048 packets at a path MTU
// of 1024 or more, 2048 PSNs at 512, and the narrow 1024 at 256.
//
// The window is then bounded by the device's MaxInflight when it was set,
// and by SetSendWindowLimit: a user of the QP that knows it can never
// have more than so many packets in flight (rsock's stream, whose ring
// credit bounds its bytes in flight) says so, so that the window and the
// congestion controller's never grow past what can be used.

// goBackNWindow is the send window of a go-back-N QP whose device's
// MaxInflight is not set.
const goBackNWindow = 512

// maxInflightLimit bounds MaxInflight and SetSendWindowLimit.
const maxInflightLimit = 1 << 20

// SetWideSACK turns wide SACK on or off for a selective-repeat QP: its
// responder tracks, and its selective NAKs carry, up to MaxWideSACKBytes
// of bitmap (bounded by the path MTU), and its requester reads as much
// and sends up to half as many packets past the first missing one. Both
// ends must agree (rsock negotiates it in its handshake); without it the
// QP sends and reads the 128-byte bitmap older peers know. It may be
// called in RESET, INIT or RTR.
func (q *QP) SetWideSACK(on bool) error {
	return q.setOption(&q.wide, on)
}

// SetSendWindowLimit bounds a selective-repeat QP's send window to
// packets (0: no bound beyond the QP's own), for a user that can never
// have more in flight; a go-back-N QP keeps the device's MaxInflight, as
// it always has. It may be called in RESET, INIT or RTR.
func (q *QP) SetSendWindowLimit(packets int) error {
	if packets < 0 || packets > maxInflightLimit {
		return fmt.Errorf("softroce: send window limit %d: %w", packets, verbs.ErrInvalidArgument)
	}
	return setBeforeRTS(q, &q.windowLimit, packets)
}

// sackBytesFor is the largest SACK bitmap a QP of path MTU mtu (bytes)
// sends and reads: MaxSACKBytes without wide SACK; with it, the largest
// power of two that fits a payload of mtu bytes after the SACK header,
// between MaxSACKBytes and MaxWideSACKBytes.
func sackBytesFor(mtu int, wide bool) int {
	n := wire.MaxSACKBytes
	if !wide {
		return n
	}
	for 2*n <= wire.MaxWideSACKBytes && wire.SACKHeaderLen+2*n <= mtu {
		n *= 2
	}
	return n
}

// windowFor is the largest send window of a QP. Go-back-N (sackBytes 0)
// keeps the device's MaxInflight, goBackNWindow when it is not set, as it
// always has. Selective repeat takes half the PSNs of a bitmap of
// sackBytes, bounded by the device's MaxInflight and the user's limit
// when each is set (non-zero).
func windowFor(sackBytes, devMax, limit int) int {
	if sackBytes == 0 {
		if devMax > 0 {
			return devMax
		}
		return goBackNWindow
	}
	w := 8 * sackBytes / 2
	if devMax > 0 {
		w = min(w, devMax)
	}
	if limit > 0 {
		w = min(w, limit)
	}
	return w
}

// sackBytes is the QP's SACK bitmap size for its path MTU.
func (q *QP) sackBytes() int { return sackBytesFor(int(q.mtu), q.wide) }

// scoreboardSize is how many PSNs the requester's scoreboard covers for a
// window of win packets and a bitmap of sackBytes: twice the window,
// rounded up to a power of two, but no more than the bitmap describes.
// The window counts the packets in flight that are not known to have
// arrived; the PSNs in flight, those that arrived past a gap included,
// stay fewer than the scoreboard's size (windowFull), so within what
// the responder's bitmap tells apart.
func scoreboardSize(win, sackBytes int) int {
	n := 64
	for n < 2*win && n < 8*sackBytes {
		n *= 2
	}
	return n
}
