// Package fallback implements the TCP side of an rsock connection: the
// connection preface, the Hello/Reply negotiation frames, a sniffing listener
// that tells rsock dialers apart from plain TCP clients, and the helpers a
// dialer needs to fall back to plain TCP.
//
// Every rsock connection starts as a TCP connection. The dialer sends
// [Preface] followed by a Hello frame describing its RDMA endpoint. The
// listener answers with a Reply frame (Accept with its own Hello, or Decline
// with a reason). Whatever the outcome, the TCP connection stays open: as the
// liveness channel while data moves over RDMA (a same-host shm connection,
// whose channel tells liveness, closes it after the handshake), or as the
// data path itself when RDMA is not possible.
//
// The package knows nothing about RDMA verbs. The Hello fields are carried
// and range-checked, not interpreted.
//
// # Wire format
//
// All integers are big endian. A frame is an 8-byte header followed by a body:
//
//	offset size field
//	0      2    magic 0xD2 0xCB (not valid UTF-8, not the start of any text protocol)
//	2      2    version (currently 1, see [Version])
//	4      1    type: 1 = Hello, 2 = Reply
//	5      1    reserved, sent as 0, ignored on receipt
//	6      2    body length, at most [MaxFrameSize]-8 bytes
//
// A Hello body (version 1) is 56 bytes plus the two strings:
//
//	0   4   Capabilities
//	4   16  GID
//	20  2   UDPPort
//	22  4   QPN
//	26  4   PSN
//	30  4   MTU
//	34  8   RingAddr
//	42  4   RingRKey
//	46  4   RingSize
//	50  4   RecvDepth
//	54  1+n Provider: length byte, then n bytes
//	..  1+m Link: length byte, then m bytes
//	..      extensions, in capability bit order, each present only when
//	        its bit is set; bytes after the known ones are skipped:
//	        CapMemif: 1+s MemifSocket, then 1+t MemifSecret
//	        CapShm: 1+u ShmSocket, then 8 ShmChannel, then 16 ShmToken
//	        CapPacketMTU: 2 PacketMTU
//
// A Reply body (version 1):
//
//	0   1   status: 0 = Decline, 1 = Accept
//	1   1+n Reason: length byte, then n bytes of UTF-8
//	..      Accept only: a Hello body as above (its Version is the frame's version)
//
// Decoders read exactly one frame and never read past its end, so the bytes
// that follow on the stream are left for the caller.
package fallback

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// Version is the version of the preface and of the frame layout this package
// speaks. Feature negotiation within a version uses capability bits.
const Version = 1

// Capability bits carried in Hello.Capabilities.
const (
	// CapStream means the sender can run one rsock byte stream over one RC QP.
	CapStream uint32 = 1 << 0
	// CapSelectiveRepeat means the sender's queue pair places packets that
	// arrive past a gap and recovers losses selectively (selective NAKs);
	// both sides must send it for the connection to use it.
	CapSelectiveRepeat uint32 = 1 << 1
	// CapMemif means the sender, on the same host as its peer, offers a
	// shared-memory memif link: the Hello's MemifSocket and MemifSecret
	// say where to connect as memif client, and the peer answers with a
	// Hello whose Link is "memif" when it did.
	CapMemif uint32 = 1 << 2
	// CapCongestionControl means the sender's queue pair runs rsock's
	// congestion controller and pacing on top of selective repeat; both
	// sides must send it (and CapSelectiveRepeat) for the connection to
	// use it.
	CapCongestionControl uint32 = 1 << 3
	// CapShm means the sender, on the same host as its peer, offers a
	// verbs/shm channel: a fresh one on the abstract socket ShmSocket, or
	// the live channel ShmChannel between the two processes; the peer
	// answers with a Hello whose Provider and Link are "shm" when it took
	// it (and, when it reused a channel, ShmChannel and its own
	// ShmToken).
	CapShm uint32 = 1 << 4
	// CapECN means the sender's queue pair sends its packets ECN-capable,
	// echoes CE marks and reacts to echoed ones, on top of congestion
	// control; both sides must send it (and CapCongestionControl) for the
	// connection to use it.
	CapECN uint32 = 1 << 5
	// CapWideSACK means the sender's queue pair, with selective repeat,
	// tracks and reports in its selective NAKs up to 4096 PSNs past a gap
	// (a 512-byte bitmap, no more than a payload of the path MTU holds)
	// and reads as much, so that it may keep up to 2048 packets in flight
	// instead of 512; both sides must send it (and CapSelectiveRepeat)
	// for the connection to use it. It carries no extension bytes.
	CapWideSACK uint32 = 1 << 6
	// CapDuplicateEcho means the sender's queue pair, with congestion
	// control, echoes the count of duplicate requests it receives and
	// learns from the peer's echoes which of its resends were spurious
	// (rsock's DSACK); both sides must send it (and CapCongestionControl)
	// for the connection to use it. It carries no extension bytes.
	CapDuplicateEcho uint32 = 1 << 7
	// CapPacketMTU means the sender's queue pair can carry PacketMTU
	// bytes of payload per packet, a size the IBTA's path MTUs (powers of
	// two) do not name: 1408 on an Ethernet path of 1500, where the path
	// MTU is 1024. When both sides send it, the connection's packets carry
	// the smaller of the two PacketMTUs (when that beats the path MTU).
	// Its extension is the 2-byte PacketMTU.
	CapPacketMTU uint32 = 1 << 8
	// CapHoldEcho means the sender's queue pair, with congestion control,
	// echoes how long it held requests before it acknowledged them, and
	// its controller learns the holds of both hosts; both sides must send
	// it (and CapCongestionControl) for the connection to use it. It
	// carries no extension bytes.
	CapHoldEcho uint32 = 1 << 9
)

