package softroce

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rsock-go/rsock/verbs/softroce/link"
	"github.com/rsock-go/rsock/verbs/softroce/pcap"
	"github.com/rsock-go/rsock/verbs/softroce/wire"
)

// Capture writes the packets of devices as a pcap file, each wrapped in
// the Ethernet, IP and UDP headers it had (or would have had) on the
// wire, with its ICRC, so that Wireshark and tshark decode it as RoCEv2.
// Hardware RDMA traffic is invisible to tcpdump; soft-RoCE's need not be.
//
// A UDP socket does not tell the IPv4 ID its kernel gave a datagram, and
// the ICRC covers it: the capture writes the ID for which the packet's
// ICRC verifies (0, or the packet's index in a GSO run), so that every
// ICRC in the file checks. The MAC addresses are made up (02:00 and the
// IPv4 address, or the low bytes of the IPv6 address).
//
// It stops writing once the file would pass its size bound, and counts
// what it left out. A device with no Capture (Config.Capture nil) pays one
// nil check per batch.
type Capture struct {
	mu      sync.Mutex
	bw      *bufio.Writer
	pw      *pcap.Writer
	closer  io.Closer
	limit   int64 // bytes the file may hold
	size    int64 // bytes written
	err     error // the first write error; writing stopped
	frame   []byte
	joined  []byte // a packet delivered in two pieces, joined
	written atomic.Uint64
	skipped atomic.Uint64
	noID    atomic.Uint64
	// idDeltas are the ICRC differences by IPv4 ID, by packet length.
	idDeltas map[int]*wire.ICRCIDTable
}

// captureSnapLen covers the largest frame: Ethernet, IPv6, UDP, RoCE
// headers, a 4096-byte payload and the ICRC.
const captureSnapLen = wire.EthernetLen + 40 + 8 + maxPacketLen

// NewCapture writes a capture to w, at most limit bytes (file header
// included; limit ≤ 0 means no bound).
func NewCapture(w io.Writer, limit int64) (*Capture, error) {
	bw := bufio.NewWriterSize(w, 64<<10)
	pw, err := pcap.NewWriter(bw, pcap.LinkTypeEthernet, captureSnapLen)
	if err != nil {
		return nil, err
	}
	if err := bw.Flush(); err != nil {
		return nil, err
	}
	if limit <= 0 {
		limit = 1<<63 - 1
	}
	return &Capture{bw: bw, pw: pw, limit: limit, size: pcap.FileHeaderLen, frame: make([]byte, captureSnapLen)}, nil
}

// CreateCapture creates the file path, readable and writable by its owner
// only (mode 0600), and writes a capture to it, at most limit bytes. Close
// closes the file.
//
// The file is always a fresh one: path is opened with O_EXCL and
// O_NOFOLLOW, so a symbolic link at path is refused (whatever it points
// to), as is a file of another owner or any other kind of file. A regular
// file of this process's owner (a capture of an earlier run) is removed
// and created anew, so that it never keeps an earlier mode or content.
func CreateCapture(path string, limit int64) (*Capture, error) {
	f, err := createFresh(path)
	if err != nil {
		return nil, fmt.Errorf("softroce: capture: %w", err)
	}
	c, err := NewCapture(f, limit)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("softroce: capture %s: %w", path, err)
	}
	c.closer = f
	return c, nil
}

// createFresh creates path as a new file of mode 0600, replacing only a
// regular file of the same owner.
func createFresh(path string) (*os.File, error) {
	const flags = os.O_WRONLY | os.O_CREATE | os.O_EXCL | syscall.O_NOFOLLOW | syscall.O_CLOEXEC
	f, err := os.OpenFile(path, flags, 0o600)
	if !errors.Is(err, fs.ErrExist) {
		return f, err
	}
	fi, lerr := os.Lstat(path)
	if lerr != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s exists and is not a regular file (%v): not replaced", path, fi.Mode().Type())
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != os.Geteuid() {
		return nil, fmt.Errorf("%s exists and belongs to another user: not replaced", path)
	}
	if err := os.Remove(path); err != nil {
		return nil, err
	}
	return os.OpenFile(path, flags, 0o600)
}

