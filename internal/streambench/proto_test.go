package streambench

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
)

func frames() []struct {
	t FrameType
	m *Message
} {
	return []struct {
		t FrameType
		m *Message
	}{
		{FrameHello, &Message{}},
		{FrameWelcome, &Message{Session: 99, TCPPort: 4000, Verify: true}},
		{FrameStart, &Message{ID: 3, Mode: ModeStream, Transport: TransportRsock, Size: 1 << 20, Conns: 8, Verify: true, Seed: 1 << 63}},
		{FrameStart, &Message{ID: 4, Mode: ModePingPong, Transport: TransportTCP, Size: 1, Conns: MaxConns}},
		{FrameReady, &Message{}},
		{FrameGo, &Message{}},
		{FrameStarted, &Message{}},
		{FrameFinish, &Message{Sent: 1 << 40}},
		{FrameReport, &Message{Received: 12, Verified: 12, Seconds: 0.5, CPUUser: 0.1, CPUSys: 0.2, ServerTransport: "rdma/softroce/udp"}},
		{FrameReport, &Message{Error: "verify: …", Mismatch: &MismatchError{Conn: 3, Offset: 1 << 33, Got: 1, Want: 2}}},
		{FrameError, &Message{Error: "no"}},
		{FrameBye, &Message{}},
	}
}

func TestFrameRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	for _, f := range frames() {
		if err := WriteFrame(&buf, f.t, f.m); err != nil {
			t.Fatalf("%v: %v", f.t, err)
		}
	}
	for _, f := range frames() {
		typ, m, err := ReadFrame(&buf)
		if err != nil || typ != f.t || !reflect.DeepEqual(m, f.m) {
			t.Fatalf("%v: got %v %+v %v", f.t, typ, m, err)
		}
	}
	if _, _, err := ReadFrame(&buf); err != io.EOF {
		t.Errorf("at the end: %v", err)
	}
}

func TestFrameErrors(t *testing.T) {
	frame := func(v, typ byte, payload string) []byte {
		b := append(ctlMagic[:], v, typ)
		b = binary.BigEndian.AppendUint16(b, uint16(len(payload)))
		return append(b, payload...)
	}
	for name, b := range map[string][]byte{
		"short header":   ctlMagic[:3],
		"magic":          frame(ProtoVersion, 1, "{}")[1:],
		"version":        frame(2, 1, "{}"),
		"type 0":         frame(ProtoVersion, 0, "{}"),
		"type 11":        frame(ProtoVersion, 11, "{}"),
		"too long":       append(ctlMagic[:], ProtoVersion, 1, 0x10, 0x01),
		"truncated":      frame(ProtoVersion, 1, "{}")[:9],
		"not json":       frame(ProtoVersion, 1, "hello"),
		"trailing":       frame(ProtoVersion, 1, "{} {}"),
		"array":          frame(ProtoVersion, 1, "[]"),
		"bad mode":       frame(ProtoVersion, byte(FrameStart), `{"mode":"x","transport":"tcp","size":1,"conns":1}`),
		"bad transport":  frame(ProtoVersion, byte(FrameStart), `{"mode":"stream","transport":"udp","size":1,"conns":1}`),
		"size 0":         frame(ProtoVersion, byte(FrameStart), `{"mode":"stream","transport":"tcp","conns":1}`),
		"huge size":      frame(ProtoVersion, byte(FrameStart), `{"mode":"stream","transport":"tcp","size":1e12,"conns":1}`),
		"conns":          frame(ProtoVersion, byte(FrameStart), `{"mode":"stream","transport":"tcp","size":1,"conns":257}`),
		"welcome port":   frame(ProtoVersion, byte(FrameWelcome), `{"session":1,"tcp_port":70000}`),
		"empty error":    frame(ProtoVersion, byte(FrameError), `{}`),
		"long error":     frame(ProtoVersion, byte(FrameError), `{"error":"`+strings.Repeat("x", MaxErrorText+1)+`"}`),
		"negative time":  frame(ProtoVersion, byte(FrameReport), `{"seconds":-1}`),
		"mismatch conn":  frame(ProtoVersion, byte(FrameReport), `{"mismatch":{"conn":-1,"offset":0}}`),
		"negative count": frame(ProtoVersion, byte(FrameFinish), `{"sent":-1}`),
	} {
		_, _, err := ReadFrame(bytes.NewReader(b))
		if !errors.Is(err, ErrProtocol) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if err := WriteFrame(io.Discard, FrameError, &Message{Error: strings.Repeat("é", MaxErrorText)}); !errors.Is(err, ErrProtocol) {
		t.Errorf("long error written: %v", err)
	}
	if err := WriteFrame(io.Discard, FrameStart, &Message{Mode: "x"}); !errors.Is(err, ErrProtocol) {
		t.Errorf("bad Start written: %v", err)
	}
}

func TestDataHeader(t *testing.T) {
	h := DataHeader{Session: 0x0102030405060708, ID: 9, Index: MaxConns - 1}
	b := h.Append(nil)
	if len(b) != DataHeaderLen {
		t.Fatalf("%d bytes", len(b))
	}
	got, err := ParseDataHeader([DataHeaderLen]byte(b))
	if err != nil || got != h {
		t.Fatalf("%+v %v", got, err)
	}
	for _, i := range []int{0, 4, 5} {
		bad := [DataHeaderLen]byte(b)
		bad[i]++
		if _, err := ParseDataHeader(bad); !errors.Is(err, ErrProtocol) {
			t.Errorf("byte %d changed: %v", i, err)
		}
	}
	if _, err := ParseDataHeader([DataHeaderLen]byte(DataHeader{Index: MaxConns}.Append(nil))); !errors.Is(err, ErrProtocol) {
		t.Errorf("index %d accepted", MaxConns)
	}
}

// FuzzReadFrame feeds arbitrary bytes to the control decoder: it must
// fail with ErrProtocol or an EOF, never read past its limit, and what it
// accepts must encode back to a frame that decodes the same.
func FuzzReadFrame(f *testing.F) {
	for _, fr := range frames() {
		b, err := AppendFrame(nil, fr.t, fr.m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add(append(ctlMagic[:], ProtoVersion, byte(FrameStart), 0xFF, 0xFF))
	f.Add(DataHeader{Session: 1}.Append(nil))
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bytes.NewReader(data)
		typ, m, err := ReadFrame(r)
		if read := len(data) - r.Len(); read > HeaderLen+MaxPayload {
			t.Fatalf("read %d bytes", read)
		}
		if err != nil {
			if !errors.Is(err, ErrProtocol) && err != io.EOF {
				t.Fatalf("unclassified error %v", err)
			}
			return
		}
		b, err := AppendFrame(nil, typ, m)
		if err != nil {
			t.Fatalf("re-encode %v %+v: %v", typ, m, err)
		}
		typ2, m2, err := ReadFrame(bytes.NewReader(b))
		if err != nil || typ2 != typ || !reflect.DeepEqual(m, m2) {
			t.Fatalf("round trip: %v %+v → %v %+v %v", typ, m, typ2, m2, err)
		}
		if len(data) >= DataHeaderLen {
			ParseDataHeader([DataHeaderLen]byte(data))
		}
	})
}
