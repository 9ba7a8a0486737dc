package softroce

import (
	"time"

	"github.com/rsock-go/rsock/verbs"
)

var (
	_ verbs.StatsQP         = (*QP)(nil)
	_ verbs.RegisteredBytes = (*Device)(nil)
)

// Stats reports the queue pair's numbers, path MTU, round-trip estimate,
// window and counters, read under q.mu.
func (q *QP) Stats() verbs.QPStats {
	s := verbs.QPStats{QPN: q.qpn, Counters: q.stats.snapshot()}
	q.mu.Lock()
	s.DestQPN = q.attr.DestQPN
	if q.attr.State >= verbs.QPSRTR && q.attr.State != verbs.QPSErr {
		s.PathMTU = q.attr.PathMTU.Bytes()
		if int(q.mtu) > s.PathMTU {
			s.PacketMTU = int(q.mtu)
		}
	}
	s.SRTT = time.Duration(q.comp.rtt.srtt)
	s.RTTVar = time.Duration(q.comp.rtt.rttvar)
	s.Cwnd = q.comp.win.cwnd
	if sb := q.comp.sb; sb != nil {
		s.Reordering, s.SpuriousResends = int(sb.dupThresh), sb.spurious
	}
	s.PacingRate = q.pacingRate()
	if cc, ok := q.comp.win.cc.(*delayGated); ok {
		s.HostDelay = time.Duration(cc.hostDelay)
	}
	q.countCongestion()
	s.Counters.CongestionEvents = q.stats[cCongestionEvents].Load()
	if q.attr.State == verbs.QPSRTS || q.attr.State == verbs.QPSSQD {
		s.Inflight = q.inflight()
	}
	q.mu.Unlock()
	return s
}

// RegisteredBytes is the total length of the memory regions registered
// on the device now.
func (d *Device) RegisteredBytes() uint64 {
	var n uint64
	d.mrMu.RLock()
	for _, m := range d.lkeys {
		n += uint64(len(m.buf))
	}
	d.mrMu.RUnlock()
	return n
}
