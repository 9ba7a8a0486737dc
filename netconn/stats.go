package netconn

import (
	"net"
	"net/netip"
	"sync/atomic"
	"time"
)

// ConnStats describes a connection for monitoring, as one line of `ss -ti`
// would. It is a value: Stats fills it without allocating.
type ConnStats struct {
	// Transport is "rdma/<provider>/<link>" or "tcp".
	Transport string `json:"transport"`
	// FallbackReason says why a conn that tried RDMA is on TCP (or on a
	// link other than the one it tried): see Conn.FallbackReason.
	FallbackReason string `json:"fallback_reason,omitempty"`
	// Local and Remote are the TCP addresses of the conn.
	Local  netip.AddrPort `json:"local"`
	Remote netip.AddrPort `json:"remote"`
	// BytesRead and BytesWritten are what Read returned and Write accepted.
	BytesRead    uint64 `json:"bytes_read"`
	BytesWritten uint64 `json:"bytes_written"`

	// The rest describes an RDMA conn; it is zero on TCP.

	// Device is the name of the device that carries the conn.
	Device string `json:"device,omitempty"`
	// QPN and DestQPN are the local and the peer's queue pair numbers.
	QPN     uint32 `json:"qpn,omitempty"`
	DestQPN uint32 `json:"dest_qpn,omitempty"`
	// PathMTU is the queue pair's path MTU in bytes.
	PathMTU int `json:"path_mtu,omitempty"`
	// PacketMTU is the payload per packet when the peers agreed on more
	// than the path MTU names (rsock.Config.MaxPacketMTU), in bytes.
	PacketMTU int `json:"packet_mtu,omitempty"`
	// SRTT and RTTVar estimate the round trip of the queue pair's
	// requests (RFC 6298); zero before the first sample.
	SRTT   time.Duration `json:"srtt_ns,omitempty"`
	RTTVar time.Duration `json:"rttvar_ns,omitempty"`
	// Cwnd is the send window and Inflight the packets sent and not yet
	// acknowledged.
	Cwnd     int `json:"cwnd,omitempty"`
	Inflight int `json:"inflight,omitempty"`
	// PacingRate is the rate the congestion controller paces the queue
	// pair's packets at, in bytes per second (0: not paced); Congestion
	// its reductions of the window so far. Both need congestion control,
	// which rsock peers negotiate.
	PacingRate       uint64 `json:"pacing_rate,omitempty"`
	CongestionEvents uint64 `json:"congestion_events,omitempty"`
	// HostDelay is how long the two hosts hold a request and its ACK
	// (smoothed), part of SRTT, which while competing the congestion
	// controller lets be in flight beyond its window; rsock peers
	// negotiate the hold echoes that measure it, on the udp link (kernel
	// receive timestamps).
	HostDelay time.Duration `json:"host_delay_ns,omitempty"`
	// ECN, where both peers negotiated it: ECNCERecv counts the packets
	// this end received CE-marked (a queue on the way over its
	// threshold), ECNEchoesSent the echoes that told the peer so;
	// ECNEchoesRecv counts the peer's echoes and ECNMarksEchoed the CE
	// marks they reported on this end's packets, which the congestion
	// controller reacted to.
	ECNCERecv      uint64 `json:"ecn_ce_recv,omitempty"`
	ECNEchoesSent  uint64 `json:"ecn_echoes_sent,omitempty"`
	ECNEchoesRecv  uint64 `json:"ecn_echoes_recv,omitempty"`
	ECNMarksEchoed uint64 `json:"ecn_marks_echoed,omitempty"`
	// Reordering is how many later packets may arrive before one that
	// has not counts as lost (selective repeat: 3, more once resends
	// prove the path reorders); SpuriousResends the resends whose first
	// copy turned out to have arrived. Where both peers negotiated
	// duplicate echoes (rsock's DSACK), DupEchoesRecv counts the peer's
	// echoes and CongestionUndos the window reductions undone because
	// every resend behind them proved spurious.
	Reordering      int    `json:"reordering,omitempty"`
	SpuriousResends uint64 `json:"spurious_resends,omitempty"`
	DupEchoesRecv   uint64 `json:"dup_echoes_recv,omitempty"`
	CongestionUndos uint64 `json:"congestion_undos,omitempty"`
	// Retransmits are request packets sent again; Timeouts local ACK
	// timeouts, SpuriousTimeouts those of them proved needless (the
	// acknowledgement was late, not lost).
	Retransmits      uint64 `json:"retransmits,omitempty"`
	Timeouts         uint64 `json:"timeouts,omitempty"`
	SpuriousTimeouts uint64 `json:"spurious_timeouts,omitempty"`
	// SeqNAKsSent and SeqNAKsRecv are PSN sequence NAKs sent to and
	// received from the peer; RNRNAKsSent and RNRNAKsRecv receiver-not-
	// ready NAKs.
	SeqNAKsSent uint64 `json:"seq_naks_sent,omitempty"`
	SeqNAKsRecv uint64 `json:"seq_naks_recv,omitempty"`
	RNRNAKsSent uint64 `json:"rnr_naks_sent,omitempty"`
	RNRNAKsRecv uint64 `json:"rnr_naks_recv,omitempty"`
	// CreditStalls counts writers' waits for the peer's credits (its ring
	// or receive requests); SendRingStalls waits for the local send ring.
	CreditStalls   uint64 `json:"credit_stalls,omitempty"`
	SendRingStalls uint64 `json:"send_ring_stalls,omitempty"`
	// RingSize is the size in bytes of the stream's receive and send
	// rings.
	RingSize int `json:"ring_size,omitempty"`
}

