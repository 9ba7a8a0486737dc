//go:build linux

package memif

import "encoding/binary"

// Disconnect is a view of a DISCONNECT body, which either side may send at
// any time before closing the control socket:
//
//	bytes 0-3   error code
//	bytes 4-99  reason (NUL-padded)
//
// Methods require len(d) >= DisconnectLen.
type Disconnect []byte

// DisconnectLen is the length of a DISCONNECT body.
const DisconnectLen = 4 + ReasonLen

// Code returns the error code.
func (d Disconnect) Code() uint32 { return binary.LittleEndian.Uint32(d[0:]) }

// Reason returns the reason string.
func (d Disconnect) Reason() string { return cString(d[4 : 4+ReasonLen]) }

// Encode writes both fields; the reason is truncated to ReasonLen-1 bytes.
func (d Disconnect) Encode(code uint32, reason string) {
	_ = d[DisconnectLen-1]
	binary.LittleEndian.PutUint32(d[0:], code)
	putCString(d[4:4+ReasonLen], reason)
}
