package fallback

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"math/rand/v2"
	"reflect"
	"runtime"
	"strings"
	"testing"
)

func extremeHellos() map[string]*Hello {
	lo := testHello()
	lo.Capabilities = 0
	lo.Provider = "a"
	lo.Link = "b"
	lo.GID = [16]byte{15: 1}
	lo.UDPPort = 1
	lo.QPN = 2
	lo.PSN = 0
	lo.MTU = MinMTU
	lo.RingAddr = 0
	lo.RingRKey = 0
	lo.RingSize = MinRingSize
	lo.RecvDepth = 1

	hi := testHello()
	hi.Capabilities = math.MaxUint32
	hi.Provider = strings.Repeat("~", MaxNameLen)
	hi.Link = strings.Repeat("!", MaxNameLen)
	for i := range hi.GID {
		hi.GID[i] = 0xFE
	}
	hi.UDPPort = math.MaxUint16
	hi.QPN = 1<<24 - 2
	hi.PSN = 1<<24 - 1
	hi.MTU = MaxMTU
	hi.RingSize = MaxRingSize
	hi.RingAddr = math.MaxUint64 - MaxRingSize + 1
	hi.RingRKey = math.MaxUint32
	hi.RecvDepth = MaxRecvDepth
	hi.MemifSocket = strings.Repeat("@", MaxMemifSocketLen)
	hi.MemifSecret = strings.Repeat("~", MaxMemifSecretLen)
	hi.ShmSocket = strings.Repeat("s", MaxShmSocketLen)
	hi.PacketMTU = MaxMTU

	memif := testHello()
	memif.Capabilities |= CapMemif
	memif.MemifSocket = "@rsock-0123456789abcdef"
	memif.MemifSecret = "s"

	shmDial := testHello()
	shmDial.Capabilities |= CapShm
	shmDial.ShmSocket = "rsock-shm-0123456789abcdef01234567"
	shmReuse := testHello()
	shmReuse.Capabilities |= CapShm
	shmReuse.ShmChannel = math.MaxUint64
	for i := range shmReuse.ShmToken {
		shmReuse.ShmToken[i] = byte(0xF0 + i)
	}

	wide := testHello()
	wide.Capabilities |= CapSelectiveRepeat | CapCongestionControl | CapWideSACK

	packet := testHello()
	packet.Capabilities |= CapPacketMTU
	packet.PacketMTU = 1408
	// The packet MTU's extension follows the shm channel's token.
	shmPacket := *shmReuse
	shmPacket.Capabilities |= CapPacketMTU
	shmPacket.PacketMTU = MinMTU

	return map[string]*Hello{"typical": testHello(), "min": lo, "max": hi, "memif": memif, "shm-dial": shmDial, "shm-reuse": shmReuse,
		"wide-sack": wide, "packet-mtu": packet, "shm-packet-mtu": &shmPacket}
}

func TestHelloRoundTrip(t *testing.T) {
	for name, h := range extremeHellos() {
		t.Run(name, func(t *testing.T) {
			if err := h.Validate(); err != nil {
				t.Fatalf("Validate: %v", err)
			}
			b := AppendHello([]byte("prefix"), h)
			if !bytes.HasPrefix(b, []byte("prefix")) {
				t.Fatal("AppendHello clobbered the prefix")
			}
			frame := b[len("prefix"):]
			if len(frame) > MaxFrameSize {
				t.Fatalf("frame is %d bytes, over %d", len(frame), MaxFrameSize)
			}
			// Bytes after the frame must be left unread.
			r := bytes.NewReader(append(append([]byte(nil), frame...), "tail"...))
			got, err := ReadHello(r)
			if err != nil {
				t.Fatalf("ReadHello: %v", err)
			}
			if !reflect.DeepEqual(got, h) {
				t.Fatalf("round trip:\n got %+v\nwant %+v", got, h)
			}
			rest, _ := io.ReadAll(r)
			if string(rest) != "tail" {
				t.Fatalf("ReadHello consumed past the frame: rest %q", rest)
			}
		})
	}
}

func TestHelloExtensionBytesSkipped(t *testing.T) {
	h := testHello()
	b := AppendHello(nil, h)
	b = append(b, 1, 2, 3, 4)
	binary.BigEndian.PutUint16(b[6:], uint16(len(b)-headerSize))
	got, err := ReadHello(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, h) {
		t.Fatalf("got %+v want %+v", got, h)
	}
}