// Limits of the wire format.
const (
	// MaxFrameSize is the largest frame, header included, that the decoders accept.
	MaxFrameSize = 512
	// MaxNameLen is the longest Provider or Link string.
	MaxNameLen = 32
	// MaxReasonLen is the longest Reply.Reason.
	MaxReasonLen = 128
	// MinMTU and MaxMTU bound Hello.MTU and Hello.PacketMTU.
	MinMTU = 256
	MaxMTU = 4096
	// PacketMTUAlign divides Hello.PacketMTU.
	PacketMTUAlign = 64
	// MinRingSize and MaxRingSize bound Hello.RingSize.
	MinRingSize = 4 << 10
	MaxRingSize = 64 << 20
	// MaxRecvDepth bounds Hello.RecvDepth.
	MaxRecvDepth = 65536
	// MaxMemifSocketLen bounds Hello.MemifSocket (a Unix socket path, or
	// an abstract name starting with '@').
	MaxMemifSocketLen = 107
	// MaxMemifSecretLen bounds Hello.MemifSecret (memif's INIT carries 24
	// bytes, NUL-terminated).
	MaxMemifSecretLen = 23
	// MaxShmSocketLen bounds Hello.ShmSocket (an abstract socket name,
	// without the leading '@').
	MaxShmSocketLen = 64
)

const (
	headerSize     = 8
	maxBodySize    = MaxFrameSize - headerSize
	helloFixedSize = 54
	minHelloBody   = helloFixedSize + 2
	frameHello     = 1
	frameReply     = 2
	magic0         = 0xD2
	magic1         = 0xCB
	prefaceVerIdx  = 6
)

// Preface is the fixed magic an rsock dialer sends first, like HTTP/2's
// connection preface. Byte 6 is the version ([Version]); a listener that sees
// the other 15 bytes with a different version declines the connection instead
// of treating it as plain TCP.
var Preface = [16]byte{
	'R', 'S', 'O', 'C', 'K', 0x00, Version, '\r',
	'\n', 0x00, 0xFF, 0xFE, 0xFD, 0xFC, '\r', '\n',
}

// Errors returned by the decoders. They are matched with errors.Is; the
// returned errors carry details in their messages.
var (
	// ErrNotRsock means the peer answered with bytes that are not an rsock
	// frame: it is most likely a plain TCP server.
	ErrNotRsock = errors.New("fallback: peer does not speak rsock")
	// ErrEcho means a reply began like our own preface: a plain server
	// echoing it, or an rsock listener that stopped sniffing before the
	// preface arrived and serves the connection as plain TCP. It matches
	// ErrNotRsock too.
	ErrEcho = fmt.Errorf("%w: it echoed the preface", ErrNotRsock)
	// ErrVersion means the peer uses a preface or frame version this package
	// does not speak.
	ErrVersion = errors.New("fallback: unsupported version")
	// ErrMalformed means a frame is badly formed or carries values out of range.
	ErrMalformed = errors.New("fallback: malformed frame")
)

