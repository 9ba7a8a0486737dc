package verbsbench

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"time"
	"unicode/utf8"

	"github.com/rsock-go/rsock/verbs"
)

// Control frames. Every frame is an 8-byte header followed by a payload:
//
//	0   4  magic "RSVB"
//	4   1  version (ProtoVersion)
//	5   1  type (FrameHello … FrameBye)
//	6   2  payload length, big-endian, at most MaxPayload
//
// Each frame type has a fixed payload length (ParamsLen, DoneLen,
// ReportLen, 0 for Bye) except Error, whose payload is 1 to MaxErrorText
// bytes of UTF-8 text.
const (
	ProtoVersion = 1
	HeaderLen    = 8
	// MaxPayload bounds the payload of any frame.
	MaxPayload = 512
	// MaxErrorText bounds the text of an Error frame.
	MaxErrorText = 480
)

var magic = [4]byte{'R', 'S', 'V', 'B'}

// FrameType is the type byte of a control frame.
type FrameType uint8

// Frame types.
const (
	FrameHello  FrameType = 1 // client → server: Params of the client
	FrameAccept FrameType = 2 // server → client: Params of the server
	FrameDone   FrameType = 3 // client → server: Done
	FrameReport FrameType = 4 // server → client: Report
	FrameError  FrameType = 5 // either way: the sender gives up, with a reason
	FrameBye    FrameType = 6 // client → server: no more tests
)

func (t FrameType) String() string {
	switch t {
	case FrameHello:
		return "Hello"
	case FrameAccept:
		return "Accept"
	case FrameDone:
		return "Done"
	case FrameReport:
		return "Report"
	case FrameError:
		return "Error"
	case FrameBye:
		return "Bye"
	}
	return fmt.Sprintf("FrameType(%d)", uint8(t))
}

// Payload lengths of the fixed-size frames.
const (
	ParamsLen = 82
	DoneLen   = 16
	ReportLen = 64
)

// ErrProtocol is wrapped by every error about a malformed control frame.
var ErrProtocol = errors.New("verbsbench: protocol error")

func protoErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrProtocol, fmt.Sprintf(format, args...))
}

// WriteFrame writes one frame. The payload must fit MaxPayload.
func WriteFrame(w io.Writer, t FrameType, payload []byte) error {
	if len(payload) > MaxPayload {
		return protoErr("%v payload of %d bytes exceeds %d", t, len(payload), MaxPayload)
	}
	b := make([]byte, HeaderLen+len(payload))
	copy(b, magic[:])
	b[4] = ProtoVersion
	b[5] = byte(t)
	binary.BigEndian.PutUint16(b[6:], uint16(len(payload)))
	copy(b[HeaderLen:], payload)
	_, err := w.Write(b)
	return err
}

// ReadFrame reads one frame and checks its header and payload length. It
// never reads more than HeaderLen+MaxPayload bytes. Errors about the
// content wrap ErrProtocol; I/O errors are returned as they are (io.EOF
// when the stream ends cleanly before a frame).
func ReadFrame(r io.Reader) (FrameType, []byte, error) {
	var h [HeaderLen]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return 0, nil, protoErr("truncated frame header")
		}
		return 0, nil, err
	}
	if [4]byte(h[:4]) != magic {
		return 0, nil, protoErr("bad magic %q", h[:4])
	}
	if h[4] != ProtoVersion {
		return 0, nil, protoErr("unsupported version %d (want %d)", h[4], ProtoVersion)
	}
	t := FrameType(h[5])
	n := int(binary.BigEndian.Uint16(h[6:]))
	if n > MaxPayload {
		return 0, nil, protoErr("%v payload of %d bytes exceeds %d", t, n, MaxPayload)
	}
	want := -1
	switch t {
	case FrameHello, FrameAccept:
		want = ParamsLen
	case FrameDone:
		want = DoneLen
	case FrameReport:
		want = ReportLen
	case FrameBye:
		want = 0
	case FrameError:
		if n == 0 || n > MaxErrorText {
			return 0, nil, protoErr("Error text of %d bytes (1 to %d allowed)", n, MaxErrorText)
		}
	default:
		return 0, nil, protoErr("unknown frame type %d", uint8(t))
	}
	if want >= 0 && n != want {
		return 0, nil, protoErr("%v payload of %d bytes, want %d", t, n, want)
	}
	p := make([]byte, n)
	if _, err := io.ReadFull(r, p); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return 0, nil, protoErr("truncated %v frame", t)
		}
		return 0, nil, err
	}
	if t == FrameError && !utf8.Valid(p) {
		return 0, nil, protoErr("Error text is not UTF-8")
	}
	return t, p, nil
}

// ErrorText returns the payload of an Error frame for msg, truncated to
// MaxErrorText bytes on a UTF-8 boundary.
func ErrorText(msg string) []byte {
	if msg == "" {
		msg = "unknown error"
	}
	for len(msg) > MaxErrorText {
		_, size := utf8.DecodeLastRuneInString(msg)
		msg = msg[:len(msg)-size]
	}
	if !utf8.ValidString(msg) {
		msg = string([]rune(msg)) // replace invalid bytes with U+FFFD
		for len(msg) > MaxErrorText {
			_, size := utf8.DecodeLastRuneInString(msg)
			msg = msg[:len(msg)-size]
		}
	}
	return []byte(msg)
}

