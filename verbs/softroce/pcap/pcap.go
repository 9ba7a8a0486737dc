// Package pcap writes and reads the classic libpcap capture file format
// (the one tcpdump -w writes): a 24-byte file header, then per packet a
// 16-byte record header and the packet's bytes. Timestamps are in
// nanoseconds (magic 0xa1b23c4d), fields little-endian.
package pcap

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"
)

// Link types of the file header.
const (
	// LinkTypeEthernet is LINKTYPE_ETHERNET: frames start with an
	// Ethernet II header.
	LinkTypeEthernet = 1
)

// Magic numbers of the file header.
const (
	magicMicro = 0xa1b2c3d4
	magicNano  = 0xa1b23c4d
)

// FileHeaderLen and RecordHeaderLen are the sizes of the headers.
const (
	FileHeaderLen   = 24
	RecordHeaderLen = 16
)

// MaxSnapLen bounds the snapshot length a Reader accepts, as libpcap does.
const MaxSnapLen = 262144

// Writer writes a capture file.
type Writer struct {
	w       io.Writer
	snapLen uint32
	hdr     [RecordHeaderLen]byte
}

// NewWriter writes the file header for frames of linkType cut to snapLen
// bytes, and returns a Writer for the packets.
func NewWriter(w io.Writer, linkType uint32, snapLen int) (*Writer, error) {
	if snapLen <= 0 || snapLen > MaxSnapLen {
		return nil, fmt.Errorf("pcap: snapshot length %d out of range 1-%d", snapLen, MaxSnapLen)
	}
	var h [FileHeaderLen]byte
	binary.LittleEndian.PutUint32(h[0:], magicNano)
	binary.LittleEndian.PutUint16(h[4:], 2) // version 2.4
	binary.LittleEndian.PutUint16(h[6:], 4)
	binary.LittleEndian.PutUint32(h[16:], uint32(snapLen))
	binary.LittleEndian.PutUint32(h[20:], linkType)
	if _, err := w.Write(h[:]); err != nil {
		return nil, err
	}
	return &Writer{w: w, snapLen: uint32(snapLen)}, nil
}

// RecordLen is the number of bytes WritePacket writes for a frame of n bytes.
func (w *Writer) RecordLen(n int) int { return RecordHeaderLen + int(min(uint32(n), w.snapLen)) }

// WritePacket writes one frame captured at ts, cut to the snapshot length.
func (w *Writer) WritePacket(ts time.Time, frame []byte) error {
	incl := min(uint32(len(frame)), w.snapLen)
	ns := ts.UnixNano()
	binary.LittleEndian.PutUint32(w.hdr[0:], uint32(ns/1e9))
	binary.LittleEndian.PutUint32(w.hdr[4:], uint32(ns%1e9))
	binary.LittleEndian.PutUint32(w.hdr[8:], incl)
	binary.LittleEndian.PutUint32(w.hdr[12:], uint32(len(frame)))
	if _, err := w.w.Write(w.hdr[:]); err != nil {
		return err
	}
	_, err := w.w.Write(frame[:incl])
	return err
}

// Reader reads a capture file written by Writer, tcpdump or Wireshark
// (classic format, either byte order, micro- or nanosecond timestamps).
type Reader struct {
	r        io.Reader
	order    binary.ByteOrder
	nano     bool
	snapLen  uint32
	linkType uint32
	hdr      [RecordHeaderLen]byte
}

// ErrFormat is wrapped by errors about malformed files.
var ErrFormat = errors.New("pcap: malformed file")

// NewReader reads the file header.
func NewReader(r io.Reader) (*Reader, error) {
	var h [FileHeaderLen]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return nil, fmt.Errorf("%w: file header: %w", ErrFormat, err)
	}
	rd := &Reader{r: r}
	switch {
	case binary.LittleEndian.Uint32(h[0:]) == magicNano:
		rd.order, rd.nano = binary.LittleEndian, true
	case binary.LittleEndian.Uint32(h[0:]) == magicMicro:
		rd.order = binary.LittleEndian
	case binary.BigEndian.Uint32(h[0:]) == magicNano:
		rd.order, rd.nano = binary.BigEndian, true
	case binary.BigEndian.Uint32(h[0:]) == magicMicro:
		rd.order = binary.BigEndian
	default:
		return nil, fmt.Errorf("%w: magic %#x", ErrFormat, h[0:4])
	}
	if v := rd.order.Uint16(h[4:]); v != 2 {
		return nil, fmt.Errorf("%w: version %d", ErrFormat, v)
	}
	rd.snapLen = rd.order.Uint32(h[16:])
	rd.linkType = rd.order.Uint32(h[20:])
	if rd.snapLen == 0 || rd.snapLen > MaxSnapLen {
		return nil, fmt.Errorf("%w: snapshot length %d", ErrFormat, rd.snapLen)
	}
	return rd, nil
}

// LinkType is the link type of the file's frames.
func (r *Reader) LinkType() uint32 { return r.linkType }

// Packet is one record of a file.
type Packet struct {
	Time    time.Time
	Data    []byte // the bytes captured
	OrigLen int    // the frame's length on the wire
}

// Next reads the next record; io.EOF after the last. The Data of the
// returned packet is a new slice.
func (r *Reader) Next() (Packet, error) {
	if _, err := io.ReadFull(r.r, r.hdr[:]); err != nil {
		if err == io.EOF {
			return Packet{}, io.EOF
		}
		return Packet{}, fmt.Errorf("%w: record header: %w", ErrFormat, err)
	}
	sec, frac := r.order.Uint32(r.hdr[0:]), r.order.Uint32(r.hdr[4:])
	incl, orig := r.order.Uint32(r.hdr[8:]), r.order.Uint32(r.hdr[12:])
	if incl > r.snapLen || incl > orig {
		return Packet{}, fmt.Errorf("%w: record of %d bytes (frame %d, snapshot length %d)", ErrFormat, incl, orig, r.snapLen)
	}
	if !r.nano {
		frac *= 1000
	}
	if frac >= 1e9 {
		return Packet{}, fmt.Errorf("%w: timestamp fraction %d", ErrFormat, frac)
	}
	p := Packet{Time: time.Unix(int64(sec), int64(frac)), Data: make([]byte, incl), OrigLen: int(orig)}
	if _, err := io.ReadFull(r.r, p.Data); err != nil {
		return Packet{}, fmt.Errorf("%w: record data: %w", ErrFormat, io.ErrUnexpectedEOF)
	}
	return p, nil
}