// protoError is a decoding error of kind ErrNotRsock, ErrVersion or ErrMalformed.
type protoError struct {
	kind error
	msg  string
}

func (e *protoError) Error() string { return "fallback: " + e.msg }
func (e *protoError) Unwrap() error { return e.kind }

func errorf(kind error, format string, args ...any) error {
	return &protoError{kind: kind, msg: fmt.Sprintf(format, args...)}
}

// FieldError reports a Hello or Reply field whose value is out of range. It
// matches ErrVersion (for the Version field) or ErrMalformed with errors.Is.
type FieldError struct {
	Field  string // name of the Go struct field, e.g. "MTU"
	Reason string // what is wrong with it
	kind   error
}

func (e *FieldError) Error() string {
	return "fallback: invalid " + e.Field + ": " + e.Reason
}

// Unwrap returns ErrVersion or ErrMalformed.
func (e *FieldError) Unwrap() error {
	if e.kind == nil {
		return ErrMalformed
	}
	return e.kind
}

func fieldErr(field, format string, args ...any) error {
	return &FieldError{Field: field, Reason: fmt.Sprintf(format, args...), kind: ErrMalformed}
}

// Hello is what each side tells the other about its RDMA endpoint.
type Hello struct {
	Version      uint16   // frame layout version; must equal Version
	Capabilities uint32   // bit set of Cap* values; unknown bits are allowed
	Provider     string   // verbs provider, e.g. "softroce", "rdmacore"; 1..32 printable ASCII bytes
	Link         string   // link layer, e.g. "udp", "dpdk"; 1..32 printable ASCII bytes
	GID          [16]byte // RoCEv2 GID (IPv4-mapped IPv6 address); unicast, not zero
	UDPPort      uint16   // soft-RoCE UDP port (4791 or ephemeral); not zero
	QPN          uint32   // queue pair number, 24 bits; 2..0xFFFFFE
	PSN          uint32   // initial packet sequence number, 24 bits
	MTU          uint32   // path MTU in bytes: a power of two in 256..4096
	RingAddr     uint64   // receive ring virtual address; RingAddr+RingSize must not overflow
	RingRKey     uint32   // receive ring remote key (opaque)
	RingSize     uint32   // receive ring bytes: a power of two in 4 KiB..64 MiB
	RecvDepth    uint32   // receive WQEs posted: 1..65536

	// With CapMemif: the memif socket the peer may connect to, and the
	// secret it must present. Printable ASCII, 1..MaxMemifSocketLen and
	// 1..MaxMemifSecretLen bytes.
	MemifSocket string
	MemifSecret string
	// With CapShm: the abstract socket name (printable ASCII, at most
	// MaxShmSocketLen bytes) of a new channel to dial, or the ID of a live
	// channel to reuse (non-zero); exactly one of the two is set.
	ShmSocket  string
	ShmChannel uint64
	// ShmToken, with ShmChannel, is the fresh random token that binds
	// this connection to the channel: the sender sent a binding derived
	// from it and the connection's addresses over the channel. Non-zero
	// with ShmChannel, zero with ShmSocket.
	ShmToken [16]byte
	// With CapPacketMTU: payload bytes per packet the sender's path
	// carries, a multiple of PacketMTUAlign in MinMTU..MaxMTU; zero
	// without it.
	PacketMTU uint16
}

func isPow2(v uint32) bool { return v != 0 && v&(v-1) == 0 }

func checkName(field, s string) error { return checkPrintable(field, s, MaxNameLen) }

// checkPrintable checks that s is 1..max bytes of printable ASCII.
func checkPrintable(field, s string, max int) error {
	if len(s) == 0 {
		return fieldErr(field, "empty")
	}
	if len(s) > max {
		return fieldErr(field, "%d bytes, at most %d allowed", len(s), max)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7E {
			return fieldErr(field, "byte %d is %#02x, want printable ASCII", i, s[i])
		}
	}
	return nil
}

