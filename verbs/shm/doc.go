// Package shm is a verbs provider for reliable-connected queue pairs
// between two processes of one host, where an RDMA WRITE is a memcpy into
// the peer's mapped memory region and not a packet (as Linux's SMC-D
// loopback-ism device is to SMC, and UCX's shared-memory transports to
// UCX).
//
// Two processes share one channel: a Unix SOCK_SEQPACKET connection that
// carries file descriptors (SCM_RIGHTS) and small setup messages, one
// sealed memfd arena per side that the other maps, and one eventfd
// doorbell per side, passed once at setup. Every queue pair's inbound
// ring (completion entries and a small data area for SENDs) is a slot of
// its owner's arena; every completion queue has a "sleeping" flag there
// and a bit in a wake bitmap. A waiter polls its rings before it sleeps,
// for as long as its completion queue's spin policy has learned pays
// (spin.go: up to 50 µs when the peer answers that fast, backing off
// after polls in vain). The peer, after it published to a queue
// pair whose CQ sleeps, sets the CQ's bit and rings the doorbell only if
// the bell word says that a sleeper reads it, so a burst rings once. The
// sleepers take turns reading the doorbell through Go's netpoller and
// wake the CQs marked; local completions and Kick wake waiters through Go
// alone. A completion queue, a queue pair and a sleeping waiter hold no
// descriptor. A memory region with remote access is moved into a sealed
// memfd at registration and mapped by the peer.
//
// Whatever the peer writes into shared memory is untrusted: indexes and
// lengths are read once into private variables and bounded, no pointer
// the peer wrote is followed, and a violation fails every queue pair of
// the channel with an error, never a panic. The peer process dying closes
// the Unix socket, which fails the channel's queue pairs at once. A peer
// that destroys one queue pair tells the channel (qpGone); the queue pair
// connected to it fails with ErrQPGone once every entry the peer
// published into its inbound ring before was taken, so a last write and
// an in-band close are delivered first.
//
// Setting up a channel (for netconn): Listen on an abstract Unix name and
// Accept, or Dial that name; or Open over any connected SOCK_SEQPACKET
// socket; Pair makes two connected devices in one process (tests). Each
// checks the peer's SO_PEERCRED with Config.CheckPeer (by default: the
// same user); netconn passes a check that the process is the peer of the
// TCP handshake. ByID and ToPeer find a live channel to reuse, so that
// every connection between two processes shares one channel; Bind and
// TakeBinding let a user tie something outside the channel (netconn: a
// TCP connection that reuses it) to the peer process, since only that
// process can send on the channel's socket. The device
// owns the socket; Done and Err say when and why the channel ended (the
// peer died: its socket closed), after which the owner closes it.
//
// rsock uses two optional capabilities the provider offers
// (verbs.InlineWriter, verbs.KickWaiter): Write copies from the caller's
// buffer straight into the peer's receive ring, and Read and Write sleep
// on the completion queue themselves.
package shm