// TestMemifWithoutCap: memif fields are only carried under CapMemif, so
// setting them without it is an error rather than silently dropped.
func TestMemifWithoutCap(t *testing.T) {
	h := testHello()
	h.MemifSocket = "@m"
	var fe *FieldError
	if err := h.Validate(); !errors.As(err, &fe) || fe.Field != "MemifSocket" {
		t.Fatalf("Validate = %v, want a MemifSocket field error", err)
	}
}

// TestMemifExtensionTruncated: a Hello that announces CapMemif but ends
// before its extension is malformed.
func TestMemifExtensionTruncated(t *testing.T) {
	h := testHello()
	h.Capabilities |= CapMemif
	h.MemifSocket, h.MemifSecret = "@sock", "secret"
	full := AppendHello(nil, h)
	for cut := len(full) - 1; cut > len(full)-len("@sock")-len("secret")-2; cut-- {
		b := append([]byte(nil), full[:cut]...)
		binary.BigEndian.PutUint16(b[6:], uint16(len(b)-headerSize))
		if _, err := ReadHello(bytes.NewReader(b)); !errors.Is(err, ErrMalformed) {
			t.Fatalf("cut at %d: err %v, want ErrMalformed", cut, err)
		}
	}
}

// TestShmWithoutCap: shm fields are only carried under CapShm.
func TestShmWithoutCap(t *testing.T) {
	for _, mutate := range []func(*Hello){func(h *Hello) { h.ShmChannel = 7 }, func(h *Hello) { h.ShmSocket = "s" }} {
		h := testHello()
		mutate(h)
		var fe *FieldError
		if err := h.Validate(); !errors.As(err, &fe) || fe.Field != "ShmSocket" {
			t.Fatalf("Validate = %v, want a ShmSocket field error", err)
		}
	}
}

