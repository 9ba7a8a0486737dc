// Package dpdk is a soft-RoCE link over a DPDK port: the packet I/O runs
// in user space through DPDK's poll-mode drivers, with no kernel on the
// data path, on any NIC or virtual device DPDK drives (net_ring,
// net_memif, net_af_packet, net_af_xdp, net_tap, PCI NICs).
//
// The link is built with the build tag dpdk (cgo, against DPDK 22.11's
// libdpdk-dev); without it only its pure parts are compiled (the
// neighbour table, ARP, frame classification and the configuration), and
// the link registers nothing. With it, the link registers itself as
// "dpdk" (link.Register), so that netconn and the commands find it by
// name once a binary imports the package:
//
//	import _ "github.com/rsock-go/rsock/verbs/softroce/link/dpdk"
//
// A process has one DPDK environment (EAL), initialised lazily on the
// first Open from $RSOCK_DPDK_ARGS (by default --no-huge -m 1024
// --no-pci, plus a --file-prefix unique to the process), and any number of
// ports on it; closing the last port cleans the EAL up, so no runtime
// file, memif socket or XDP program outlives the process.
//
// The link writes Ethernet, IPv4 or IPv6, and UDP itself (IPv4 header
// checksum, UDP checksum 0 over IPv4 as RoCEv2 allows), answers ARP and
// IPv6 neighbour solicitations for its address and resolves next hops
// (ARP requests, neighbour solicitations) into a small neighbour table
// with timeouts, checks the full ICRC of every frame it receives (it sees
// every byte), and delivers only UDP frames to port 4791 for its own
// address.
//
// The receive loop polls while traffic flows and for Config.Poll (200 µs)
// after the last frame, yielding to other goroutines between polls, then
// sleeps: on the queue's rx interrupt, waited for through Go's
// netpoller, where the driver has one, and otherwise in sleeps that
// double up to 2 ms, and up to 50 ms after a second without frames, so
// that an idle port costs well under 1% of a core.
// DPDK 22.11's net_memif has no rx interrupt (no rx_queue_intr_enable,
// and its receiver masks the peer's), nor do net_ring and net_af_packet.
// The loop does not lock its OS thread: see Link.RecvLoop.
package dpdk
