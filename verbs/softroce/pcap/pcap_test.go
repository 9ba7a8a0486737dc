package pcap

import (
	"go.uber.org/goleak"

	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"
	"time"
)

func TestRoundTrip(t *testing.T) {
	var b bytes.Buffer
	w, err := NewWriter(&b, LinkTypeEthernet, 100)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1700000000, 123456789)
	frames := [][]byte{bytes.Repeat([]byte{1}, 60), bytes.Repeat([]byte{2}, 150), {3}}
	for i, f := range frames {
		if err := w.WritePacket(t0.Add(time.Duration(i)), f); err != nil {
			t.Fatal(err)
		}
	}
	if want := FileHeaderLen + w.RecordLen(60) + w.RecordLen(150) + w.RecordLen(1); b.Len() != want || w.RecordLen(150) != RecordHeaderLen+100 {
		t.Fatalf("%d bytes written, want %d", b.Len(), want)
	}
	r, err := NewReader(&b)
	if err != nil {
		t.Fatal(err)
	}
	if r.LinkType() != LinkTypeEthernet {
		t.Errorf("link type %d", r.LinkType())
	}
	for i, f := range frames {
		p, err := r.Next()
		if err != nil {
			t.Fatal(err)
		}
		want := f[:min(len(f), 100)]
		if !p.Time.Equal(t0.Add(time.Duration(i))) || p.OrigLen != len(f) || !bytes.Equal(p.Data, want) {
			t.Errorf("packet %d: %v %d %x", i, p.Time, p.OrigLen, p.Data)
		}
	}
	if _, err := r.Next(); err != io.EOF {
		t.Errorf("after the last packet: %v", err)
	}
}

// TestTcpdumpFile reads a microsecond, big-endian header as tcpdump
// writes on such machines.
func TestTcpdumpFile(t *testing.T) {
	var b bytes.Buffer
	h := make([]byte, FileHeaderLen)
	binary.BigEndian.PutUint32(h[0:], magicMicro)
	binary.BigEndian.PutUint16(h[4:], 2)
	binary.BigEndian.PutUint16(h[6:], 4)
	binary.BigEndian.PutUint32(h[16:], 65535)
	binary.BigEndian.PutUint32(h[20:], 1)
	b.Write(h)
	rec := make([]byte, RecordHeaderLen)
	binary.BigEndian.PutUint32(rec[0:], 10)
	binary.BigEndian.PutUint32(rec[4:], 5)
	binary.BigEndian.PutUint32(rec[8:], 2)
	binary.BigEndian.PutUint32(rec[12:], 2)
	b.Write(rec)
	b.Write([]byte{0xaa, 0xbb})
	r, err := NewReader(&b)
	if err != nil {
		t.Fatal(err)
	}
	p, err := r.Next()
	if err != nil || !p.Time.Equal(time.Unix(10, 5000)) || !bytes.Equal(p.Data, []byte{0xaa, 0xbb}) {
		t.Fatalf("%+v %v", p, err)
	}
}

func TestBadFiles(t *testing.T) {
	var good bytes.Buffer
	w, _ := NewWriter(&good, LinkTypeEthernet, 64)
	w.WritePacket(time.Unix(1, 0), make([]byte, 10))
	g := good.Bytes()
	for name, b := range map[string][]byte{
		"empty":        nil,
		"short header": g[:10],
		"bad magic":    append([]byte{1, 2, 3, 4}, g[4:]...),
		"truncated":    g[:len(g)-1],
		"short record": g[:FileHeaderLen+5],
		"incl > snap": func() []byte {
			c := bytes.Clone(g)
			binary.LittleEndian.PutUint32(c[FileHeaderLen+8:], 65)
			return c
		}(),
	} {
		r, err := NewReader(bytes.NewReader(b))
		if err == nil {
			_, err = r.Next()
		}
		if !errors.Is(err, ErrFormat) {
			t.Errorf("%s: %v, want ErrFormat", name, err)
		}
	}
	if _, err := NewWriter(io.Discard, 1, 0); err == nil {
		t.Error("snapshot length 0 accepted")
	}
}

// FuzzReader: no input makes the reader panic or return more than the
// snapshot length in a packet.
func FuzzReader(f *testing.F) {
	var b bytes.Buffer
	w, _ := NewWriter(&b, LinkTypeEthernet, 256)
	w.WritePacket(time.Unix(1, 2), make([]byte, 80))
	f.Add(b.Bytes())
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := NewReader(bytes.NewReader(data))
		if err != nil {
			return
		}
		for range 1000 {
			p, err := r.Next()
			if err != nil {
				return
			}
			if len(p.Data) > int(r.snapLen) || len(p.Data) > p.OrigLen {
				t.Fatalf("packet of %d bytes (orig %d, snap %d)", len(p.Data), p.OrigLen, r.snapLen)
			}
		}
	})
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