// TestShmToken: a channel to reuse comes with a token, a socket without
// one, and the token survives the round trip.
func TestShmToken(t *testing.T) {
	cases := []struct {
		name    string
		mutate  func(*Hello)
		invalid bool
	}{
		{"channel and token", func(h *Hello) { h.ShmChannel, h.ShmToken[15] = 7, 1 }, false},
		{"channel without token", func(h *Hello) { h.ShmChannel = 7 }, true},
		{"socket and token", func(h *Hello) { h.ShmSocket, h.ShmToken[0] = "s", 1 }, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := testHello()
			h.Capabilities |= CapShm
			c.mutate(h)
			err := h.Validate()
			var fe *FieldError
			if c.invalid {
				if !errors.As(err, &fe) || fe.Field != "ShmToken" {
					t.Fatalf("Validate = %v, want a ShmToken field error", err)
				}
				// The decoder refuses it too.
				if _, err := ReadHello(bytes.NewReader(AppendHello(nil, h))); !errors.Is(err, ErrMalformed) {
					t.Fatalf("ReadHello = %v, want ErrMalformed", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got, err := ReadHello(bytes.NewReader(AppendHello(nil, h)))
			if err != nil || got.ShmToken != h.ShmToken || got.ShmChannel != h.ShmChannel {
				t.Fatalf("round trip: %+v, %v", got, err)
			}
		})
	}
	h := testHello()
	h.ShmToken[3] = 1
	if err := h.Validate(); err == nil {
		t.Fatal("a token without CapShm validated")
	}
}

// TestShmExtensionTruncated: a Hello that announces CapShm but ends
// before its channel ID is malformed.
func TestShmExtensionTruncated(t *testing.T) {
	h := testHello()
	h.Capabilities |= CapShm
	h.ShmSocket = "sock"
	full := AppendHello(nil, h)
	for cut := len(full) - 1; cut > len(full)-8-len("sock")-2; cut-- {
		b := append([]byte(nil), full[:cut]...)
		binary.BigEndian.PutUint16(b[6:], uint16(len(b)-headerSize))
		if _, err := ReadHello(bytes.NewReader(b)); !errors.Is(err, ErrMalformed) {
			t.Fatalf("cut at %d: err %v, want ErrMalformed", cut, err)
		}
	}
}

func TestReplyRoundTrip(t *testing.T) {
	replies := map[string]*Reply{
		"accept":         {Accept: true, Hello: extremeHellos()["max"]},
		"accept+reason":  {Accept: true, Reason: "ok", Hello: testHello()},
		"decline":        {Reason: "no RDMA provider"},
		"decline-empty":  {},
		"decline-max":    {Reason: strings.Repeat("é", MaxReasonLen/2)},
		"decline-helper": Decline(strings.Repeat("x", 500)),
	}
	for name, rep := range replies {
		t.Run(name, func(t *testing.T) {
			if err := rep.Validate(); err != nil {
				t.Fatalf("Validate: %v", err)
			}
			var buf bytes.Buffer
			if err := WriteReply(&buf, rep); err != nil {
				t.Fatal(err)
			}
			if buf.Len() > MaxFrameSize {
				t.Fatalf("frame is %d bytes", buf.Len())
			}
			buf.WriteString("tail")
			got, err := ReadReply(&buf)
			if err != nil {
				t.Fatalf("ReadReply: %v", err)
			}
			if !reflect.DeepEqual(got, rep) {
				t.Fatalf("round trip:\n got %+v\nwant %+v", got, rep)
			}
			if buf.String() != "tail" {
				t.Fatalf("ReadReply consumed past the frame")
			}
		})
	}
}

func TestDecline(t *testing.T) {
	r := Decline(strings.Repeat("é", 100)) // 200 bytes
	if len(r.Reason) > MaxReasonLen || r.Accept || r.Hello != nil {
		t.Fatalf("bad decline %+v", r)
	}
	if err := r.Validate(); err != nil {
		t.Fatal(err)
	}
	if r := Decline("bad \xff byte"); r.Validate() != nil {
		t.Fatalf("invalid UTF-8 kept: %q", r.Reason)
	}
}

// TestPacketMTUExtensionTruncated: a Hello that announces CapPacketMTU
// but ends before its two bytes is malformed.
func TestPacketMTUExtensionTruncated(t *testing.T) {
	h := testHello()
	h.Capabilities |= CapPacketMTU
	h.PacketMTU = 1408
	full := AppendHello(nil, h)
	if got, err := ReadHello(bytes.NewReader(full)); err != nil || got.PacketMTU != 1408 {
		t.Fatalf("ReadHello = %+v, %v, want PacketMTU 1408", got, err)
	}
	// Without the bit the field is not on the wire: setting it is an error.
	bare := testHello()
	bare.PacketMTU = 1408
	var fe *FieldError
	if err := bare.Validate(); !errors.As(err, &fe) || fe.Field != "PacketMTU" {
		t.Fatalf("Validate of a PacketMTU without CapPacketMTU = %v, want a PacketMTU field error", err)
	}
	for cut := len(full) - 1; cut >= len(full)-2; cut-- {
		b := append([]byte(nil), full[:cut]...)
		binary.BigEndian.PutUint16(b[6:], uint16(len(b)-headerSize))
		if _, err := ReadHello(bytes.NewReader(b)); !errors.Is(err, ErrMalformed) {
			t.Fatalf("cut at %d: err %v, want ErrMalformed", cut, err)
		}
	}
}

func TestHelloValidateFields(t *testing.T) {
	cases := []struct {
		field  string
		kind   error
		mutate func(h *Hello)
	}{
		{"Version", ErrVersion, func(h *Hello) { h.Version = 0 }},
		{"Version", ErrVersion, func(h *Hello) { h.Version = 2 }},
		{"Provider", ErrMalformed, func(h *Hello) { h.Provider = "" }},
		{"Provider", ErrMalformed, func(h *Hello) { h.Provider = strings.Repeat("p", 33) }},
		{"Provider", ErrMalformed, func(h *Hello) { h.Provider = "soft roce" }},
		{"Provider", ErrMalformed, func(h *Hello) { h.Provider = "soft\x00" }},
		{"Link", ErrMalformed, func(h *Hello) { h.Link = "" }},
		{"Link", ErrMalformed, func(h *Hello) { h.Link = strings.Repeat("l", 33) }},
		{"Link", ErrMalformed, func(h *Hello) { h.Link = "ü" }},
		{"GID", ErrMalformed, func(h *Hello) { h.GID = [16]byte{} }},
		{"GID", ErrMalformed, func(h *Hello) { h.GID = [16]byte{0: 0xFF, 15: 1} }},
		{"UDPPort", ErrMalformed, func(h *Hello) { h.UDPPort = 0 }},
		{"QPN", ErrMalformed, func(h *Hello) { h.QPN = 0 }},
		{"QPN", ErrMalformed, func(h *Hello) { h.QPN = 1 }},
		{"QPN", ErrMalformed, func(h *Hello) { h.QPN = 1<<24 - 1 }},
		{"QPN", ErrMalformed, func(h *Hello) { h.QPN = 1 << 24 }},
		{"QPN", ErrMalformed, func(h *Hello) { h.QPN = math.MaxUint32 }},
		{"PSN", ErrMalformed, func(h *Hello) { h.PSN = 1 << 24 }},
		{"MTU", ErrMalformed, func(h *Hello) { h.MTU = 0 }},
		{"MTU", ErrMalformed, func(h *Hello) { h.MTU = 128 }},
		{"MTU", ErrMalformed, func(h *Hello) { h.MTU = 300 }},
		{"MTU", ErrMalformed, func(h *Hello) { h.MTU = 8192 }},
		{"MTU", ErrMalformed, func(h *Hello) { h.MTU = 1408 }}, // only PacketMTU may be
		{"PacketMTU", ErrMalformed, func(h *Hello) { h.Capabilities |= CapPacketMTU }},
		{"PacketMTU", ErrMalformed, func(h *Hello) { h.Capabilities, h.PacketMTU = h.Capabilities|CapPacketMTU, 192 }},
		{"PacketMTU", ErrMalformed, func(h *Hello) { h.Capabilities, h.PacketMTU = h.Capabilities|CapPacketMTU, 1400 }},
		{"PacketMTU", ErrMalformed, func(h *Hello) { h.Capabilities, h.PacketMTU = h.Capabilities|CapPacketMTU, 4160 }},
		{"RingSize", ErrMalformed, func(h *Hello) { h.RingSize = 0 }},
		{"RingSize", ErrMalformed, func(h *Hello) { h.RingSize = 2048 }},
		{"RingSize", ErrMalformed, func(h *Hello) { h.RingSize = 3 << 20 }},
		{"RingSize", ErrMalformed, func(h *Hello) { h.RingSize = 128 << 20 }},
		{"RingAddr", ErrMalformed, func(h *Hello) { h.RingAddr = math.MaxUint64 - 100 }},
		{"RecvDepth", ErrMalformed, func(h *Hello) { h.RecvDepth = 0 }},
		{"RecvDepth", ErrMalformed, func(h *Hello) { h.RecvDepth = MaxRecvDepth + 1 }},
		{"MemifSocket", ErrMalformed, func(h *Hello) { h.Capabilities |= CapMemif; h.MemifSecret = "s" }},
		{"MemifSocket", ErrMalformed, func(h *Hello) {
			h.Capabilities |= CapMemif
			h.MemifSocket, h.MemifSecret = strings.Repeat("m", MaxMemifSocketLen+1), "s"
		}},
		{"MemifSecret", ErrMalformed, func(h *Hello) { h.Capabilities |= CapMemif; h.MemifSocket = "@m" }},
		{"MemifSecret", ErrMalformed, func(h *Hello) {
			h.Capabilities |= CapMemif
			h.MemifSocket, h.MemifSecret = "@m", strings.Repeat("s", MaxMemifSecretLen+1)
		}},
		{"MemifSecret", ErrMalformed, func(h *Hello) { h.Capabilities |= CapMemif; h.MemifSocket, h.MemifSecret = "@m", "a b" }},
		{"ShmSocket", ErrMalformed, func(h *Hello) { h.Capabilities |= CapShm }},
		{"ShmSocket", ErrMalformed, func(h *Hello) { h.Capabilities |= CapShm; h.ShmSocket, h.ShmChannel = "s", 1 }},
		{"ShmSocket", ErrMalformed, func(h *Hello) {
			h.Capabilities |= CapShm
			h.ShmSocket = strings.Repeat("s", MaxShmSocketLen+1)
		}},
		{"ShmSocket", ErrMalformed, func(h *Hello) { h.Capabilities |= CapShm; h.ShmSocket = "a b" }},
	}
	for _, tc := range cases {
		h := testHello()
		tc.mutate(h)
		err := h.Validate()
		var fe *FieldError
		if !errors.As(err, &fe) {
			t.Errorf("%s: Validate = %v, want a *FieldError", tc.field, err)
			continue
		}
		if fe.Field != tc.field || !errors.Is(err, tc.kind) {
			t.Errorf("%s: got field %q, err %v", tc.field, fe.Field, err)
		}
		if !strings.HasPrefix(err.Error(), "fallback: ") || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: message %q", tc.field, err)
		}
		// The decoder must reject what Validate rejects.
		if _, derr := ReadHello(bytes.NewReader(AppendHello(nil, h))); derr == nil {
			t.Errorf("%s: ReadHello accepted an invalid hello", tc.field)
		}
	}
	var nilHello *Hello
	if nilHello.Validate() == nil {
		t.Error("nil Hello validated")
	}
}

func TestReplyValidate(t *testing.T) {
	bad := map[string]*Reply{
		"Reason": {Reason: strings.Repeat("r", MaxReasonLen+1)},
		"Hello":  {Accept: true},
		"MTU":    {Accept: true, Hello: func() *Hello { h := testHello(); h.MTU = 300; return h }()},
	}
	for field, r := range bad {
		err := r.Validate()
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != field || !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: Validate = %v", field, err)
		}
		if WriteReply(io.Discard, r) == nil {
			t.Errorf("%s: WriteReply accepted an invalid reply", field)
		}
	}
	if err := (&Reply{Reason: "\xff"}).Validate(); err == nil {
		t.Error("invalid UTF-8 reason accepted")
	}
}