// Validate reports whether every field of h is in range. The error is a
// *FieldError naming the first offending field.
func (h *Hello) Validate() error {
	if h == nil {
		return fieldErr("Hello", "nil")
	}
	if h.Version != Version {
		return &FieldError{Field: "Version", Reason: fmt.Sprintf("%d, this side speaks %d", h.Version, Version), kind: ErrVersion}
	}
	if err := checkName("Provider", h.Provider); err != nil {
		return err
	}
	if err := checkName("Link", h.Link); err != nil {
		return err
	}
	if h.GID == ([16]byte{}) {
		return fieldErr("GID", "all zero")
	}
	if h.GID[0] == 0xFF {
		return fieldErr("GID", "multicast, want unicast")
	}
	if h.UDPPort == 0 {
		return fieldErr("UDPPort", "zero")
	}
	if h.QPN >= 1<<24 {
		return fieldErr("QPN", "%#x does not fit in 24 bits", h.QPN)
	}
	if h.QPN < 2 || h.QPN == 1<<24-1 {
		return fieldErr("QPN", "%#x is reserved", h.QPN)
	}
	if h.PSN >= 1<<24 {
		return fieldErr("PSN", "%#x does not fit in 24 bits", h.PSN)
	}
	if h.MTU < MinMTU || h.MTU > MaxMTU || !isPow2(h.MTU) {
		return fieldErr("MTU", "%d, want a power of two in %d..%d", h.MTU, MinMTU, MaxMTU)
	}
	if h.RingSize < MinRingSize || h.RingSize > MaxRingSize || !isPow2(h.RingSize) {
		return fieldErr("RingSize", "%d, want a power of two in %d..%d", h.RingSize, MinRingSize, MaxRingSize)
	}
	if h.RingAddr+uint64(h.RingSize)-1 < h.RingAddr { // last byte beyond 2^64-1
		return fieldErr("RingAddr", "%#x plus ring size %d overflows", h.RingAddr, h.RingSize)
	}
	if h.RecvDepth < 1 || h.RecvDepth > MaxRecvDepth {
		return fieldErr("RecvDepth", "%d, want 1..%d", h.RecvDepth, MaxRecvDepth)
	}
	if h.Capabilities&CapMemif != 0 {
		if err := checkPrintable("MemifSocket", h.MemifSocket, MaxMemifSocketLen); err != nil {
			return err
		}
		if err := checkPrintable("MemifSecret", h.MemifSecret, MaxMemifSecretLen); err != nil {
			return err
		}
	} else if h.MemifSocket != "" || h.MemifSecret != "" {
		return fieldErr("MemifSocket", "set without CapMemif")
	}
	if h.Capabilities&CapShm != 0 {
		switch {
		case h.ShmSocket == "" && h.ShmChannel == 0:
			return fieldErr("ShmSocket", "neither a socket nor a channel with CapShm")
		case h.ShmSocket != "" && h.ShmChannel != 0:
			return fieldErr("ShmSocket", "both a socket and a channel")
		case h.ShmSocket != "":
			if err := checkPrintable("ShmSocket", h.ShmSocket, MaxShmSocketLen); err != nil {
				return err
			}
			if h.ShmToken != ([16]byte{}) {
				return fieldErr("ShmToken", "set with a socket")
			}
		case h.ShmToken == ([16]byte{}):
			return fieldErr("ShmToken", "zero with a channel")
		}
	} else if h.ShmSocket != "" || h.ShmChannel != 0 || h.ShmToken != ([16]byte{}) {
		return fieldErr("ShmSocket", "set without CapShm")
	}
	if h.Capabilities&CapPacketMTU != 0 {
		if h.PacketMTU < MinMTU || h.PacketMTU > MaxMTU || h.PacketMTU%PacketMTUAlign != 0 {
			return fieldErr("PacketMTU", "%d, want a multiple of %d in %d..%d", h.PacketMTU, PacketMTUAlign, MinMTU, MaxMTU)
		}
	} else if h.PacketMTU != 0 {
		return fieldErr("PacketMTU", "set without CapPacketMTU")
	}
	return nil
}

func appendHeader(b []byte, version uint16, typ byte, bodyLen int) []byte {
	if bodyLen > 0xFFFF {
		bodyLen = 0xFFFF // unreachable for well-formed input; the decoder rejects it anyway
	}
	b = append(b, magic0, magic1)
	b = binary.BigEndian.AppendUint16(b, version)
	b = append(b, typ, 0)
	return binary.BigEndian.AppendUint16(b, uint16(bodyLen))
}

func appendString(b []byte, s string) []byte {
	if len(s) > 255 {
		s = s[:255]
	}
	b = append(b, byte(len(s)))
	return append(b, s...)
}