// CaptureStats counts what a Capture did with packets.
type CaptureStats struct {
	// Written packets are in the file.
	Written uint64
	// Skipped packets were left out: the size bound was reached, or a
	// write failed.
	Skipped uint64
	// NoID packets are received IPv4 packets whose ICRC verified with no
	// IPv4 ID tried (a corrupted packet, or a peer's ID beyond a GSO
	// run's); they are written with ID 0 and the ICRC they came with.
	NoID uint64
}

// Stats returns the capture's counts.
func (c *Capture) Stats() CaptureStats {
	return CaptureStats{Written: c.written.Load(), Skipped: c.skipped.Load(), NoID: c.noID.Load()}
}

// Close flushes the capture and closes its file, if CreateCapture opened
// it. Devices that still use it write nothing more.
func (c *Capture) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	err := c.bw.Flush()
	if c.err == nil {
		c.err = io.ErrClosedPipe
	}
	if c.closer != nil {
		if cerr := c.closer.Close(); err == nil {
			err = cerr
		}
		c.closer = nil
	}
	return err
}

// sent captures packets a device at local handed to its link. The udp
// link appends each ICRC in place, in Buf[N:N+4], computed for the IPv4 ID
// the kernel gives the datagram; links that frame packets themselves
// (pipe, memif) compute it with ID 0 and leave Buf alone, so the capture
// computes that one when the bytes there do not verify.
func (c *Capture) sent(l link.Link, pkts []link.Packet) {
	local := l.LocalAddr()
	// Only the udp link's ICRCs are worth searching IDs for: the others'
	// bytes after N are not an ICRC, and 64 tries per packet would slow
	// the sender down.
	mode := txComputed
	if l.Name() == "udp" {
		mode = txInPlace
	}
	c.batch(pkts, mode, func(p *link.Packet) (src, dst netip.AddrPort) { return local, p.Addr })
}

// received captures packets a device at local received, with the ICRC
// that came with them (after Buf[:N]), good or bad.
func (c *Capture) received(local netip.AddrPort, pkts []link.Packet) {
	c.batch(pkts, rxICRC, func(p *link.Packet) (src, dst netip.AddrPort) { return p.Addr, local })
}

// icrcMode says where a packet's ICRC is.
type icrcMode int

const (
	rxICRC     icrcMode = iota // received after Buf[:N]: keep it, find its IPv4 ID
	txInPlace                  // appended by the link (udp), for the ID of its GSO run
	txComputed                 // not in Buf: the link computes it for IPv4 ID 0
)

func (c *Capture) batch(pkts []link.Packet, mode icrcMode, ends func(*link.Packet) (src, dst netip.AddrPort)) {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range pkts {
		p := &pkts[i]
		pkt, ok := c.whole(p, mode)
		if c.err != nil || !ok {
			c.skipped.Add(1)
			continue
		}
		src, dst := ends(p)
		n := c.encode(src, dst, pkt, mode)
		if n == 0 || c.size+int64(c.pw.RecordLen(n)) > c.limit {
			c.skipped.Add(1)
			continue
		}
		if err := c.pw.WritePacket(now, c.frame[:n]); err != nil {
			c.err = err
			c.skipped.Add(1)
			continue
		}
		c.size += int64(c.pw.RecordLen(n))
		c.written.Add(1)
	}
	if err := c.bw.Flush(); err != nil && c.err == nil {
		c.err = err
	}
}