// frameWith builds a hello frame from h and lets fix tweak the bytes.
func frameWith(h *Hello, fix func(b []byte) []byte) []byte {
	b := AppendHello(nil, h)
	return fix(b)
}

func TestReadHelloGarbage(t *testing.T) {
	valid := AppendHello(nil, testHello())
	provOff := headerSize + helloFixedSize
	cases := []struct {
		name string
		in   []byte
		kind error
	}{
		{"empty", nil, io.ErrUnexpectedEOF},
		{"http", []byte("GET / HTTP/1.1\r\n\r\n"), ErrMalformed},
		{"bad second magic byte", []byte{magic0, 'x', 0, 1, 1, 0, 0, 0}, ErrMalformed},
		{"huge length", frameWith(testHello(), func(b []byte) []byte { binary.BigEndian.PutUint16(b[6:], 0xFFFF); return b }), ErrMalformed},
		{"length just over", frameWith(testHello(), func(b []byte) []byte { binary.BigEndian.PutUint16(b[6:], maxBodySize+1); return b }), ErrMalformed},
		{"length too short", frameWith(testHello(), func(b []byte) []byte { binary.BigEndian.PutUint16(b[6:], 10); return b }), ErrMalformed},
		{"zero length", frameWith(testHello(), func(b []byte) []byte { binary.BigEndian.PutUint16(b[6:], 0); return b[:headerSize] }), ErrMalformed},
		{"version 0", frameWith(testHello(), func(b []byte) []byte { b[3] = 0; return b }), ErrVersion},
		{"version 2", frameWith(testHello(), func(b []byte) []byte { b[3] = 2; return b }), ErrVersion},
		{"version 0x100", frameWith(testHello(), func(b []byte) []byte { b[2] = 1; return b }), ErrVersion},
		{"reply type", frameWith(testHello(), func(b []byte) []byte { b[4] = frameReply; return b }), ErrMalformed},
		{"unknown type", frameWith(testHello(), func(b []byte) []byte { b[4] = 0xEE; return b }), ErrMalformed},
		{"provider too long", frameWith(testHello(), func(b []byte) []byte { b[provOff] = MaxNameLen + 1; return b }), ErrMalformed},
		{"provider length 255", frameWith(testHello(), func(b []byte) []byte { b[provOff] = 255; return b }), ErrMalformed},
		{"provider overruns", frameWith(testHello(), func(b []byte) []byte { b[provOff] = 20; return b }), ErrMalformed},
		{"link too long", frameWith(&Hello{Version: 1, Provider: "p", Link: strings.Repeat("l", 40)}, func(b []byte) []byte { return b }), ErrMalformed},
		{"long strings over frame size", frameWith(&Hello{Version: 1, Provider: strings.Repeat("p", 255), Link: strings.Repeat("l", 255)}, func(b []byte) []byte { return b }), ErrMalformed},
		{"zero ring size", frameWith(func() *Hello { h := testHello(); h.RingSize = 0; return h }(), func(b []byte) []byte { return b }), ErrMalformed},
		{"ring not power of two", frameWith(func() *Hello { h := testHello(); h.RingSize = 5000; return h }(), func(b []byte) []byte { return b }), ErrMalformed},
		{"MTU 300", frameWith(func() *Hello { h := testHello(); h.MTU = 300; return h }(), func(b []byte) []byte { return b }), ErrMalformed},
		{"QPN 2^24", frameWith(func() *Hello { h := testHello(); h.QPN = 1 << 24; return h }(), func(b []byte) []byte { return b }), ErrMalformed},
		{"all 0xFF body", frameWith(testHello(), func(b []byte) []byte {
			for i := headerSize; i < len(b); i++ {
				b[i] = 0xFF
			}
			return b
		}), ErrMalformed},
		{"all zero body", frameWith(testHello(), func(b []byte) []byte {
			for i := headerSize; i < len(b); i++ {
				b[i] = 0
			}
			return b
		}), ErrMalformed},
	}
	for i := 0; i < len(valid); i++ {
		cases = append(cases, struct {
			name string
			in   []byte
			kind error
		}{"truncated", valid[:i], io.ErrUnexpectedEOF})
	}
	for _, tc := range cases {
		h, err := ReadHello(bytes.NewReader(tc.in))
		if err == nil || h != nil {
			t.Errorf("%s (%d bytes): ReadHello = %+v, %v; want error", tc.name, len(tc.in), h, err)
			continue
		}
		if !errors.Is(err, tc.kind) {
			t.Errorf("%s (%d bytes): err %v, want %v", tc.name, len(tc.in), err, tc.kind)
		}
		if !strings.HasPrefix(err.Error(), "fallback: ") {
			t.Errorf("%s: message %q lacks prefix", tc.name, err)
		}
	}

	// Random garbage, and random corruption of a valid frame: errors must
	// be clean, classified, and no panic.
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 20000; i++ {
		var in []byte
		if i%2 == 0 {
			in = make([]byte, rng.IntN(600))
			for j := range in {
				in[j] = byte(rng.Uint32())
			}
			if len(in) >= 2 && i%4 == 0 {
				in[0], in[1] = magic0, magic1
			}
		} else {
			in = append([]byte(nil), valid...)
			for k := 0; k < 1+rng.IntN(3); k++ {
				in[rng.IntN(len(in))] = byte(rng.Uint32())
			}
		}
		h, err := ReadHello(bytes.NewReader(in))
		if err != nil {
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrVersion) && !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("unclassified error %v for %x", err, in)
			}
			continue
		}
		if h.Validate() != nil {
			t.Fatalf("ReadHello returned an invalid hello %+v", h)
		}
	}
}

