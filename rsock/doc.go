// Package rsock is one full-duplex byte stream over one RDMA
// reliable-connected queue pair.
//
// Each side registers a receive ring with remote write access and tells
// the other its address, rkey and size (Params, carried by the caller's
// handshake). A writer copies application bytes into its local send ring
// and RDMA-WRITEs them into the peer's receive ring at the producer
// cursor, in two writes when the ring wraps; the last write is
// WRITE_WITH_IMM, whose immediate data says how many bytes arrived:
//
//	imm = type (3 bits) << 29 | value (29 bits), type 1 = DATA, value = bytes
//
// The other immediate types are reserved, so that a stream id can be
// added when several streams share a QP.
//
// Control messages (credit updates, FIN, CLOSE, KEEPALIVE) are SENDs of a
// small fixed frame (see control.go), and every one carries the sender's
// cumulative credits: the bytes its reader consumed and the messages it
// processed. Credits are of two kinds, ring bytes and receive work
// requests (each WRITE_WITH_IMM and SEND consumes one at the peer); a few
// receive requests are reserved for control so that a credit update can
// always be sent (package ring does the arithmetic). CLOSE is the last
// message a side sends: the peer destroys its queue pair once CLOSE
// arrives, and anything sent after it would never be acknowledged.
//
// A slow reader makes the writer block; nothing is dropped and memory is
// bounded by the rings. Errors are *net.OpError, deadlines return
// os.ErrDeadlineExceeded, and Close is idempotent, as for net.TCPConn.
package rsock