// encode builds the frame of pkt (BTH through ICRC) from src to dst into
// c.frame and returns its length, or 0 if it does not fit; mode says where
// its ICRC is.
func (c *Capture) encode(src, dst netip.AddrPort, pkt []byte, mode icrcMode) int {
	v4 := src.Addr().Unmap().Is4()
	hdr := wire.FrameHeaderLen(src.Addr())
	if hdr+len(pkt) > len(c.frame) || !dst.Addr().IsValid() || dst.Addr().Unmap().Is4() != v4 {
		return 0
	}
	f := c.frame[:hdr+len(pkt)]
	copy(f[hdr:], pkt)
	body, icrc := f[hdr:len(f)-wire.ICRCLen], f[len(f)-wire.ICRCLen:]
	var id uint16
	if v4 {
		ok := false
		if mode != txComputed {
			id, ok = c.ipv4ID(src, dst, pkt)
		}
		if !ok && mode != rxICRC {
			ph := wire.PseudoHeader{Src: src, Dst: dst}
			wire.PutICRC(icrc, wire.ComputeICRC(&ph, body))
		} else if !ok {
			c.noID.Add(1)
		}
	} else if mode == txComputed {
		ph := wire.PseudoHeader{Src: src, Dst: dst}
		wire.PutICRC(icrc, wire.ComputeICRC(&ph, body))
	}
	wire.EncodeFrameHeaders(f, &wire.FrameFields{SrcMAC: macOf(src.Addr()), DstMAC: macOf(dst.Addr()),
		Src: src, Dst: dst, IPID: id, PayloadLen: len(pkt)})
	u := wire.UDP(f[hdr-wire.UDPLen:])
	u.SetChecksum(u.CalculateChecksum(src.Addr(), dst.Addr()))
	return len(f)
}

// ipv4ID finds the IPv4 ID below wire.ICRCIDSpan (a GSO run's) for which
// the ICRC at the end of pkt verifies, with one ICRC computation and a
// wire.ICRCIDTable per length (built once). The caller holds c.mu.
func (c *Capture) ipv4ID(src, dst netip.AddrPort, pkt []byte) (uint16, bool) {
	n := len(pkt) - wire.ICRCLen
	ph := wire.PseudoHeader{Src: src, Dst: dst}
	diff := wire.ComputeICRC(&ph, pkt[:n]) ^ wire.ICRCOf(pkt[n:])
	if diff == 0 {
		return 0, true
	}
	t := c.idDeltas[n]
	if t == nil {
		t = new(wire.ICRCIDTable)
		t.Fill(n)
		if c.idDeltas == nil {
			c.idDeltas = make(map[int]*wire.ICRCIDTable)
		}
		c.idDeltas[n] = t
	}
	return t.ID(diff)
}

// macOf makes up a locally administered MAC address for ip.
func macOf(ip netip.Addr) wire.MAC {
	b := ip.As16()
	return wire.MAC{0x02, 0x00, b[12], b[13], b[14], b[15]}
}

// whole returns p's packet through the ICRC in one piece: p.Buf, or for a
// packet in two pieces (link.Packet.Tail), the two joined in a buffer of
// the capture's; a sent packet's ICRC is computed by encode. The caller
// holds c.mu.
func (c *Capture) whole(p *link.Packet, mode icrcMode) ([]byte, bool) {
	if p.N < 0 || p.N > len(p.Buf) {
		return nil, false
	}
	if p.Tail == nil {
		if p.N+wire.ICRCLen > cap(p.Buf) {
			return nil, false
		}
		return p.Buf[:p.N+wire.ICRCLen], true
	}
	n := p.N + len(p.Tail) + wire.ICRCLen
	if n > maxPacketLen || mode == rxICRC && cap(p.Tail) < len(p.Tail)+wire.ICRCLen {
		return nil, false
	}
	if len(c.joined) < n {
		c.joined = make([]byte, maxPacketLen)
	}
	copy(c.joined, p.Buf[:p.N])
	copy(c.joined[p.N:], p.Tail)
	if mode == rxICRC {
		copy(c.joined[n-wire.ICRCLen:n], p.Tail[len(p.Tail):len(p.Tail)+wire.ICRCLen])
	}
	return c.joined[:n], true
}