func TestReadReplyNotRsock(t *testing.T) {
	for _, s := range []string{
		"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n400 Bad Request",
		"SSH-2.0-OpenSSH_9.6\r\n",
		"+OK POP3 ready\r\n",
		"\x15\x03\x03\x00\x02\x02\x46", // a TLS alert
		"H",
		"\xD2", // first magic byte, then something else
	} {
		in := s
		if in == "\xD2" {
			in = "\xD2\x00"
		}
		_, err := ReadReply(strings.NewReader(in))
		if !errors.Is(err, ErrNotRsock) {
			t.Errorf("%q: err %v, want ErrNotRsock", s, err)
		}
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, ErrMalformed) {
			t.Errorf("%q: ErrNotRsock confused with %v", s, err)
		}
	}
	// The verdict comes from the first byte, without reading (waiting for) more.
	r := &scriptedReader{chunks: [][]byte{[]byte("HTTP/1.1 400 Bad Request\r\n")}, t: t, maxReads: 1}
	if _, err := ReadReply(r); !errors.Is(err, ErrNotRsock) {
		t.Fatalf("err %v", err)
	}
	// An I/O error is not ErrNotRsock.
	ioErr := errors.New("connection reset")
	_, err := ReadReply(&scriptedReader{err: ioErr, t: t, maxReads: 1})
	if !errors.Is(err, ioErr) || errors.Is(err, ErrNotRsock) {
		t.Fatalf("I/O error: %v", err)
	}
	// Nothing at all: unexpected EOF, not ErrNotRsock.
	_, err = ReadReply(strings.NewReader(""))
	if !errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, ErrNotRsock) {
		t.Fatalf("empty: %v", err)
	}
}

