// Package softroce is a userspace RoCEv2 RC transport: a verbs provider
// that needs no RDMA hardware and no kernel RDMA stack.
//
// It speaks the RoCEv2 wire format (package wire) over a packet link
// (package link: a kernel UDP socket, memif shared-memory rings, a DPDK
// port behind the build tag dpdk, or an in-memory pipe for tests), and is
// organised like the Linux kernel's rxe driver, one job per file:
//
//   - device.go opens a device on a link; receiver.go is its receive loop,
//     which reads packets in batches and dispatches each by destination
//     QP, then sends the responses and coalesced ACKs of the batch;
//   - qp.go creates, modifies and destroys queue pairs (the IBTA state
//     machine, with verbs.CheckTransition, and the flush into ERR); qpn.go
//     draws their numbers at random; post.go validates posted work
//     requests and queues them; txbuf.go lends a transmitting QP packet
//     buffers from the device's pool and sends them in PSN order;
//   - requester.go segments send work requests into MTU-sized packets,
//     assigns PSNs (psn.go) and keeps the window of unacknowledged packets
//     (window.go: its size follows the loss evidence, as Reno's does);
//   - responder.go checks and executes incoming requests (SEND, RDMA
//     WRITE, RDMA READ, atomics) against the memory regions (mr.go,
//     memory.go), enforces remote access rights, coalesces ACKs and
//     answers duplicates;
//   - completer.go processes ACKs, NAKs and READ responses, retires work
//     requests into completions (cq.go), and runs the local ACK timeout
//     and the RNR timer (timer.go).
//
// Loss recovery: toward other RoCE peers (rxe, RNICs), the IBTA's
// go-back-N, in completer.go: a sequence NAK or a timeout resends from the
// first unacknowledged PSN. Between two soft-RoCE QPs that negotiated it
// (SetSelectiveRepeat; rsock does in its handshake), selective repeat in
// three files: selective.go (the pure state: the responder's bitmap of
// PSNs that arrived past a gap, and the requester's scoreboard, which
// takes a packet as lost RACK-style, by later transmissions that
// arrived), placement.go (the responder places a WRITE that arrives past
// a gap at once) and recovery.go (the requester resends only the PSNs the
// scoreboard says are lost, in bounded bursts). READ and atomic requests
// keep go-back-N, since the completer tracks their responses in order.
// widesack.go sizes the window: half the PSNs the responder's bitmap
// tells apart, 512 packets with the 128-byte bitmap every peer knows, up
// to 2048 with wide SACK (SetWideSACK, negotiated: a bitmap of up to 512
// bytes, as much as a selective NAK of the path MTU carries), bounded by
// the device's MaxInflight and the user's SetSendWindowLimit.
//
// Congestion control, between two soft-RoCE QPs that negotiated it
// (SetCongestionControl, on top of selective repeat): congestion.go is
// the controller, pure state shaped like quic-go's SendAlgorithm (the
// queueing delay above the path's least round trip tells a queue that
// overflows from random loss), pacer.go the token bucket that spaces the
// requester's packets, and congestion_qp.go the hooks that feed them from
// the requester and completer. Toward other RoCE peers nothing changes.
//
// Senders transmit from the posting goroutine. stats.go and counters.go
// report a QP's and a device's numbers; capture.go writes a device's
// packets as a pcap; pathmtu.go derives a path MTU from an IP MTU.
package softroce
