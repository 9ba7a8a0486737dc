package services

import (
	"encoding/binary"
	"fmt"
)

// payloadHeader is the stamp at the start of a payload: the caller and
// the call's sequence number.
const payloadHeader = 12

// MinSize is the smallest payload: its stamp.
const MinSize = payloadHeader

// MaxSize is the largest payload (a sanity bound for a benchmark of small
// requests; the services carry more).
const MaxSize = 1 << 20

// fillPayload writes the payload of caller's call seq into b: the caller
// and seq, then bytes that depend on both.
func fillPayload(b []byte, caller int, seq uint64) {
	binary.BigEndian.PutUint32(b, uint32(caller))
	binary.BigEndian.PutUint64(b[4:], seq)
	x := byte(seq) ^ byte(caller)*31
	for i := payloadHeader; i < len(b); i++ {
		b[i] = x + byte(i)
	}
}

// checkPayload reports how got differs from the payload of caller's call
// seq of len(want) bytes; want is scratch space of the payload's size.
func checkPayload(got, want []byte, caller int, seq uint64) error {
	if len(got) != len(want) {
		return fmt.Errorf("reply of %d bytes to caller %d's call %d, want %d", len(got), caller, seq, len(want))
	}
	fillPayload(want, caller, seq)
	for i := range got {
		if got[i] != want[i] {
			gc, gs := binary.BigEndian.Uint32(got), binary.BigEndian.Uint64(got[4:])
			return fmt.Errorf("wrong reply to caller %d's call %d: byte %d is %#x, want %#x (the reply is stamped caller %d, call %d)",
				caller, seq, i, got[i], want[i], gc, gs)
		}
	}
	return nil
}
