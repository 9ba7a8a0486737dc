package ring

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"
)

func TestCheckSize(t *testing.T) {
	for _, s := range []int{4096, 8192, 1 << 20, 64 << 20} {
		if err := CheckSize(s); err != nil {
			t.Errorf("%d: %v", s, err)
		}
	}
	for _, s := range []int{0, -4096, 2048, 4095, 5000, 3 << 20, 128 << 20} {
		if err := CheckSize(s); !errors.Is(err, ErrSize) {
			t.Errorf("%d accepted", s)
		}
	}
}

func TestSpans(t *testing.T) {
	const size = 4096
	cases := []struct {
		cursor uint64
		n      int
		a, b   Span
	}{
		{0, 0, Span{0, 0}, Span{}},
		{0, 4096, Span{0, 4096}, Span{}},
		{100, 10, Span{100, 10}, Span{}},
		{4090, 6, Span{4090, 6}, Span{}},
		{4090, 7, Span{4090, 6}, Span{0, 1}},
		{4096*7 + 4095, 4096, Span{4095, 1}, Span{0, 4095}},
		{1<<64 - 2, 5, Span{4094, 2}, Span{0, 3}},
	}
	for _, c := range cases {
		a, b := Spans(c.cursor, c.n, size)
		if a != c.a || b != c.b {
			t.Errorf("Spans(%d, %d) = %v %v, want %v %v", c.cursor, c.n, a, b, c.a, c.b)
		}
	}
}

// TestRingWrap writes and reads a stream through a small ring in pieces of
// random sizes, across many wraps, and checks every byte.
func TestRingWrap(t *testing.T) {
	r, err := New(make([]byte, MinSize))
	if err != nil {
		t.Fatal(err)
	}
	rnd := rand.New(rand.NewPCG(1, 2))
	src := make([]byte, 1<<20)
	for i := range src {
		src[i] = byte(rnd.Uint32())
	}
	var out bytes.Buffer
	var w, rd uint64
	for rd < uint64(len(src)) {
		if free := r.Size() - int(w-rd); free > 0 && w < uint64(len(src)) {
			n := min(rnd.IntN(free)+1, len(src)-int(w))
			r.Write(w, src[w:w+uint64(n)])
			w += uint64(n)
		}
		if avail := int(w - rd); avail > 0 {
			p := make([]byte, rnd.IntN(avail)+1)
			r.Read(rd, p)
			out.Write(p)
			rd += uint64(len(p))
		}
	}
	if !bytes.Equal(out.Bytes(), src) {
		t.Fatal("bytes differ after wrapping")
	}
	a, b := r.Regions(4000, 200)
	if len(a) != 96 || len(b) != 104 || &a[0] != &r.Bytes()[4000] || &b[0] != &r.Bytes()[0] {
		t.Fatal("Regions does not alias the ring at the right offsets")
	}
}

func TestProducerCredits(t *testing.T) {
	p := NewProducer(4096, 8, 2)
	if p.FreeBytes() != 4096 || !p.CanSendData() {
		t.Fatal("fresh producer has no credit")
	}
	for i := 0; i < 6; i++ {
		p.Wrote(100)
	}
	if p.CanSendData() {
		t.Fatal("data may use the control reserve")
	}
	if !p.CanSendControl() {
		t.Fatal("control may not use the reserve")
	}
	p.SentControl()
	p.SentControl()
	if p.CanSendControl() {
		t.Fatal("more messages than the peer has receive requests")
	}
	if p.FreeBytes() != 4096-600 {
		t.Fatalf("free %d", p.FreeBytes())
	}
	if p.Update(601, 1) || p.Update(0, 9) {
		t.Fatal("credit beyond what was sent accepted")
	}
	if !p.Update(600, 8) || p.FreeBytes() != 4096 || !p.CanSendData() {
		t.Fatal("credit not applied")
	}
	if !p.Update(100, 2) || p.FreeBytes() != 4096 {
		t.Fatal("a stale report moved the counters back")
	}
}

func TestConsumerReports(t *testing.T) {
	c := NewConsumer(4096, 64)
	if !c.Arrived(4096) || c.Arrived(1) {
		t.Fatal("ring overrun not detected")
	}
	c.Consume(1000)
	if c.ShouldReport() {
		t.Fatal("report before a quarter of the ring was freed")
	}
	c.Consume(24)
	if !c.ShouldReport() {
		t.Fatal("no report after a quarter of the ring was freed")
	}
	if got, _ := c.Report(); got != 1024 || c.ShouldReport() || c.Pending() {
		t.Fatalf("report %d", got)
	}
	for i := 0; i < 32; i++ {
		c.Processed()
	}
	if !c.ShouldReport() {
		t.Fatal("no report after half the receive requests")
	}
	if _, msgs := c.Report(); msgs != 32 {
		t.Fatalf("reported %d messages", msgs)
	}
	if c.Readable() != 4096-1024 || c.ReadCursor() != 1024 || !c.Arrived(1024) {
		t.Fatal("cursor arithmetic")
	}
}