func appendHelloBody(b []byte, h *Hello) []byte {
	be := binary.BigEndian
	b = be.AppendUint32(b, h.Capabilities)
	b = append(b, h.GID[:]...)
	b = be.AppendUint16(b, h.UDPPort)
	b = be.AppendUint32(b, h.QPN)
	b = be.AppendUint32(b, h.PSN)
	b = be.AppendUint32(b, h.MTU)
	b = be.AppendUint64(b, h.RingAddr)
	b = be.AppendUint32(b, h.RingRKey)
	b = be.AppendUint32(b, h.RingSize)
	b = be.AppendUint32(b, h.RecvDepth)
	b = appendString(b, h.Provider)
	b = appendString(b, h.Link)
	if h.Capabilities&CapMemif != 0 {
		b = appendString(b, h.MemifSocket)
		b = appendString(b, h.MemifSecret)
	}
	if h.Capabilities&CapShm != 0 {
		b = appendString(b, h.ShmSocket)
		b = be.AppendUint64(b, h.ShmChannel)
		b = append(b, h.ShmToken[:]...)
	}
	if h.Capabilities&CapPacketMTU != 0 {
		b = be.AppendUint16(b, h.PacketMTU)
	}
	return b
}

// AppendHello appends h, encoded as a Hello frame, to b and returns the
// extended slice. It does not validate h: an invalid Hello yields a frame that
// ReadHello rejects. Use WritePrefaceAndHello to validate and send.
func AppendHello(b []byte, h *Hello) []byte {
	start := len(b)
	b = appendHeader(b, h.Version, frameHello, 0)
	b = appendHelloBody(b, h)
	binary.BigEndian.PutUint16(b[start+6:], uint16(min(len(b)-start-headerSize, 0xFFFF)))
	return b
}

// readFrame reads one frame header and body of type typ. For a reply, bytes
// that are not a frame header yield ErrNotRsock; for a hello, ErrMalformed.
// It allocates at most one buffer of maxBodySize bytes.
func readFrame(r io.Reader, typ byte, what string) (uint16, []byte, error) {
	notFrame := ErrMalformed
	if typ == frameReply {
		notFrame = ErrNotRsock
	}
	var hdr [headerSize]byte
	// Check the magic byte by byte, so that a plain server that answers
	// with a short line and waits is recognised without waiting for more.
	for i, m := range [2]byte{magic0, magic1} {
		if _, err := io.ReadFull(r, hdr[i:i+1]); err != nil {
			return 0, nil, readErr(what, err)
		}
		if hdr[i] != m {
			if typ == frameReply && i == 0 && hdr[0] == Preface[0] {
				return 0, nil, errorf(ErrEcho, "reading %s: got %q, the start of our own preface", what, hdr[:1])
			}
			return 0, nil, errorf(notFrame, "reading %s: got %q, not an rsock frame", what, hdr[:i+1])
		}
	}
	if _, err := io.ReadFull(r, hdr[2:]); err != nil {
		return 0, nil, readErr(what, err)
	}
	version := binary.BigEndian.Uint16(hdr[2:])
	if version != Version {
		return version, nil, errorf(ErrVersion, "reading %s: frame version %d, this side speaks %d", what, version, Version)
	}
	if hdr[4] != typ {
		return version, nil, errorf(ErrMalformed, "reading %s: frame type %d, want %d", what, hdr[4], typ)
	}
	n := int(binary.BigEndian.Uint16(hdr[6:]))
	if n > maxBodySize {
		return version, nil, errorf(ErrMalformed, "reading %s: body length %d exceeds %d", what, n, maxBodySize)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return version, nil, readErr(what, err)
	}
	return version, body, nil
}

// readErr wraps an I/O error. A clean EOF is reported as io.ErrUnexpectedEOF:
// a frame was expected.
func readErr(what string, err error) error {
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("fallback: reading %s: %w", what, err)
}

func takeString(p []byte, field string, max int) (string, []byte, error) {
	if len(p) < 1 {
		return "", nil, errorf(ErrMalformed, "%s length missing", field)
	}
	n := int(p[0])
	if n > max {
		return "", nil, fieldErr(field, "length %d, at most %d allowed", n, max)
	}
	if n > len(p)-1 {
		return "", nil, errorf(ErrMalformed, "%s length %d overruns the frame", field, n)
	}
	return string(p[1 : 1+n]), p[1+n:], nil
}

