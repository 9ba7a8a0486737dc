package perftest

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/rsock-go/rsock/verbs"
)

// DestLen is the size of perftest's address message with a GID, its
// terminating NUL included (perftest's KEY_MSG_SIZE_GID).
const DestLen = 108

// Dest is one side's queue pair and memory as perftest exchanges them.
type Dest struct {
	LID      uint16
	OutReads uint16 // READs this side accepts in flight as responder
	QPN      uint32 // 24 bits
	PSN      uint32 // 24 bits
	RKey     uint32
	VAddr    uint64 // where the peer may WRITE or READ
	GID      verbs.GID
	SRQN     uint32
}

// ErrDest reports an address message that does not parse.
var ErrDest = errors.New("perftest: bad address message")

// Marshal returns d as the 108-byte wire message: LID, out_reads, QPN,
// PSN, rkey and vaddr in hex of 4, 4, 6, 6, 8 and 16 digits, the 16 GID
// bytes as two hex digits each, the SRQ number in 8, every field followed
// by ':', then a NUL.
func (d Dest) Marshal() [DestLen]byte {
	var b strings.Builder
	fmt.Fprintf(&b, "%04x:%04x:%06x:%06x:%08x:%016x:", d.LID, d.OutReads, d.QPN&0xffffff, d.PSN&0xffffff, d.RKey, d.VAddr)
	for _, g := range d.GID {
		fmt.Fprintf(&b, "%02x:", g)
	}
	fmt.Fprintf(&b, "%08x:", d.SRQN)
	var out [DestLen]byte
	copy(out[:], b.String())
	return out
}

// destFields is the number of ':'-terminated fields of the message.
const destFields = 6 + 16 + 1

// ParseDest parses a wire message. It must be exactly DestLen bytes with
// a NUL at the end; fields are hex and end with ':', and each must fit
// its width (perftest's own parser is laxer, ours never reads past them).
func ParseDest(b []byte) (Dest, error) {
	var d Dest
	if len(b) != DestLen {
		return d, fmt.Errorf("%w: %d bytes, want %d", ErrDest, len(b), DestLen)
	}
	if b[DestLen-1] != 0 {
		return d, fmt.Errorf("%w: no terminating NUL", ErrDest)
	}
	text := string(b[:DestLen-1])
	if i := strings.IndexByte(text, 0); i >= 0 {
		text = text[:i]
	}
	f := strings.Split(text, ":")
	if len(f) != destFields+1 || f[destFields] != "" {
		return d, fmt.Errorf("%w: %d fields, want %d", ErrDest, len(f)-1, destFields)
	}
	bits := [destFields]int{16, 16, 24, 24, 32, 64}
	for i := 6; i < 6+16; i++ {
		bits[i] = 8
	}
	bits[destFields-1] = 32
	var v [destFields]uint64
	for i, s := range f[:destFields] {
		if s == "" || len(s) > 16 {
			return d, fmt.Errorf("%w: field %d is %q", ErrDest, i, s)
		}
		n, err := strconv.ParseUint(s, 16, 64)
		if err != nil || n>>bits[i] != 0 && bits[i] < 64 {
			return d, fmt.Errorf("%w: field %d is %q, want hex of %d bits", ErrDest, i, s, bits[i])
		}
		v[i] = n
	}
	d.LID, d.OutReads, d.QPN, d.PSN, d.RKey, d.VAddr = uint16(v[0]), uint16(v[1]), uint32(v[2]), uint32(v[3]), uint32(v[4]), v[5]
	for i := range d.GID {
		d.GID[i] = byte(v[6+i])
	}
	d.SRQN = uint32(v[destFields-1])
	return d, nil
}

// String formats d like perftest's address lines.
func (d Dest) String() string {
	return fmt.Sprintf("LID %#04x QPN %#06x PSN %#06x OUT %#04x RKey %#08x VAddr %#016x GID %v",
		d.LID, d.QPN, d.PSN, d.OutReads, d.RKey, d.VAddr, netip.AddrFrom16(d.GID))
}
