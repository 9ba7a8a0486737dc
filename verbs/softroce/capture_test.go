package softroce

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/rsock-go/rsock/verbs"
	"github.com/rsock-go/rsock/verbs/softroce/pcap"
	"github.com/rsock-go/rsock/verbs/softroce/wire"
)

// readCapture parses a capture and checks each frame: Ethernet, IPv4 with
// a valid checksum, UDP, a RoCEv2 packet that parses, and an ICRC that
// verifies over the headers as written. It returns the number of frames.
func readCapture(t *testing.T, b []byte) int {
	t.Helper()
	r, err := pcap.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if r.LinkType() != pcap.LinkTypeEthernet {
		t.Fatalf("link type %d", r.LinkType())
	}
	n := 0
	for {
		p, err := r.Next()
		if errors.Is(err, io.EOF) {
			return n
		}
		if err != nil {
			t.Fatal(err)
		}
		n++
		f := p.Data
		if len(f) != p.OrigLen || len(f) < wire.EthernetLen+wire.IPv4MinLen+wire.UDPLen+wire.BTHLen+wire.ICRCLen {
			t.Fatalf("frame %d: %d of %d bytes", n, len(f), p.OrigLen)
		}
		if wire.Ethernet(f).EtherType() != wire.EtherTypeIPv4 {
			t.Fatalf("frame %d: EtherType %#x", n, wire.Ethernet(f).EtherType())
		}
		ip := wire.IPv4(f[wire.EthernetLen:])
		if !ip.IsValid(len(f)-wire.EthernetLen) || !ip.ChecksumValid() || ip.Protocol() != wire.IPProtoUDP {
			t.Fatalf("frame %d: bad IPv4 header % x", n, f[wire.EthernetLen:wire.EthernetLen+20])
		}
		udpb := wire.UDP(ip.Payload())
		if !udpb.IsValid(len(ip.Payload())) || udpb.CalculateChecksum(ip.Src(), ip.Dst()) != udpb.Checksum() {
			t.Fatalf("frame %d: bad UDP header", n)
		}
		roce := udpb.Payload()
		body := roce[:len(roce)-wire.ICRCLen]
		if _, err := wire.Parse(body); err != nil {
			t.Fatalf("frame %d: %v", n, err)
		}
		if got, want := wire.ICRCOf(roce[len(body):]), wire.ComputeICRCFromHeaders(f[wire.EthernetLen:wire.EthernetLen+wire.IPv4MinLen+wire.UDPLen], body); got != want {
			t.Fatalf("frame %d (IPv4 ID %d): ICRC %#x, headers give %#x", n, ip.ID(), got, want)
		}
	}
}

// TestCapture writes 256 KiB over the udp link (whose sends go as GSO
// runs, each packet's ICRC computed for its own IPv4 ID) with a capture on
// both devices: every packet either device sent or received is in it, and
// every frame's ICRC verifies over the headers written.
func TestCapture(t *testing.T) { captureWrite(t, udpLinks, verbs.MTU1024) }

// captureWrite writes 256 KiB over links of kind k with a capture on both
// devices and checks that every packet either device sent or received is
// in it, and that every frame's ICRC verifies over the headers written.
func captureWrite(t *testing.T, k linkKind, mtu verbs.MTU) {
	var file bytes.Buffer
	c, err := NewCapture(&file, 0)
	if err != nil {
		t.Fatal(err)
	}
	a, b := newPair(t, k, noFaults, pairOpts{mtu: mtu, capture: c, timeout: captureAckTimeout})
	const size = 256 << 10
	a.postSend(verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{a.sge(0, size)},
		RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	expectWC(t, a.scq, 1, verbs.WCRDMAWrite, verbs.WCSuccess)
	a.dev.Close()
	b.dev.Close()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	ca, cb := a.dev.Counters(), b.dev.Counters()
	want := ca.SentPackets + ca.RecvPackets + cb.SentPackets + cb.RecvPackets
	st := c.Stats()
	if st.Written != want || st.Skipped != 0 || st.NoID != 0 {
		t.Errorf("capture %+v; the devices sent and received %d packets", st, want)
	}
	if n := readCapture(t, file.Bytes()); uint64(n) != want || n < 2*size/mtu.Bytes() {
		t.Errorf("%d frames in the file, want %d", n, want)
	}
}

// TestCaptureBound: a capture stops at its size bound, counts what it
// left out, and the file stays readable.
func TestCaptureBound(t *testing.T) {
	var file bytes.Buffer
	const limit = 20 << 10
	c, err := NewCapture(&file, limit)
	if err != nil {
		t.Fatal(err)
	}
	a, b := newPair(t, pipeLinks, noFaults, pairOpts{mtu: verbs.MTU1024, capture: c, timeout: captureAckTimeout})
	a.postSend(verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{a.sge(0, 64<<10)},
		RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	expectWC(t, a.scq, 1, verbs.WCRDMAWrite, verbs.WCSuccess)
	a.dev.Close()
	b.dev.Close()
	c.Close()
	st := c.Stats()
	if file.Len() > limit || st.Skipped == 0 || st.Written == 0 {
		t.Errorf("file %d bytes (bound %d), capture %+v", file.Len(), limit, st)
	}
	if n := readCapture(t, file.Bytes()); uint64(n) != st.Written {
		t.Errorf("%d frames in the file, %d written", n, st.Written)
	}
}

// captureAckTimeout is the capture tests' local ACK timeout code (about
// 270 ms): they check the capture, not recovery, and with the default
// (17 ms, retries used up after about 3.4 s without progress) a QP gave
// up in a full race-detector run of every package on two cores.
const captureAckTimeout = 16
