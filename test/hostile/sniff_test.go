//go:build linux

package hostile

import (
	"encoding/binary"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rsock-go/rsock/verbs/softroce/wire"
)

// sniffer watches, from a packet socket in a side's namespace, the
// requests that reach one queue pair, and keeps the newest PSN among
// them: what an attacker on the path learns, and what the forgeries
// that need the right PSN are aimed with.
type sniffer struct {
	fd   int
	dst  netip.AddrPort
	qpn  uint32
	stop atomic.Bool
	wg   sync.WaitGroup

	mu     sync.Mutex
	latest uint32
	seen   int
	// data is the newest PSN of a packet that needs no receive WQE (a
	// WRITE without immediate, or the first or a middle packet of any
	// message), if dataSeen.
	data     uint32
	dataSeen bool
}

// sniff starts watching the requests to qpn at dst, in v's namespace.
func sniff(t *testing.T, v *side, qpn uint32) *sniffer {
	t.Helper()
	s := &sniffer{dst: v.link, qpn: qpn, fd: -1}
	inNetns(t, v.ns, func() {
		const ethPIP = unix.ETH_P_IP<<8&0xff00 | unix.ETH_P_IP>>8 // htons
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, ethPIP)
		if err != nil {
			t.Fatalf("packet socket: %v", err)
		}
		s.fd = fd
	})
	if s.fd < 0 {
		t.FailNow()
	}
	tv := unix.Timeval{Usec: 20000}
	if err := unix.SetsockoptTimeval(s.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		unix.Close(s.fd)
		t.Fatal(err)
	}
	s.wg.Add(1)
	go s.run()
	t.Cleanup(s.close)
	return s
}

func (s *sniffer) close() {
	if s.stop.Swap(true) {
		return
	}
	s.wg.Wait()
	unix.Close(s.fd)
}

func (s *sniffer) run() {
	defer s.wg.Done()
	buf := make([]byte, 65536)
	for !s.stop.Load() {
		n, _, err := unix.Recvfrom(s.fd, buf, 0)
		if err != nil {
			continue // the receive timeout: look at stop again
		}
		s.note(buf[:n])
	}
}

// note records an IPv4 packet if it is a request to the watched QP. The
// forgeries (IPv4 ID forgedIPID) are left out.
func (s *sniffer) note(ip []byte) {
	if len(ip) < wire.IPv4MinLen || ip[0]>>4 != 4 || ip[9] != unix.IPPROTO_UDP {
		return
	}
	if binary.BigEndian.Uint16(ip[4:6]) == forgedIPID {
		return
	}
	ihl := int(ip[0]&0xf) * 4
	if len(ip) < ihl+wire.UDPLen+wire.BTHLen || netip.AddrFrom4([4]byte(ip[16:20])) != s.dst.Addr() {
		return
	}
	udp := ip[ihl:]
	if binary.BigEndian.Uint16(udp[2:4]) != s.dst.Port() {
		return
	}
	bth := wire.BTH(udp[wire.UDPLen:])
	if bth.DestQP() != s.qpn || !bth.Opcode().Flags().Has(wire.FlagRequest) {
		return
	}
	psn := bth.PSN()
	fl := bth.Opcode().Flags()
	s.mu.Lock()
	if s.seen == 0 || newer(psn, s.latest) {
		s.latest = psn
	}
	s.seen++
	if (!fl.Has(wire.FlagLast) || fl.Has(wire.FlagWrite) && !fl.Has(wire.FlagImm)) && (!s.dataSeen || newer(psn, s.data)) {
		s.data, s.dataSeen = psn, true
	}
	s.mu.Unlock()
}

// newer reports whether PSN a comes after b (modulo 2^24).
func newer(a, b uint32) bool { return int32((a-b)<<8)>>8 > 0 }

// newestData returns the newest PSN seen of a packet that needs no receive
// WQE.
func (s *sniffer) newestData() uint32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.data
}

// newest returns the newest request PSN seen, and how many requests were.
func (s *sniffer) newest() (uint32, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.latest, s.seen
}

// quiet waits until no new request has been seen for d, and returns the
// newest PSN: with the stream idle, the responder expects the PSN after it.
func (s *sniffer) quiet(t *testing.T, d time.Duration) uint32 {
	t.Helper()
	_, n := s.newest()
	for {
		time.Sleep(d)
		psn, m := s.newest()
		if m == n {
			if m == 0 {
				t.Fatal("the sniffer saw no request")
			}
			return psn
		}
		n = m
	}
}
