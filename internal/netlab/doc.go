// Package netlab builds small real networks out of Linux network
// namespaces for rsock's path tests (test/netpath) and its path benchmark
// (scripts/netpath-bench.sh), and holds the programs that run inside them.
//
// A Lab is two namespaces, A and B, joined by a veth pair (10.77.0.1/24 and
// fd77::1/64 in A, 10.77.0.2/24 and fd77::2/64 in B), or, with
// Config.Relay, by a third namespace M in between: two veth pairs A–M and
// M–B on one subnet, no bridge, no IP forwarding and no addresses in M,
// where an impairment relay (Relay) copies frames between its two
// interfaces over AF_PACKET sockets, duplicating and reordering a chosen
// fraction of them. Every veth has its segmentation and receive offloads
// (TSO, GSO, UDP GSO, GRO) turned off, so that each skb is one wire frame
// of at most the MTU: a loss rule then drops frames, not 64 KiB bursts,
// and the relay sees what a wire would carry. With a relay the endpoints'
// transmit checksum offload is off too (the relay forwards finished
// frames; see Relay).
//
// Loss and outages are nftables rules on the netdev ingress hook of an
// endpoint's veth (DropIngress): numgen random mod 1000 < N drops N per
// mille of the frames that arrive there, 1000 drops all. Ingress rather
// than output because a UDP GSO send passes the output hooks as one skb
// of up to 64 frames.
//
// Everything a Lab makes it removes in Close: the processes it started
// (ended by their PIDs), then its namespaces, which take their veths and
// nftables tables with them. Namespace names carry a random suffix, so
// labs of concurrent tests and runs do not meet. Only addresses inside the
// lab's own namespaces are ever used.
//
// The programs that run inside the namespaces are subcommands of
// internal/netlab/cmd/netlab: exchange (both directions of a netconn
// stream at once, each hashed with SHA-256), relay, and goodput (the
// loss table of rsock against TCP, by rsockbench).
package netlab
