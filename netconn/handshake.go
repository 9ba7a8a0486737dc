package netconn

import (
	"github.com/rsock-go/rsock/fallback"
	"github.com/rsock-go/rsock/rsock"
)

// helloFor describes a local endpoint to the peer.
func helloFor(d *sharedDevice, p rsock.Params) *fallback.Hello {
	caps := fallback.CapStream
	if p.SelectiveRepeat {
		caps |= fallback.CapSelectiveRepeat
	}
	if p.CongestionControl {
		caps |= fallback.CapCongestionControl
	}
	return &fallback.Hello{
		Version:      fallback.Version,
		Capabilities: caps,
		Provider:     d.dev.Provider(),
		Link:         d.dev.Link(),
		GID:          p.GID,
		UDPPort:      p.UDPPort,
		QPN:          p.QPN,
		PSN:          p.PSN,
		MTU:          uint32(p.MTU),
		RingAddr:     p.RingAddr,
		RingRKey:     p.RingRKey,
		RingSize:     uint32(p.RingSize),
		RecvDepth:    uint32(p.RecvDepth),
	}
}

// paramsOf reads the peer's endpoint out of its Hello.
func paramsOf(h *fallback.Hello) rsock.Params {
	p := rsock.Params{
		GID:             h.GID,
		UDPPort:         h.UDPPort,
		QPN:             h.QPN,
		PSN:             h.PSN,
		MTU:             int(h.MTU),
		SelectiveRepeat: h.Capabilities&fallback.CapSelectiveRepeat != 0,
		RingAddr:        h.RingAddr,
		RingRKey:        h.RingRKey,
		RingSize:        int(h.RingSize),
		RecvDepth:       int(h.RecvDepth),
	}
	p.CongestionControl = h.Capabilities&fallback.CapCongestionControl != 0
	return p
}

// compatible reports whether the peer's queue pair is reachable from the
// local device. Every provider speaks RoCEv2 on the same kind of link:
// soft-RoCE's udp and dpdk links reach RNICs and rxe and each other (and
// an rdma-core device reaches a soft-RoCE peer on UDP port 4791), and a
// memif wire reaches the peers on the same wire.
func compatible(local *sharedDevice, h *fallback.Hello) bool {
	return h.Capabilities&fallback.CapStream != 0 && linksInteroperate(local.dev.Link(), h.Link)
}