// connObs is what a Conn keeps for Stats and logging.
type connObs struct {
	read, written atomic.Uint64 // bytes, on the TCP path (a stream counts its own)
	errLogged     atomic.Bool   // a connection error was logged
}

// Stats returns the connection's statistics: bytes each way, and on RDMA
// the queue pair's state and counters, read from atomics and under the
// stream's and the queue pair's own locks. It does not allocate and may
// be called at any time, also after Close.
func (c *Conn) Stats() ConnStats {
	st := ConnStats{
		Transport:      c.transport,
		FallbackReason: c.FallbackReason(),
		Local:          addrPort(c.LocalAddr()),
		Remote:         addrPort(c.RemoteAddr()),
	}
	if c.stream == nil {
		st.BytesRead = c.obs.read.Load()
		st.BytesWritten = c.obs.written.Load()
		return st
	}
	s := c.stream.Stats()
	st.BytesRead, st.BytesWritten = s.BytesRead, s.BytesWritten
	st.Device = c.dev.dev.Name()
	q := &s.QP
	st.QPN, st.DestQPN, st.PathMTU, st.PacketMTU = q.QPN, q.DestQPN, q.PathMTU, q.PacketMTU
	st.SRTT, st.RTTVar = q.SRTT, q.RTTVar
	st.Cwnd, st.Inflight = q.Cwnd, q.Inflight
	st.PacingRate, st.CongestionEvents = q.PacingRate, q.Counters.CongestionEvents
	st.HostDelay = q.HostDelay
	st.ECNCERecv, st.ECNEchoesSent = q.Counters.ECNCERecv, q.Counters.ECNEchoesSent
	st.ECNEchoesRecv, st.ECNMarksEchoed = q.Counters.ECNEchoesRecv, q.Counters.ECNMarksEchoed
	st.Reordering, st.SpuriousResends = q.Reordering, q.SpuriousResends
	st.DupEchoesRecv, st.CongestionUndos = q.Counters.DupEchoesRecv, q.Counters.CongestionUndos
	st.Retransmits, st.Timeouts = q.Counters.Retransmits, q.Counters.Timeouts
	st.SpuriousTimeouts = q.Counters.SpuriousTimeouts
	st.SeqNAKsSent, st.SeqNAKsRecv = q.Counters.SeqNAKsSent, q.Counters.SeqNAKsRecv
	st.RNRNAKsSent, st.RNRNAKsRecv = q.Counters.RNRNAKsSent, q.Counters.RNRNAKsRecv
	st.CreditStalls, st.SendRingStalls = s.CreditStalls, s.SendRingStalls
	st.RingSize = s.RingSize
	return st
}

// addrPort is a TCP address as a netip.AddrPort, or the zero value.
func addrPort(a net.Addr) netip.AddrPort {
	if t, ok := a.(*net.TCPAddr); ok {
		return t.AddrPort()
	}
	return netip.AddrPort{}
}
