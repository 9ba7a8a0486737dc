package verbsbench

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/rsock-go/rsock/verbs"
)

func validParams() Params {
	return Params{Test: TestWriteBW, Outs: 16, MTU: 4096, Size: 65536, Iters: 1000, TxDepth: 128, RxDepth: 512,
		CQMod: 16, QPN: 0x12, PSN: 0xabcdef, GID: verbs.GIDFromAddr(netip.MustParseAddr("127.0.0.1")),
		Port: 4791, Addr: 0x7f0000000000, RKey: 0x1234, Len: 16 * 65536}
}

func frameBytes(t FrameType, payload []byte) []byte {
	var b bytes.Buffer
	if err := WriteFrame(&b, t, payload); err != nil {
		panic(err)
	}
	return b.Bytes()
}

func TestParamsRoundTrip(t *testing.T) {
	p := validParams()
	b := p.Encode()
	if len(b) != ParamsLen {
		t.Fatalf("encoded %d bytes, want %d", len(b), ParamsLen)
	}
	q, err := DecodeParams(b)
	if err != nil {
		t.Fatal(err)
	}
	if q != p {
		t.Fatalf("round trip: got %+v, want %+v", q, p)
	}
	p.Iters, p.Duration = 0, 3*time.Second
	if q, err := DecodeParams(p.Encode()); err != nil || q != p {
		t.Fatalf("timed round trip: %+v %v", q, err)
	}
}

func TestDecodeParamsRejects(t *testing.T) {
	mod := func(f func(p *Params)) []byte {
		p := validParams()
		f(&p)
		return p.Encode()
	}
	raw := func(off int, v uint64, n int) []byte {
		p := validParams()
		b := p.Encode()
		switch n {
		case 8:
			binary.BigEndian.PutUint64(b[off:], v)
		case 4:
			binary.BigEndian.PutUint32(b[off:], uint32(v))
		}
		return b
	}
	cases := map[string][]byte{
		"empty":          nil,
		"short":          mod(func(*Params) {})[:ParamsLen-1],
		"long":           append(mod(func(*Params) {}), 0),
		"garbage":        bytes.Repeat([]byte{0xff}, ParamsLen),
		"zeros":          make([]byte, ParamsLen),
		"test":           mod(func(p *Params) { p.Test = 7 }),
		"outs":           mod(func(p *Params) { p.Outs = 0 }),
		"outs big":       mod(func(p *Params) { p.Outs = 200 }),
		"mtu":            mod(func(p *Params) { p.MTU = 1500 }),
		"size 0":         mod(func(p *Params) { p.Size = 0 }),
		"size big":       raw(4, 1<<31, 4),
		"iters big":      raw(8, 1<<50, 8),
		"duration big":   raw(16, uint64(48*time.Hour), 8),
		"duration neg":   raw(16, 1<<63, 8),
		"both":           mod(func(p *Params) { p.Duration = time.Second }),
		"neither":        mod(func(p *Params) { p.Iters = 0 }),
		"tx-depth":       mod(func(p *Params) { p.TxDepth = 0 }),
		"tx-depth big":   mod(func(p *Params) { p.TxDepth = MaxDepth + 1 }),
		"rx-depth":       mod(func(p *Params) { p.RxDepth = 0 }),
		"cq-mod":         mod(func(p *Params) { p.CQMod = 129 }),
		"qpn 0":          mod(func(p *Params) { p.QPN = 0 }),
		"qpn big":        mod(func(p *Params) { p.QPN = 1 << 24 }),
		"psn big":        mod(func(p *Params) { p.PSN = 1 << 24 }),
		"gid zero":       mod(func(p *Params) { p.GID = verbs.GID{} }),
		"gid multicast":  mod(func(p *Params) { p.GID = verbs.GIDFromAddr(netip.MustParseAddr("224.0.0.1")) }),
		"port 0":         mod(func(p *Params) { p.Port = 0 }),
		"mr too small":   mod(func(p *Params) { p.Len = 100 }),
		"mr too big":     mod(func(p *Params) { p.Len = 1 << 40 }),
		"mr wraps":       mod(func(p *Params) { p.Addr = 1<<64 - 4096 }),
		"size over uint": raw(4, 0xffffffff, 4),
	}
	for name, b := range cases {
		if p, err := DecodeParams(b); !errors.Is(err, ErrProtocol) {
			t.Errorf("%s: got %+v, %v; want a protocol error", name, p, err)
		}
	}
}

