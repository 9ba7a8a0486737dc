// Package rcpingpong is a soft-RoCE peer that is wire- and CLI-compatible
// with rdma-core's ibv_rc_pingpong: the same TCP exchange of queue pair
// addresses, then a ping-pong of SEND messages into posted receives over
// one RC queue pair.
//
// The TCP exchange, as ibv_rc_pingpong does it: the client connects to
// port 18515 and writes its address as a 52-byte message (MsgLen), the
// text "LLLL:QQQQQQ:PPPPPP:GGGGGGGGGGGGGGGGGGGGGGGGGGGGGGGG" (LID, QPN and
// PSN in hex of 4, 6 and 6 digits, the GID as 32 hex digits of its 16
// bytes in order) and a terminating NUL. The server reads it, connects its
// queue pair, writes its own message; the client reads it and writes
// "done" and a NUL (5 bytes), which the server reads. Then the client
// sends the first message.
package rcpingpong

import (
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"

	"github.com/rsock-go/rsock/verbs"
)

// MsgLen is the size of the address message, terminating NUL included.
const MsgLen = len("0000:000000:000000:00000000000000000000000000000000") + 1

// doneMsg ends the exchange: "done" and its NUL.
const doneMsg = "done\x00"

// Dest is one side's queue pair address as exchanged.
type Dest struct {
	LID uint16
	QPN uint32 // 24 bits
	PSN uint32 // 24 bits
	GID verbs.GID
}

// ErrMsg reports an address message that does not parse.
var ErrMsg = errors.New("rcpingpong: bad address message")

// Marshal returns d as the 52-byte wire message.
func (d Dest) Marshal() [MsgLen]byte {
	var b [MsgLen]byte
	s := fmt.Sprintf("%04x:%06x:%06x:%s", d.LID, d.QPN&0xffffff, d.PSN&0xffffff, hex.EncodeToString(d.GID[:]))
	copy(b[:], s)
	return b
}

// String formats d like ibv_rc_pingpong's address lines.
func (d Dest) String() string {
	return fmt.Sprintf("LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s", d.LID, d.QPN, d.PSN, netip.AddrFrom16(d.GID))
}

// ParseDest parses a wire message. It must be exactly MsgLen bytes: the
// four fields with their colons, lowercase or uppercase hex digits, and a
// NUL at the end.
func ParseDest(b []byte) (Dest, error) {
	var d Dest
	if len(b) != MsgLen {
		return d, fmt.Errorf("%w: %d bytes, want %d", ErrMsg, len(b), MsgLen)
	}
	if b[MsgLen-1] != 0 {
		return d, fmt.Errorf("%w: no terminating NUL", ErrMsg)
	}
	if b[4] != ':' || b[11] != ':' || b[18] != ':' {
		return d, fmt.Errorf("%w: fields not separated by ':'", ErrMsg)
	}
	lid, ok1 := hexField(b[0:4])
	qpn, ok2 := hexField(b[5:11])
	psn, ok3 := hexField(b[12:18])
	if !ok1 || !ok2 || !ok3 {
		return d, fmt.Errorf("%w: LID, QPN or PSN not hex", ErrMsg)
	}
	if _, err := hex.Decode(d.GID[:], b[19:51]); err != nil {
		return d, fmt.Errorf("%w: GID not hex", ErrMsg)
	}
	d.LID, d.QPN, d.PSN = uint16(lid), qpn, psn
	return d, nil
}

// hexField parses a fixed-width hex number.
func hexField(b []byte) (uint32, bool) {
	var v uint32
	for _, c := range b {
		switch {
		case c >= '0' && c <= '9':
			v = v<<4 | uint32(c-'0')
		case c >= 'a' && c <= 'f':
			v = v<<4 | uint32(c-'a'+10)
		case c >= 'A' && c <= 'F':
			v = v<<4 | uint32(c-'A'+10)
		default:
			return 0, false
		}
	}
	return v, true
}