// scriptedReader returns its chunks one Read at a time (each Read returning at
// most one byte of len(p)), then err (io.EOF if nil). It fails the test when
// read more than maxReads times.
type scriptedReader struct {
	chunks   [][]byte
	err      error
	t        *testing.T
	reads    int
	maxReads int
}

func (r *scriptedReader) Read(p []byte) (int, error) {
	r.reads++
	if r.maxReads > 0 && r.reads > r.maxReads {
		r.t.Errorf("read %d times, at most %d expected", r.reads, r.maxReads)
	}
	if len(r.chunks) == 0 {
		if r.err != nil {
			return 0, r.err
		}
		return 0, io.EOF
	}
	n := copy(p, r.chunks[0])
	r.chunks[0] = r.chunks[0][n:]
	if len(r.chunks[0]) == 0 {
		r.chunks = r.chunks[1:]
	}
	return n, nil
}

func TestReadReplyGarbage(t *testing.T) {
	valid := AppendReply(nil, &Reply{Accept: true, Hello: testHello()})
	decline := AppendReply(nil, Decline("because"))
	cases := []struct {
		name string
		in   []byte
		kind error
	}{
		{"status 2", func() []byte { b := bytes.Clone(decline); b[headerSize] = 2; return b }(), ErrMalformed},
		{"accept without hello", func() []byte { b := bytes.Clone(decline); b[headerSize] = 1; return b }(), ErrMalformed},
		{"reason too long", func() []byte { b := bytes.Clone(decline); b[headerSize+1] = MaxReasonLen + 1; return b }(), ErrMalformed},
		{"reason overruns", func() []byte { b := bytes.Clone(decline); b[headerSize+1] = 100; return b }(), ErrMalformed},
		{"reason bad utf8", AppendReply(nil, &Reply{Reason: "\xff\xfe"}), ErrMalformed},
		{"empty body", func() []byte { b := bytes.Clone(decline[:headerSize]); b[7] = 0; return b }(), ErrMalformed},
		{"huge length", func() []byte { b := bytes.Clone(valid); b[6], b[7] = 0xFF, 0xFF; return b }(), ErrMalformed},
		{"hello type", AppendHello(nil, testHello()), ErrMalformed},
		{"version 9", func() []byte { b := bytes.Clone(valid); b[3] = 9; return b }(), ErrVersion},
		{"accept bad hello", AppendReply(nil, &Reply{Accept: true, Hello: &Hello{Version: 1}}), ErrMalformed},
	}
	for i := 0; i < len(valid); i++ {
		cases = append(cases, struct {
			name string
			in   []byte
			kind error
		}{"truncated", valid[:i], io.ErrUnexpectedEOF})
	}
	for _, tc := range cases {
		r, err := ReadReply(bytes.NewReader(tc.in))
		if err == nil || r != nil {
			t.Errorf("%s (%d bytes): got %+v, %v", tc.name, len(tc.in), r, err)
			continue
		}
		if !errors.Is(err, tc.kind) {
			t.Errorf("%s (%d bytes): err %v, want %v", tc.name, len(tc.in), err, tc.kind)
		}
	}
}