func parseHelloBody(version uint16, p []byte) (*Hello, error) {
	if len(p) < minHelloBody {
		return nil, errorf(ErrMalformed, "hello body is %d bytes, want at least %d", len(p), minHelloBody)
	}
	be := binary.BigEndian
	h := &Hello{Version: version}
	h.Capabilities = be.Uint32(p[0:])
	copy(h.GID[:], p[4:20])
	h.UDPPort = be.Uint16(p[20:])
	h.QPN = be.Uint32(p[22:])
	h.PSN = be.Uint32(p[26:])
	h.MTU = be.Uint32(p[30:])
	h.RingAddr = be.Uint64(p[34:])
	h.RingRKey = be.Uint32(p[42:])
	h.RingSize = be.Uint32(p[46:])
	h.RecvDepth = be.Uint32(p[50:])
	var err error
	rest := p[helloFixedSize:]
	if h.Provider, rest, err = takeString(rest, "Provider", MaxNameLen); err != nil {
		return nil, err
	}
	if h.Link, rest, err = takeString(rest, "Link", MaxNameLen); err != nil {
		return nil, err
	}
	if h.Capabilities&CapMemif != 0 {
		if h.MemifSocket, rest, err = takeString(rest, "MemifSocket", MaxMemifSocketLen); err != nil {
			return nil, err
		}
		if h.MemifSecret, rest, err = takeString(rest, "MemifSecret", MaxMemifSecretLen); err != nil {
			return nil, err
		}
	}
	if h.Capabilities&CapShm != 0 {
		if h.ShmSocket, rest, err = takeString(rest, "ShmSocket", MaxShmSocketLen); err != nil {
			return nil, err
		}
		if len(rest) < 8 {
			return nil, errorf(ErrMalformed, "hello body ends inside ShmChannel")
		}
		h.ShmChannel = be.Uint64(rest)
		rest = rest[8:]
		if len(rest) < len(h.ShmToken) {
			return nil, errorf(ErrMalformed, "hello body ends inside ShmToken")
		}
		copy(h.ShmToken[:], rest)
		rest = rest[len(h.ShmToken):]
	}
	if h.Capabilities&CapPacketMTU != 0 {
		if len(rest) < 2 {
			return nil, errorf(ErrMalformed, "hello body ends inside PacketMTU")
		}
		h.PacketMTU = be.Uint16(rest)
		rest = rest[2:]
	}
	// Any remaining bytes are extensions this version does not know.
	if err := h.Validate(); err != nil {
		return nil, err
	}
	return h, nil
}

// ReadHello reads exactly one Hello frame from r (the preface must already
// have been consumed) and validates it. It never reads past the frame and
// never allocates more than MaxFrameSize bytes whatever lengths the frame
// claims. Errors match ErrVersion (other frame version), ErrMalformed (bad
// framing or values out of range; a *FieldError for the latter), or wrap the
// I/O error, io.ErrUnexpectedEOF if the stream ends before the frame does.
func ReadHello(r io.Reader) (*Hello, error) {
	version, body, err := readFrame(r, frameHello, "hello")
	if err != nil {
		return nil, err
	}
	return parseHelloBody(version, body)
}

// Reply is the listener's answer to a Hello.
type Reply struct {
	Accept bool   // true: the listener will set up RDMA with the dialer
	Reason string // why the listener declined; at most 128 bytes of UTF-8
	Hello  *Hello // the listener's parameters; required when Accept, ignored otherwise
}

// Validate reports whether r can be encoded and decoded faithfully. The error
// is a *FieldError.
func (r *Reply) Validate() error {
	if r == nil {
		return fieldErr("Reply", "nil")
	}
	if len(r.Reason) > MaxReasonLen {
		return fieldErr("Reason", "%d bytes, at most %d allowed", len(r.Reason), MaxReasonLen)
	}
	if !utf8.ValidString(r.Reason) {
		return fieldErr("Reason", "not valid UTF-8")
	}
	if r.Accept {
		if r.Hello == nil {
			return fieldErr("Hello", "missing in an Accept reply")
		}
		return r.Hello.Validate()
	}
	return nil
}

