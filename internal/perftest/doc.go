// Package perftest is a soft-RoCE peer for perftest's ib_send_bw,
// ib_write_bw, ib_read_bw and ib_write_lat (linux-rdma/perftest), as both
// client and server: the same TCP exchange, the same queue pair set-up,
// and the same test loops on the wire.
//
// The exchange, as perftest 5.70 and later do it over the TCP connection
// (port 18515): every message is swapped symmetrically, the client
// writing first. In order: the version string (16 bytes, NUL-padded; this
// package announces Version); the cycle buffer and cache line sizes
// (32-bit big-endian each; both sides use the larger); the path MTU code
// (two bytes of decimal text; both use the smaller); then address
// messages (DestLen bytes of hex text: LID, outstanding READs, QPN, PSN,
// rkey, buffer address, GID, SRQ number) as handshakes: one before the
// queue pairs connect, then one or two as barriers (ib_write_lat sends
// two before, ib_send_bw one more once its receives are posted). After a
// bandwidth test the client's report (message size and iterations as
// 64-bit integers, peak and average bandwidth and message rate as
// doubles, all big-endian) crosses for ib_write_bw and ib_read_bw, whose
// server is passive and prints it. The bandwidth tests end with a last
// handshake and "done".
//
// Each side's buffer has a send half and a receive half of max(size,
// cycle buffer) bytes; the peer is given the receive half. Bandwidth
// tests step their addresses through the cycle buffer by the message size
// rounded up to a cache line, as perftest does. ib_write_lat needs no
// completion on the receiving side: each side polls the last byte of the
// peer's message in its receive half for the message count.
package perftest