// countingReader serves a frame header and then endless filler, counting
// what the decoder takes.
type countingReader struct {
	hdr  []byte
	read int
}

func (r *countingReader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		if r.read < len(r.hdr) {
			p[n] = r.hdr[r.read]
		} else {
			p[n] = 'A'
		}
		n++
		r.read++
	}
	return n, nil
}

func TestDecodeAllocationBounded(t *testing.T) {
	// A header claiming the largest length the field can hold.
	huge := AppendHello(nil, testHello())[:headerSize]
	binary.BigEndian.PutUint16(huge[6:], 0xFFFF)
	// A frame at the size limit whose strings claim 255 bytes each.
	claims := make([]byte, headerSize+maxBodySize)
	copy(claims, huge)
	binary.BigEndian.PutUint16(claims[6:], maxBodySize)
	claims[headerSize+helloFixedSize] = 255
	valid := AppendHello(nil, testHello())
	validReply := AppendReply(nil, &Reply{Accept: true, Hello: testHello()})

	for name, in := range map[string][]byte{"huge": huge, "claims": claims, "valid": valid} {
		allocs := testing.AllocsPerRun(200, func() {
			ReadHello(bytes.NewReader(in))
		})
		if allocs > 8 {
			t.Errorf("%s: %v allocations per ReadHello", name, allocs)
		}
		if bytesPer := allocBytes(func() { ReadHello(bytes.NewReader(in)) }); bytesPer > 2*MaxFrameSize {
			t.Errorf("%s: %d bytes allocated per ReadHello", name, bytesPer)
		}
	}
	if bytesPer := allocBytes(func() { ReadReply(bytes.NewReader(validReply)) }); bytesPer > 2*MaxFrameSize {
		t.Errorf("reply: %d bytes allocated per ReadReply", bytesPer)
	}

	// An endless stream behind a huge claimed length: the decoder stops at
	// the header and takes nothing more.
	cr := &countingReader{hdr: huge}
	if _, err := ReadHello(cr); !errors.Is(err, ErrMalformed) {
		t.Fatalf("err %v", err)
	}
	if cr.read != headerSize {
		t.Fatalf("decoder read %d bytes of an endless stream, want %d", cr.read, headerSize)
	}
	// Within the limit it takes exactly the frame.
	cr = &countingReader{hdr: claims[:headerSize]}
	ReadHello(cr)
	if cr.read != headerSize+maxBodySize {
		t.Fatalf("decoder read %d bytes, want %d", cr.read, headerSize+maxBodySize)
	}
}

func allocBytes(f func()) uint64 {
	const runs = 500
	f()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := 0; i < runs; i++ {
		f()
	}
	runtime.ReadMemStats(&after)
	return (after.TotalAlloc - before.TotalAlloc) / runs
}

