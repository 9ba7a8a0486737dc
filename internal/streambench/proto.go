package streambench

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"
)

// Control frames. Every frame is an 8-byte header followed by a JSON
// payload:
//
//	0   4  magic "RSSB"
//	4   1  version (ProtoVersion)
//	5   1  type (FrameHello … FrameBye)
//	6   2  payload length, big-endian, at most MaxPayload
//
// The payload is one JSON object, a Message; fields a frame type does not
// use are left out. ReadFrame checks the fields each type needs.
const (
	ProtoVersion = 1
	HeaderLen    = 8
	// MaxPayload bounds the payload of any control frame.
	MaxPayload = 4096
	// MaxErrorText bounds the text of an error carried in a frame.
	MaxErrorText = 1024
)

// Limits of a measurement, enforced on both sides.
const (
	MaxSize  = 64 << 20 // largest message size
	MaxConns = 256      // most data connections per measurement
)

var (
	ctlMagic  = [4]byte{'R', 'S', 'S', 'B'}
	dataMagic = [4]byte{'R', 'S', 'S', 'D'}
)

// FrameType is the type byte of a control frame.
type FrameType uint8

// Frame types, in the order a session uses them.
const (
	FrameHello   FrameType = 1  // client → server: opens a session
	FrameWelcome FrameType = 2  // server → client: Session, TCPPort, Verify
	FrameStart   FrameType = 3  // client → server: the next measurement
	FrameReady   FrameType = 4  // server → client: dial the data connections
	FrameGo      FrameType = 5  // client → server: all data connections are open
	FrameStarted FrameType = 6  // server → client: the clock runs, send traffic
	FrameFinish  FrameType = 7  // client → server: the client's traffic is done
	FrameReport  FrameType = 8  // server → client: what the server saw
	FrameError   FrameType = 9  // either way: the sender gives up, with Error
	FrameBye     FrameType = 10 // client → server: the session ends
)

var frameNames = [...]string{"", "Hello", "Welcome", "Start", "Ready", "Go", "Started", "Finish", "Report", "Error", "Bye"}

func (t FrameType) String() string {
	if int(t) > 0 && int(t) < len(frameNames) {
		return frameNames[t]
	}
	return fmt.Sprintf("FrameType(%d)", uint8(t))
}

// Measurement modes.
const (
	ModeStream   = "stream"
	ModePingPong = "pingpong"
)

// Transports a measurement can use.
const (
	TransportRsock = "rsock"
	TransportTCP   = "tcp"
)

// Message is the payload of a control frame.
type Message struct {
	// Welcome.
	Session uint64 `json:"session,omitempty"`  // identifies the session's data connections
	TCPPort int    `json:"tcp_port,omitempty"` // port of the plain TCP listener
	Verify  bool   `json:"verify,omitempty"`   // Welcome: the server demands verification; Start: verify this one

	// Start.
	ID        uint32 `json:"id,omitempty"` // measurement number within the session
	Mode      string `json:"mode,omitempty"`
	Transport string `json:"transport,omitempty"`
	Size      int    `json:"size,omitempty"`
	Conns     int    `json:"conns,omitempty"`
	Seed      uint64 `json:"seed,omitempty"`

	// Finish: bytes the client sent, summed over its connections.
	Sent uint64 `json:"sent,omitempty"`

	// Report.
	Received        uint64         `json:"received,omitempty"`
	Verified        uint64         `json:"verified,omitempty"`
	Seconds         float64        `json:"seconds,omitempty"`
	CPUUser         float64        `json:"cpu_user,omitempty"`
	CPUSys          float64        `json:"cpu_sys,omitempty"`
	ServerTransport string         `json:"server_transport,omitempty"`
	Mismatch        *MismatchError `json:"mismatch,omitempty"`

	// Report (a failed measurement) and Error.
	Error string `json:"error,omitempty"`
}

// ErrProtocol is wrapped by every error about a malformed frame or header.
var ErrProtocol = errors.New("streambench: protocol error")

func protoErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrProtocol, fmt.Sprintf(format, args...))
}

// AppendFrame appends the encoding of a frame to b.
func AppendFrame(b []byte, t FrameType, m *Message) ([]byte, error) {
	if m == nil {
		m = &Message{}
	}
	if err := m.check(t); err != nil {
		return b, err
	}
	p, err := json.Marshal(m)
	if err != nil {
		return b, err
	}
	if len(p) > MaxPayload {
		return b, protoErr("%v payload of %d bytes exceeds %d", t, len(p), MaxPayload)
	}
	b = append(b, ctlMagic[:]...)
	b = append(b, ProtoVersion, byte(t))
	b = binary.BigEndian.AppendUint16(b, uint16(len(p)))
	return append(b, p...), nil
}