// Limits checked by DecodeParams.
const (
	MaxSize     = 1 << 30        // largest message
	MaxBuffer   = 1 << 31        // largest advertised memory region
	MaxDepth    = 16384          // largest tx-depth, rx-depth
	MaxIters    = 1 << 40        // most iterations
	MaxDuration = 24 * time.Hour // longest timed test
	MaxOuts     = 128            // most outstanding READs
	psnMask     = 1<<24 - 1      // QPNs and PSNs are 24 bits
)

// Params is the payload of Hello and Accept: the test settings (chosen by
// the client, echoed by the server) and the sender's side of the
// connection. Encoded big-endian, ParamsLen bytes:
//
//	off len field
//	 0   1  Test
//	 1   1  Outs
//	 2   2  MTU (bytes)
//	 4   4  Size
//	 8   8  Iters
//	16   8  Duration (ns)
//	24   4  TxDepth
//	28   4  RxDepth
//	32   4  CQMod
//	36   4  QPN
//	40   4  PSN
//	44  16  GID
//	60   2  Port (UDP)
//	62   8  Addr (MR virtual address)
//	70   4  RKey
//	74   8  Len (MR length)
type Params struct {
	Test     Test
	Outs     int // READs in flight (read_bw)
	MTU      int // path MTU in bytes
	Size     int // message size in bytes
	Iters    uint64
	Duration time.Duration
	TxDepth  int
	RxDepth  int
	CQMod    int // signal every CQMod-th send

	QPN  uint32
	PSN  uint32
	GID  verbs.GID
	Port uint16 // the sender's RoCE UDP port
	Addr uint64 // memory region address
	RKey uint32
	Len  uint64 // memory region length
}

// Encode returns the ParamsLen-byte encoding of p.
func (p *Params) Encode() []byte {
	b := make([]byte, ParamsLen)
	be := binary.BigEndian
	b[0] = byte(p.Test)
	b[1] = byte(p.Outs)
	be.PutUint16(b[2:], uint16(p.MTU))
	be.PutUint32(b[4:], uint32(p.Size))
	be.PutUint64(b[8:], p.Iters)
	be.PutUint64(b[16:], uint64(p.Duration))
	be.PutUint32(b[24:], uint32(p.TxDepth))
	be.PutUint32(b[28:], uint32(p.RxDepth))
	be.PutUint32(b[32:], uint32(p.CQMod))
	be.PutUint32(b[36:], p.QPN)
	be.PutUint32(b[40:], p.PSN)
	copy(b[44:60], p.GID[:])
	be.PutUint16(b[60:], p.Port)
	be.PutUint64(b[62:], p.Addr)
	be.PutUint32(b[70:], p.RKey)
	be.PutUint64(b[74:], p.Len)
	return b
}

// DecodeParams parses and validates a Hello or Accept payload.
func DecodeParams(b []byte) (Params, error) {
	if len(b) != ParamsLen {
		return Params{}, protoErr("params of %d bytes, want %d", len(b), ParamsLen)
	}
	be := binary.BigEndian
	dur := be.Uint64(b[16:])
	if dur > uint64(MaxDuration) {
		return Params{}, protoErr("duration %d ns exceeds %v", dur, MaxDuration)
	}
	p := Params{
		Test:     Test(b[0]),
		Outs:     int(b[1]),
		MTU:      int(be.Uint16(b[2:])),
		Size:     int(be.Uint32(b[4:])),
		Iters:    be.Uint64(b[8:]),
		Duration: time.Duration(dur),
		TxDepth:  int(be.Uint32(b[24:])),
		RxDepth:  int(be.Uint32(b[28:])),
		CQMod:    int(be.Uint32(b[32:])),
		QPN:      be.Uint32(b[36:]),
		PSN:      be.Uint32(b[40:]),
		GID:      verbs.GID(b[44:60]),
		Port:     be.Uint16(b[60:]),
		Addr:     be.Uint64(b[62:]),
		RKey:     be.Uint32(b[70:]),
		Len:      be.Uint64(b[74:]),
	}
	if err := p.Validate(); err != nil {
		return Params{}, err
	}
	return p, nil
}