// AppendReply appends r, encoded as a Reply frame, to b and returns the
// extended slice. It does not validate r; the frame's version is that of
// r.Hello for an Accept and Version for a Decline. Reason is cut at 255 bytes.
func AppendReply(b []byte, r *Reply) []byte {
	version := uint16(Version)
	if r.Accept && r.Hello != nil {
		version = r.Hello.Version
	}
	start := len(b)
	b = appendHeader(b, version, frameReply, 0)
	status := byte(0)
	if r.Accept {
		status = 1
	}
	b = append(b, status)
	b = appendString(b, r.Reason)
	if r.Accept && r.Hello != nil {
		b = appendHelloBody(b, r.Hello)
	}
	binary.BigEndian.PutUint16(b[start+6:], uint16(min(len(b)-start-headerSize, 0xFFFF)))
	return b
}

// ReadReply reads exactly one Reply frame from r and validates it, with the
// same defences as ReadHello. If the first bytes are not an rsock frame (a
// plain TCP server answering, e.g. "HTTP/1.1 400 Bad Request"), the error
// matches ErrNotRsock; it is decided on the first mismatching byte, without
// waiting for more. An I/O error, including the stream ending before a whole
// frame (io.ErrUnexpectedEOF, even when no byte arrived), is wrapped as is.
func ReadReply(r io.Reader) (*Reply, error) {
	version, body, err := readFrame(r, frameReply, "reply")
	if err != nil {
		return nil, err
	}
	if len(body) < 2 {
		return nil, errorf(ErrMalformed, "reply body is %d bytes, want at least 2", len(body))
	}
	rep := &Reply{}
	switch body[0] {
	case 0:
	case 1:
		rep.Accept = true
	default:
		return nil, errorf(ErrMalformed, "reply status %d, want 0 or 1", body[0])
	}
	rest := body[1:]
	if rep.Reason, rest, err = takeString(rest, "Reason", MaxReasonLen); err != nil {
		return nil, err
	}
	if !utf8.ValidString(rep.Reason) {
		return nil, fieldErr("Reason", "not valid UTF-8")
	}
	if rep.Accept {
		if rep.Hello, err = parseHelloBody(version, rest); err != nil {
			return nil, err
		}
	}
	return rep, nil
}

// writeAll writes b with a single Write call and reports a short write.
func writeAll(w io.Writer, b []byte, what string) error {
	n, err := w.Write(b)
	if err == nil && n < len(b) {
		err = io.ErrShortWrite
	}
	if err != nil {
		return fmt.Errorf("fallback: writing %s: %w", what, err)
	}
	return nil
}

// WritePrefaceAndHello validates h and writes Preface followed by h's Hello
// frame with a single Write call.
func WritePrefaceAndHello(w io.Writer, h *Hello) error {
	if err := h.Validate(); err != nil {
		return err
	}
	b := make([]byte, 0, len(Preface)+MaxFrameSize)
	b = append(b, Preface[:]...)
	b = AppendHello(b, h)
	return writeAll(w, b, "preface and hello")
}

// WritePreface writes the preface alone. A dialer sends it as soon as the
// TCP connection is up, so the listener's sniff ends quickly, and follows
// with WriteHello once its endpoint is ready.
func WritePreface(w io.Writer) error {
	return writeAll(w, Preface[:], "preface")
}

// WriteHello validates h and writes its Hello frame with a single Write call.
func WriteHello(w io.Writer, h *Hello) error {
	if err := h.Validate(); err != nil {
		return err
	}
	return writeAll(w, AppendHello(make([]byte, 0, MaxFrameSize), h), "hello")
}

// WriteReply validates r and writes its Reply frame with a single Write call.
func WriteReply(w io.Writer, r *Reply) error {
	if err := r.Validate(); err != nil {
		return err
	}
	return writeAll(w, AppendReply(make([]byte, 0, MaxFrameSize), r), "reply")
}

// Decline returns a Decline reply carrying reason, cut to MaxReasonLen bytes
// (at a UTF-8 boundary) and with invalid UTF-8 replaced.
func Decline(reason string) *Reply {
	reason = strings.ToValidUTF8(reason, "?")
	if len(reason) > MaxReasonLen {
		cut := MaxReasonLen
		for cut > 0 && !utf8.RuneStart(reason[cut]) {
			cut--
		}
		reason = reason[:cut]
	}
	return &Reply{Reason: reason}
}