// WriteFrame writes one control frame in a single Write.
func WriteFrame(w io.Writer, t FrameType, m *Message) error {
	b, err := AppendFrame(nil, t, m)
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

// ReadFrame reads one control frame, checks its header and decodes and
// checks its payload. It never reads more than HeaderLen+MaxPayload bytes.
// Errors about the content wrap ErrProtocol; I/O errors are returned as
// they are (io.EOF when the stream ends cleanly before a frame).
func ReadFrame(r io.Reader) (FrameType, *Message, error) {
	var h [HeaderLen]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return 0, nil, protoErr("truncated frame header")
		}
		return 0, nil, err
	}
	if [4]byte(h[:4]) != ctlMagic {
		return 0, nil, protoErr("bad magic %q", h[:4])
	}
	if h[4] != ProtoVersion {
		return 0, nil, protoErr("unsupported version %d (this side speaks %d)", h[4], ProtoVersion)
	}
	t := FrameType(h[5])
	if t < FrameHello || t > FrameBye {
		return 0, nil, protoErr("unknown frame type %d", h[5])
	}
	n := int(binary.BigEndian.Uint16(h[6:]))
	if n > MaxPayload {
		return 0, nil, protoErr("%v payload of %d bytes exceeds %d", t, n, MaxPayload)
	}
	p := make([]byte, n)
	if _, err := io.ReadFull(r, p); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return 0, nil, protoErr("truncated %v payload", t)
		}
		return 0, nil, err
	}
	m := new(Message)
	dec := json.NewDecoder(bytes.NewReader(p))
	if err := dec.Decode(m); err != nil {
		return 0, nil, protoErr("%v payload: %v", t, err)
	}
	if dec.More() {
		return 0, nil, protoErr("%v payload: data after the JSON object", t)
	}
	if err := m.check(t); err != nil {
		return 0, nil, err
	}
	return t, m, nil
}

// check validates the fields that frame type t uses.
func (m *Message) check(t FrameType) error {
	if !utf8.ValidString(m.Error) || len(m.Error) > MaxErrorText {
		return protoErr("%v: error text is not valid UTF-8 of at most %d bytes", t, MaxErrorText)
	}
	if len(m.ServerTransport) > 64 {
		return protoErr("%v: server transport name too long", t)
	}
	switch t {
	case FrameWelcome:
		if m.Session == 0 || m.TCPPort <= 0 || m.TCPPort > 65535 {
			return protoErr("Welcome: session %d, tcp port %d", m.Session, m.TCPPort)
		}
	case FrameStart:
		switch {
		case m.Mode != ModeStream && m.Mode != ModePingPong:
			return protoErr("Start: unknown mode %q", m.Mode)
		case m.Transport != TransportRsock && m.Transport != TransportTCP:
			return protoErr("Start: unknown transport %q", m.Transport)
		case m.Size <= 0 || m.Size > MaxSize:
			return protoErr("Start: size %d not in 1..%d", m.Size, MaxSize)
		case m.Conns <= 0 || m.Conns > MaxConns:
			return protoErr("Start: conns %d not in 1..%d", m.Conns, MaxConns)
		}
	case FrameReport:
		if m.Seconds < 0 || m.CPUUser < 0 || m.CPUSys < 0 {
			return protoErr("Report: negative time")
		}
		if mm := m.Mismatch; mm != nil && (mm.Conn < 0 || mm.Conn >= MaxConns || mm.Offset < 0) {
			return protoErr("Report: mismatch at conn %d offset %d", mm.Conn, mm.Offset)
		}
	case FrameError:
		if m.Error == "" {
			return protoErr("Error frame without a message")
		}
	}
	return nil
}

// DataHeaderLen is the length of a DataHeader on the wire.
const DataHeaderLen = 24

// DataHeader opens every data connection: it names the session, the
// measurement and the connection's index in it. On the wire:
//
//	0   4  magic "RSSD"
//	4   1  version (ProtoVersion)
//	5   3  zero
//	8   8  session, big-endian
//	16  4  measurement ID
//	20  4  connection index
type DataHeader struct {
	Session uint64
	ID      uint32
	Index   uint32
}

// Append appends the encoding of h to b.
func (h DataHeader) Append(b []byte) []byte {
	b = append(b, dataMagic[:]...)
	b = append(b, ProtoVersion, 0, 0, 0)
	b = binary.BigEndian.AppendUint64(b, h.Session)
	b = binary.BigEndian.AppendUint32(b, h.ID)
	return binary.BigEndian.AppendUint32(b, h.Index)
}

// ParseDataHeader decodes a data connection's header.
func ParseDataHeader(b [DataHeaderLen]byte) (DataHeader, error) {
	if [4]byte(b[:4]) != dataMagic {
		return DataHeader{}, protoErr("bad data header magic %q", b[:4])
	}
	if b[4] != ProtoVersion || b[5]|b[6]|b[7] != 0 {
		return DataHeader{}, protoErr("unsupported data header version %d", b[4])
	}
	h := DataHeader{Session: binary.BigEndian.Uint64(b[8:]), ID: binary.BigEndian.Uint32(b[16:]), Index: binary.BigEndian.Uint32(b[20:])}
	if h.Index >= MaxConns {
		return DataHeader{}, protoErr("data connection index %d exceeds %d", h.Index, MaxConns)
	}
	return h, nil
}