// writeCounter counts Write calls.
type writeCounter struct {
	bytes.Buffer
	calls int
}

func (w *writeCounter) Write(p []byte) (int, error) {
	w.calls++
	return w.Buffer.Write(p)
}

func TestWritePrefaceAndHello(t *testing.T) {
	var w writeCounter
	if err := WritePrefaceAndHello(&w, testHello()); err != nil {
		t.Fatal(err)
	}
	if w.calls != 1 {
		t.Fatalf("%d Write calls, want 1", w.calls)
	}
	b := w.Bytes()
	if !bytes.Equal(b[:len(Preface)], Preface[:]) {
		t.Fatalf("no preface: %q", b)
	}
	h, err := ReadHello(bytes.NewReader(b[len(Preface):]))
	if err != nil || !reflect.DeepEqual(h, testHello()) {
		t.Fatalf("ReadHello = %+v, %v", h, err)
	}

	w = writeCounter{}
	bad := testHello()
	bad.MTU = 300
	if err := WritePrefaceAndHello(&w, bad); !errors.Is(err, ErrMalformed) || w.calls != 0 {
		t.Fatalf("invalid hello: err %v, %d writes", err, w.calls)
	}
	short := shortWriter{}
	if err := WritePrefaceAndHello(short, testHello()); !errors.Is(err, io.ErrShortWrite) {
		t.Fatalf("short write: %v", err)
	}
}

type shortWriter struct{}

func (shortWriter) Write(p []byte) (int, error) { return len(p) / 2, nil }

func TestPreface(t *testing.T) {
	if len(Preface) != 16 || Preface[prefaceVerIdx] != Version {
		t.Fatalf("preface %q", Preface[:])
	}
	for _, p := range []string{"GET ", "POST", "PUT ", "HEAD", "PRI ", "SSH-", "\x16\x03", "HTTP", "CONNECT", "OPTIONS", "*1\r\n", "\x00\x00"} {
		if bytes.HasPrefix(Preface[:], []byte(p)) || bytes.HasPrefix([]byte(p), Preface[:2]) {
			t.Errorf("preface collides with %q", p)
		}
	}
	// The frame magic is not valid UTF-8, so no text protocol starts with it.
	if bytes.ContainsAny([]byte{magic0, magic1}, "\r\n") || string([]byte{magic0, magic1}) == strings.ToValidUTF8(string([]byte{magic0, magic1}), "") {
		t.Error("frame magic is valid UTF-8")
	}
}

// TestWideSACKCarriesNoExtension: CapWideSACK (bit 6),
// CapDuplicateEcho (bit 7) and CapHoldEcho (bit 9) are bare capabilities: a Hello that sets one
// is as long as one that does not, so an older decoder, which skips
// unknown bits, reads it unchanged; each capability bit is distinct.
func TestWideSACKCarriesNoExtension(t *testing.T) {
	caps := []uint32{CapStream, CapSelectiveRepeat, CapMemif, CapCongestionControl, CapShm, CapECN, CapWideSACK, CapDuplicateEcho, CapPacketMTU, CapHoldEcho}
	seen := uint32(0)
	for _, c := range caps {
		if c&seen != 0 || c&(c-1) != 0 {
			t.Fatalf("capability %#x is not a bit of its own", c)
		}
		seen |= c
	}
	if CapWideSACK != 1<<6 || CapDuplicateEcho != 1<<7 || CapHoldEcho != 1<<9 {
		t.Fatalf("CapWideSACK = %#x, CapDuplicateEcho = %#x, CapHoldEcho = %#x, want 1<<6, 1<<7 and 1<<9 (bit 8 is another extension's)", CapWideSACK, CapDuplicateEcho, CapHoldEcho)
	}
	for _, c := range []uint32{CapWideSACK, CapDuplicateEcho, CapHoldEcho, CapWideSACK | CapDuplicateEcho | CapHoldEcho} {
		for _, sr := range []uint32{0, CapSelectiveRepeat} {
			narrow := testHello()
			narrow.Capabilities |= sr
			wide := testHello()
			wide.Capabilities |= sr | c
			nb, wb := AppendHello(nil, narrow), AppendHello(nil, wide)
			if len(nb) != len(wb) {
				t.Fatalf("a Hello with capabilities %#x is %d bytes, without %d", c, len(wb), len(nb))
			}
			got, err := ReadHello(bytes.NewReader(wb))
			if err != nil {
				t.Fatal(err)
			}
			if got.Capabilities != wide.Capabilities {
				t.Fatalf("capabilities %#x read back as %#x", wide.Capabilities, got.Capabilities)
			}
		}
	}
}
