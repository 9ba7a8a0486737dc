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
	if p.ECN {
		caps |= fallback.CapECN
	}
	if p.WideSACK {
		caps |= fallback.CapWideSACK
	}
	if p.DuplicateEcho {
		caps |= fallback.CapDuplicateEcho
	}
	if p.HoldEcho {
		caps |= fallback.CapHoldEcho
	}
	if p.PacketMTU != 0 {
		caps |= fallback.CapPacketMTU
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
		PacketMTU:    uint16(p.PacketMTU),
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
	p.ECN = h.Capabilities&fallback.CapECN != 0
	p.WideSACK = h.Capabilities&fallback.CapWideSACK != 0
	p.DuplicateEcho = h.Capabilities&fallback.CapDuplicateEcho != 0
	p.HoldEcho = h.Capabilities&fallback.CapHoldEcho != 0
	if h.Capabilities&fallback.CapPacketMTU != 0 {
		p.PacketMTU = int(h.PacketMTU)
	}
	return p
}
