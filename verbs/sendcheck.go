package verbs

import "fmt"

// CheckSendWR validates a send request against what every RC provider
// allows, before the provider queues it: at most maxSGE SGEs, a message
// of at most 2 GiB, an atomic with exactly one 8-byte SGE, a known opcode,
// and SendInline only on SENDs and WRITEs. It returns the message length
// (the SGEs' sum); errors wrap ErrInvalidArgument. Provider limits beyond
// these (the inline size) stay the provider's.
func CheckSendWR(wr *SendWR, maxSGE uint32) (uint64, error) {
	if uint32(len(wr.SGL)) > maxSGE {
		return 0, fmt.Errorf("verbs: %d SGEs, QP allows %d: %w", len(wr.SGL), maxSGE, ErrInvalidArgument)
	}
	var n uint64
	for i := range wr.SGL {
		n += uint64(wr.SGL[i].Length)
	}
	switch wr.Opcode {
	case WRSend, WRSendWithImm, WRRDMAWrite, WRRDMAWriteWithImm, WRRDMARead:
		if n > 1<<31 {
			return 0, fmt.Errorf("verbs: message of %d bytes exceeds 2 GiB: %w", n, ErrInvalidArgument)
		}
	case WRAtomicCmpAndSwp, WRAtomicFetchAdd:
		if len(wr.SGL) != 1 || wr.SGL[0].Length != 8 {
			return 0, fmt.Errorf("verbs: atomic needs one 8-byte SGE: %w", ErrInvalidArgument)
		}
	default:
		return 0, fmt.Errorf("verbs: send opcode %v: %w", wr.Opcode, ErrInvalidArgument)
	}
	if wr.Flags&SendInline != 0 && (wr.Opcode == WRRDMARead || wr.Opcode >= WRAtomicCmpAndSwp) {
		return 0, fmt.Errorf("verbs: inline %v: %w", wr.Opcode, ErrInvalidArgument)
	}
	return n, nil
}
