// Package verbs is rsock's provider-neutral RDMA verbs API.
//
// It mirrors libibverbs: a Device with a GID table, protection domains
// (PD), memory regions (MR) with lkey, rkey and access flags, completion
// queues (CQ) and reliable-connected queue pairs (QP) driven through the
// RESET→INIT→RTR→RTS state machine with ModifyQP-style attributes. Work
// requests and completions use libibverbs' numbering (ibv_wr_opcode,
// ibv_wc_status, ibv_wc_opcode, ibv_access_flags), so that a provider over
// rdma-core is a thin mapping.
//
// Providers: verbs/softroce (RoCEv2 in userspace Go, over a UDP socket or
// an in-memory pipe), verbs/shm (processes of one host: a WRITE is a copy
// into the peer's mapped memory) and, with cgo, verbs/rdmacore. Optional
// capabilities: InlineWriter, KickWaiter, SelectiveRepeater,
// CongestionController, WideSACKer, SendWindowLimiter, Causer.
//
// Memory handed to RegMR must not move and must outlive the MR: allocate it
// with AllocBuffer (mmap), never from the Go heap.
package verbs