func TestReadFrame(t *testing.T) {
	vp := validParams()
	good := frameBytes(FrameHello, vp.Encode())
	if typ, p, err := ReadFrame(bytes.NewReader(good)); err != nil || typ != FrameHello || len(p) != ParamsLen {
		t.Fatalf("good frame: %v %d %v", typ, len(p), err)
	}
	withLen := func(t FrameType, n int) []byte {
		b := []byte{'R', 'S', 'V', 'B', ProtoVersion, byte(t), 0, 0}
		binary.BigEndian.PutUint16(b[6:], uint16(n))
		return append(b, make([]byte, min(n, 1000))...)
	}
	bad := map[string][]byte{
		"truncated header":  good[:5],
		"truncated payload": good[:len(good)-1],
		"magic":             append([]byte("HTTP"), good[4:]...),
		"version":           append(append([]byte{}, good[:4]...), append([]byte{2}, good[5:]...)...),
		"type":              withLen(99, 0),
		"type 0":            withLen(0, 0),
		"oversized":         withLen(FrameError, 0xffff),
		"over max":          withLen(FrameError, MaxPayload+1),
		"error too long":    withLen(FrameError, MaxErrorText+1),
		"error empty":       withLen(FrameError, 0),
		"error not utf8":    frameBytes(FrameError, []byte{0xff, 0xfe}),
		"hello short":       withLen(FrameHello, ParamsLen-1),
		"hello long":        withLen(FrameHello, ParamsLen+1),
		"done long":         withLen(FrameDone, DoneLen+8),
		"report short":      withLen(FrameReport, 8),
		"bye with payload":  withLen(FrameBye, 1),
		"http":              []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
	}
	for name, b := range bad {
		if typ, p, err := ReadFrame(bytes.NewReader(b)); !errors.Is(err, ErrProtocol) {
			t.Errorf("%s: got %v %q %v, want a protocol error", name, typ, p, err)
		}
	}
	if _, _, err := ReadFrame(bytes.NewReader(nil)); err != io.EOF {
		t.Errorf("empty stream: %v, want io.EOF", err)
	}
	// A huge declared length must not make ReadFrame read or allocate it.
	r := &countingReader{r: bytes.NewReader(append(withLen(FrameError, 0xffff), make([]byte, 1<<16)...))}
	ReadFrame(r)
	if r.n > HeaderLen {
		t.Errorf("read %d bytes of a frame with an oversized length", r.n)
	}
	if err := WriteFrame(io.Discard, FrameError, make([]byte, MaxPayload+1)); !errors.Is(err, ErrProtocol) {
		t.Errorf("WriteFrame of an oversized payload: %v", err)
	}
}

type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

func TestErrorText(t *testing.T) {
	long := strings.Repeat("é", MaxErrorText)
	b := ErrorText(long)
	if len(b) > MaxErrorText {
		t.Fatalf("%d bytes", len(b))
	}
	if typ, p, err := ReadFrame(bytes.NewReader(frameBytes(FrameError, b))); err != nil || typ != FrameError || string(p) != string(b) {
		t.Fatalf("got %v %q %v", typ, p, err)
	}
	if got := string(ErrorText("bad \xff byte")); got != "bad \uFFFD byte" {
		t.Errorf("invalid UTF-8 became %q", got)
	}
	if len(ErrorText("")) == 0 {
		t.Error("empty text")
	}
}

func TestDoneReport(t *testing.T) {
	d := Done{Msgs: 5, Bytes: 500}
	if got, err := DecodeDone(d.Encode()); err != nil || got != d {
		t.Errorf("Done round trip: %+v %v", got, err)
	}
	if _, err := DecodeDone(make([]byte, 3)); !errors.Is(err, ErrProtocol) {
		t.Errorf("short Done: %v", err)
	}
	if _, err := DecodeDone(bytes.Repeat([]byte{0xff}, DoneLen)); !errors.Is(err, ErrProtocol) {
		t.Errorf("huge Done: %v", err)
	}
	r := Report{Msgs: 1, Bytes: 2, Verified: 3, Retransmits: 4, Timeouts: 5, RNRNAKs: 6, CPUUser: 7, CPUSys: 8}
	if got, err := DecodeReport(r.Encode()); err != nil || got != r {
		t.Errorf("Report round trip: %+v %v", got, err)
	}
	if _, err := DecodeReport(bytes.Repeat([]byte{0xff}, ReportLen)); !errors.Is(err, ErrProtocol) {
		t.Errorf("garbage Report: %v", err)
	}
}

// FuzzReadFrame feeds arbitrary bytes to the frame reader and the payload
// decoders: they must reject or accept cleanly, and what they accept must
// encode back to the same bytes.
func FuzzReadFrame(f *testing.F) {
	vp := validParams()
	f.Add(frameBytes(FrameHello, vp.Encode()))
	f.Add(frameBytes(FrameDone, (&Done{Msgs: 1, Bytes: 2}).Encode()))
	f.Add(frameBytes(FrameReport, (&Report{Msgs: 1}).Encode()))
	f.Add(frameBytes(FrameError, []byte("boom")))
	f.Add(frameBytes(FrameBye, nil))
	f.Add([]byte("RSVB\x01\x01\xff\xff"))
	f.Fuzz(func(t *testing.T, data []byte) {
		typ, payload, err := ReadFrame(bytes.NewReader(data))
		if err != nil {
			if !errors.Is(err, ErrProtocol) && err != io.EOF {
				t.Fatalf("unexpected error kind: %v", err)
			}
			return
		}
		if len(payload) > MaxPayload {
			t.Fatalf("payload of %d bytes", len(payload))
		}
		var again []byte
		switch typ {
		case FrameHello, FrameAccept:
			p, err := DecodeParams(payload)
			if err != nil {
				return
			}
			again = p.Encode()
		case FrameDone:
			d, err := DecodeDone(payload)
			if err != nil {
				return
			}
			again = d.Encode()
		case FrameReport:
			r, err := DecodeReport(payload)
			if err != nil {
				return
			}
			again = r.Encode()
		default:
			return
		}
		if !bytes.Equal(again, payload) {
			t.Fatalf("%v: decode/encode changed %x to %x", typ, payload, again)
		}
	})
}

// FuzzDecodeParams checks DecodeParams directly on arbitrary payloads.
func FuzzDecodeParams(f *testing.F) {
	vp := validParams()
	f.Add(vp.Encode())
	f.Add(make([]byte, ParamsLen))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := DecodeParams(b)
		if err != nil {
			if !errors.Is(err, ErrProtocol) {
				t.Fatalf("unexpected error kind: %v", err)
			}
			return
		}
		if err := p.Validate(); err != nil {
			t.Fatalf("decoded params fail validation: %v", err)
		}
		if !bytes.Equal(p.Encode(), b) {
			t.Fatalf("round trip changed %x", b)
		}
	})
}