// Validate checks every field against the protocol's limits.
func (p *Params) Validate() error {
	switch {
	case !p.Test.Valid():
		return protoErr("unknown test %d", uint8(p.Test))
	case p.Outs < 1 || p.Outs > MaxOuts:
		return protoErr("outstanding reads %d (1 to %d allowed)", p.Outs, MaxOuts)
	case verbs.MTUFromBytes(p.MTU).Bytes() != p.MTU:
		return protoErr("MTU %d is not one of 256, 512, 1024, 2048, 4096", p.MTU)
	case p.Size < 1 || p.Size > MaxSize:
		return protoErr("size %d (1 to %d allowed)", p.Size, MaxSize)
	case p.Iters > MaxIters:
		return protoErr("iterations %d exceed %d", p.Iters, uint64(MaxIters))
	case p.Duration < 0 || p.Duration > MaxDuration:
		return protoErr("duration %v (up to %v allowed)", p.Duration, MaxDuration)
	case (p.Iters == 0) == (p.Duration == 0):
		return protoErr("exactly one of iterations (%d) and duration (%v) must be set", p.Iters, p.Duration)
	case p.TxDepth < 1 || p.TxDepth > MaxDepth:
		return protoErr("tx-depth %d (1 to %d allowed)", p.TxDepth, MaxDepth)
	case p.RxDepth < 1 || p.RxDepth > MaxDepth:
		return protoErr("rx-depth %d (1 to %d allowed)", p.RxDepth, MaxDepth)
	case p.CQMod < 1 || p.CQMod > p.TxDepth:
		return protoErr("cq-mod %d (1 to tx-depth %d allowed)", p.CQMod, p.TxDepth)
	case p.QPN == 0 || p.QPN > psnMask:
		return protoErr("QPN %#x out of range", p.QPN)
	case p.PSN > psnMask:
		return protoErr("PSN %#x out of range", p.PSN)
	case !p.GID.Addr().IsValid() || p.GID.Addr().IsUnspecified() || p.GID.Addr().IsMulticast():
		return protoErr("GID %v is not a unicast address", p.GID)
	case p.Port == 0:
		return protoErr("UDP port 0")
	case p.Len < uint64(p.Size) || p.Len > MaxBuffer:
		return protoErr("memory region of %d bytes for messages of %d (up to %d allowed)", p.Len, p.Size, uint64(MaxBuffer))
	case p.Addr+p.Len < p.Addr:
		return protoErr("memory region %#x+%d wraps", p.Addr, p.Len)
	}
	return nil
}

// RoCEAddr is the sender's RoCE link address (GID and UDP port).
func (p *Params) RoCEAddr() netip.AddrPort { return netip.AddrPortFrom(p.GID.Addr(), p.Port) }

// sameTest reports whether q carries the same test settings as p.
func (p *Params) sameTest(q *Params) bool {
	return p.Test == q.Test && p.Outs == q.Outs && p.MTU == q.MTU && p.Size == q.Size && p.Iters == q.Iters &&
		p.Duration == q.Duration && p.TxDepth == q.TxDepth && p.RxDepth == q.RxDepth && p.CQMod == q.CQMod
}

// Done is the payload of the client's Done frame: what it transferred.
// Encoded as two big-endian uint64s.
type Done struct {
	Msgs  uint64 // completed operations (round trips for write_lat)
	Bytes uint64
}

// Encode returns the DoneLen-byte encoding of d.
func (d *Done) Encode() []byte {
	b := make([]byte, DoneLen)
	binary.BigEndian.PutUint64(b, d.Msgs)
	binary.BigEndian.PutUint64(b[8:], d.Bytes)
	return b
}

// DecodeDone parses a Done payload.
func DecodeDone(b []byte) (Done, error) {
	if len(b) != DoneLen {
		return Done{}, protoErr("Done of %d bytes, want %d", len(b), DoneLen)
	}
	d := Done{Msgs: binary.BigEndian.Uint64(b), Bytes: binary.BigEndian.Uint64(b[8:])}
	if d.Msgs > MaxIters {
		return Done{}, protoErr("Done reports %d messages", d.Msgs)
	}
	return d, nil
}

// Report is the payload of the server's Report frame: its side of a test.
// Encoded as eight big-endian uint64s in field order.
type Report struct {
	Msgs        uint64 // receive completions (send_bw) or answers (write_lat)
	Bytes       uint64 // bytes received in those completions
	Verified    uint64 // bytes of received data checked against the pattern
	Retransmits uint64
	Timeouts    uint64
	RNRNAKs     uint64 // RNR NAKs sent
	CPUUser     time.Duration
	CPUSys      time.Duration
}

// Encode returns the ReportLen-byte encoding of r.
func (r *Report) Encode() []byte {
	b := make([]byte, ReportLen)
	for i, v := range [...]uint64{r.Msgs, r.Bytes, r.Verified, r.Retransmits, r.Timeouts, r.RNRNAKs,
		uint64(r.CPUUser), uint64(r.CPUSys)} {
		binary.BigEndian.PutUint64(b[8*i:], v)
	}
	return b
}

// DecodeReport parses a Report payload.
func DecodeReport(b []byte) (Report, error) {
	if len(b) != ReportLen {
		return Report{}, protoErr("Report of %d bytes, want %d", len(b), ReportLen)
	}
	var v [8]uint64
	for i := range v {
		v[i] = binary.BigEndian.Uint64(b[8*i:])
	}
	if v[6] > 1<<62 || v[7] > 1<<62 {
		return Report{}, protoErr("Report CPU time out of range")
	}
	return Report{Msgs: v[0], Bytes: v[1], Verified: v[2], Retransmits: v[3], Timeouts: v[4], RNRNAKs: v[5],
		CPUUser: time.Duration(v[6]), CPUSys: time.Duration(v[7])}, nil
}
