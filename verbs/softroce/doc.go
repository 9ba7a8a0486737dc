// Package softroce is a userspace RoCEv2 RC transport: a verbs provider
// that needs no RDMA hardware and no kernel RDMA stack.
//
// It speaks the RoCEv2 wire format (package wire) over a packet link
// (package link: a UDP socket by default), and is organised like the Linux
// kernel's rxe driver:
//
//   - requester.go segments send work requests into MTU-sized packets,
//     assigns PSNs and keeps a bounded window of unacknowledged packets;
//   - responder.go checks and executes incoming requests (SEND, RDMA WRITE,
//     RDMA READ, atomics), enforces remote access rights, coalesces ACKs
//     and answers duplicates;
//   - completer.go processes ACKs, NAKs and READ responses, retires work
//     requests into completions, and drives go-back-N retransmission, the
//     local ACK timeout and the RNR timer.
//
// One goroutine per device receives packets in batches and dispatches them
// by destination QP. Senders transmit from the posting goroutine.
package softroce
