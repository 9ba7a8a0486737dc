package verbs

import "time"

// QPStats describes a connected queue pair for monitoring, as `rdma
// statistic qp` and `ss -ti` would: its numbers, path MTU, round-trip
// estimate, send window and counters.
type QPStats struct {
	QPN     uint32 // the local queue pair number
	DestQPN uint32 // the peer's queue pair number
	PathMTU int    // path MTU in bytes, 0 before RTR
	// PacketMTU is the payload one packet carries when the QP carries
	// more than PathMTU names (PacketMTUSetter), in bytes; 0 otherwise.
	PacketMTU int
	// SRTT and RTTVar are the smoothed round-trip time and its variation
	// (RFC 6298) from acknowledged request packets; zero before the first
	// sample.
	SRTT, RTTVar time.Duration
	Cwnd         int // send window, in packets
	// PacingRate is the rate the congestion controller paces request
	// packets at, in bytes per second; 0 when they are not paced.
	PacingRate uint64
	// HostDelay is how long the hosts hold a request and its ACK
	// (smoothed), part of SRTT; while competing the congestion controller
	// lets the packets held that long be in flight beyond its window. 0
	// without hold echoes, which rsock peers negotiate.
	HostDelay time.Duration
	Inflight  int // request packets sent and not yet acknowledged
	// Reordering is how many later transmissions may arrive before a
	// packet that has not counts as lost (selective repeat: 3 at first,
	// more once resends prove the path reorders); SpuriousResends are
	// the resends whose first copy turned out to have arrived.
	Reordering      int
	SpuriousResends uint64
	// Counters are the queue pair's own statistics (the device's are the
	// sum over its queue pairs and what no queue pair claimed).
	Counters Counters
}

// StatsQP is implemented by queue pairs that report QPStats. Stats reads
// under the queue pair's own lock and does not allocate.
type StatsQP interface {
	Stats() QPStats
}

// RegisteredBytes is implemented by devices that can say how many bytes
// of memory are registered on them now (the sum of their MRs' lengths).
type RegisteredBytes interface {
	RegisteredBytes() uint64
}
