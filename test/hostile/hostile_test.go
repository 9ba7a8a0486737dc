//go:build linux

package hostile

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/rsock-go/rsock/internal/streambench"
	"github.com/rsock-go/rsock/rsock"
	"github.com/rsock-go/rsock/verbs"
	"github.com/rsock-go/rsock/verbs/softroce/wire"
)

var soak = flag.Bool("hostile.soak", false, "send fifty times as many forged packets, over a longer transfer")

// flow carries a deterministic pattern from w to r, paced with short
// pauses, until stop is closed and at least min bytes went, but never more
// than maxFlow bytes (so that PSNs stay within 2^19 of the initial ones,
// which the forged PSNs count on); then it closes w for writing. r checks
// every byte.
type flow struct {
	sent, got int64
	err       error
}

// maxFlow bounds a flow: 384 Ki packets of 1 KiB, and control messages.
const maxFlow = 384 << 20

func runFlow(w, r *rsock.Stream, seed uint64, min int64, stop <-chan struct{}, wg *sync.WaitGroup) *flow {
	f := &flow{}
	var werr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		var inner sync.WaitGroup
		inner.Add(1)
		go func() {
			defer inner.Done()
			p := streambench.NewPattern(seed, 0)
			buf := make([]byte, 32<<10+13)
			for {
				select {
				case <-stop:
					if f.sent >= min {
						werr = w.CloseWrite()
						return
					}
				default:
				}
				if f.sent+int64(len(buf)) > maxFlow {
					<-stop
					werr = w.CloseWrite()
					return
				}
				p.Fill(buf)
				n, err := w.Write(buf)
				f.sent += int64(n)
				if err != nil {
					werr = err
					return
				}
				time.Sleep(time.Millisecond)
			}
		}()
		p := streambench.NewPattern(seed, 0)
		buf := make([]byte, 64<<10)
		for {
			n, err := r.Read(buf)
			if off, got, want, ok := p.Check(buf[:n]); !ok {
				f.err = fmt.Errorf("byte %d is %#x, want %#x", off, got, want)
				break
			}
			f.got += int64(n)
			if err == io.EOF {
				break
			}
			if err != nil {
				f.err = err
				break
			}
		}
		inner.Wait()
		f.err = errors.Join(f.err, werr)
	}()
	return f
}

// counterSum picks counters out of a snapshot.
type counterSum struct {
	name string
	of   func(c verbs.Counters) uint64
}

var (
	icrcErrors  = counterSum{"ICRCErrors", func(c verbs.Counters) uint64 { return c.ICRCErrors }}
	unparsed    = counterSum{"Malformed+UnknownQP", func(c verbs.Counters) uint64 { return c.Malformed + c.UnknownQP }}
	unknownQP   = counterSum{"UnknownQP", func(c verbs.Counters) uint64 { return c.UnknownQP }}
	wrongPeer   = counterSum{"WrongPeer", func(c verbs.Counters) uint64 { return c.WrongPeer }}
	duplicates  = counterSum{"Duplicates", func(c verbs.Counters) uint64 { return c.Duplicates }}
	outOfSeq    = counterSum{"OutOfSequence", func(c verbs.Counters) uint64 { return c.OutOfSequence }}
	unexpectedR = counterSum{"UnexpectedResponses", func(c verbs.Counters) uint64 { return c.UnexpectedResponses }}
	// echoes counts ECN echoes: heard (a queue pair with ECN) or dropped
	// as unexpected (one without).
	echoes = counterSum{"ECNEchoesRecv+UnexpectedResponses", func(c verbs.Counters) uint64 { return c.ECNEchoesRecv + c.UnexpectedResponses }}
	// dupEchoes counts duplicate echoes: heard (a queue pair with
	// duplicate echoes) or dropped as unexpected (one without).
	dupEchoes = counterSum{"DupEchoesRecv+UnexpectedResponses", func(c verbs.Counters) uint64 { return c.DupEchoesRecv + c.UnexpectedResponses }}
	// holdEchoes counts hold echoes: heard (a queue pair with hold
	// echoes) or dropped as unexpected (one without).
	holdEchoes = counterSum{"HoldEchoesRecv+UnexpectedResponses", func(c verbs.Counters) uint64 { return c.HoldEchoesRecv + c.UnexpectedResponses }}
)

// attack is one class of forged packets aimed at a victim.
type attack struct {
	name string
	// build returns the packets, the address they claim to come from and
	// the counter they must move.
	build func(f *forger, v, peer *side, n int) (pkts [][]byte, src netip.AddrPort, c counterSum)
	// exact says no legitimate packet moves the counter, so it must grow
	// by exactly the number sent.
	exact bool
	// flood sends the packets without pauses, so some may be lost to a
	// full socket buffer: the counter must only move.
	flood bool
	// runt says the packets are too short for the ICRC to be checked: a
	// wrong one moves the same counter.
	runt bool
}

// ringOutside returns an address outside v's advertised ring: just
// before it, just after it, or in v's unadvertised canary.
func ringOutside(f *forger, v *side) uint64 {
	p := v.params
	switch f.rnd.IntN(3) {
	case 0:
		return p.RingAddr - 1 - uint64(f.rnd.IntN(1<<16))
	case 1:
		return p.RingAddr + uint64(p.RingSize) + uint64(f.rnd.IntN(1<<16))
	}
	return v.canaryMR.Addr() + uint64(f.rnd.IntN(len(v.canary)))
}

// behind returns a PSN behind every PSN the peer's requester has sent:
// duplicates to the victim's responder.
func behind(f *forger, peer *side) uint32 { return f.psnNear(peer.params.PSN, -(1 << 20), -1) }

// ahead returns a PSN far ahead of anything the peer's requester sent.
func ahead(f *forger, peer *side) uint32 { return f.psnNear(peer.params.PSN, 1<<21, 1<<22) }

// neverOutstanding returns a PSN that the victim's requester has not
// sent, or acknowledged long ago: before its initial PSN or far past it.
func neverOutstanding(f *forger, v *side) uint32 {
	if f.rnd.IntN(2) == 0 {
		return f.psnNear(v.params.PSN, -(1 << 20), -1)
	}
	return f.psnNear(v.params.PSN, 1<<22, 1<<23-1)
}

var attacks = []attack{
	{name: "random bytes", exact: true, build: func(f *forger, v, peer *side, n int) ([][]byte, netip.AddrPort, counterSum) {
		var ps [][]byte
		for range n {
			ps = append(ps, f.garbage(wire.BTHLen, 1100))
		}
		return ps, peer.link, unparsed
	}},
	{name: "runts", exact: true, runt: true, build: func(f *forger, v, peer *side, n int) ([][]byte, netip.AddrPort, counterSum) {
		var ps [][]byte
		for range n {
			ps = append(ps, f.garbage(0, wire.BTHLen-1)) // with the ICRC, shorter than a BTH and an ICRC
		}
		return ps, peer.link, unparsed
	}},
	{name: "requests to guessed QPNs", exact: true, build: func(f *forger, v, peer *side, n int) ([][]byte, netip.AddrPort, counterSum) {
		var ps [][]byte
		for range n {
			ps = append(ps, f.request(f.qpnGuess(v.params.QPN), f.rnd.Uint32(), f.rnd.Uint64(), f.rnd.Uint32()))
		}
		return ps, peer.link, unknownQP
	}},
	{name: "responses to guessed QPNs", exact: true, build: func(f *forger, v, peer *side, n int) ([][]byte, netip.AddrPort, counterSum) {
		var ps [][]byte
		for range n {
			ps = append(ps, f.response(f.rnd.IntN(len(respKinds)), f.qpnGuess(v.params.QPN), f.rnd.Uint32()))
		}
		return ps, peer.link, unknownQP
	}},
	{name: "requests from a stranger", exact: true, build: func(f *forger, v, peer *side, n int) ([][]byte, netip.AddrPort, counterSum) {
		var ps [][]byte
		for range n {
			ps = append(ps, f.request(v.params.QPN, f.rnd.Uint32(), v.params.RingAddr, v.params.RingRKey))
		}
		// Any source port of the peer's address is the peer's (RoCEv2
		// uses it for entropy), so the stranger has an address of its own.
		return ps, netip.AddrPortFrom(v.stranger, peer.link.Port()), wrongPeer
	}},
	{name: "spoofed duplicate requests with guessed rkeys", build: func(f *forger, v, peer *side, n int) ([][]byte, netip.AddrPort, counterSum) {
		var ps [][]byte
		for range n {
			ps = append(ps, f.request(v.params.QPN, behind(f, peer), ringOutside(f, v), f.rnd.Uint32()))
		}
		return ps, peer.link, duplicates
	}},
	{name: "spoofed duplicate READs and WRITEs outside the ring", build: func(f *forger, v, peer *side, n int) ([][]byte, netip.AddrPort, counterSum) {
		var ps [][]byte
		for range n {
			ps = append(ps, f.request(v.params.QPN, behind(f, peer), ringOutside(f, v), v.params.RingRKey))
		}
		return ps, peer.link, duplicates
	}},
	{name: "spoofed requests far ahead", build: func(f *forger, v, peer *side, n int) ([][]byte, netip.AddrPort, counterSum) {
		var ps [][]byte
		for range n {
			va := v.params.RingAddr + uint64(f.rnd.IntN(v.params.RingSize))
			if f.rnd.IntN(2) == 0 {
				va = ringOutside(f, v)
			}
			ps = append(ps, f.request(v.params.QPN, ahead(f, peer), va, v.params.RingRKey))
		}
		return ps, peer.link, outOfSeq
	}},
	{name: "spoofed responses outside the outstanding range", build: func(f *forger, v, peer *side, n int) ([][]byte, netip.AddrPort, counterSum) {
		var ps [][]byte
		for i := range n {
			ps = append(ps, f.response(i%len(respKinds), v.params.QPN, neverOutstanding(f, v)))
		}
		return ps, peer.link, unexpectedR
	}},
	{name: "spoofed ECN echoes implausibly far ahead", build: func(f *forger, v, peer *side, n int) ([][]byte, netip.AddrPort, counterSum) {
		// No queue marks in this lab: the real CE count stays 0, and a
		// count more than 2^20 ahead of it (or, wrapped, behind it) must
		// not be believed; testForged checks at the end that no echoed
		// mark was. (Not exact: a go-back-N queue pair counts them as
		// unexpected responses, as it does stale real ones.)
		var ps [][]byte
		for range n {
			ps = append(ps, f.ecnEcho(v.params.QPN, f.rnd.Uint32(), 1<<20+1+f.rnd.Uint32N(^uint32(0)-1<<20)))
		}
		return ps, peer.link, echoes
	}},
	{name: "spoofed duplicate echoes", build: func(f *forger, v, peer *side, n int) ([][]byte, netip.AddrPort, counterSum) {
		// Each claims up to 2^20 duplicates of a PSN near the victim's
		// latest: believed only up to the resends the victim made, so
		// that they can undo no reduction that resends did not make;
		// testForged checks at the end that no more reductions were
		// undone than resends went out. (Not exact, as ECN echoes.)
		var ps [][]byte
		for range n {
			ps = append(ps, f.dupEcho(v.params.QPN, f.rnd.Uint32N(1<<20), f.psnNear(v.params.PSN, -64, 1<<16)))
		}
		return ps, peer.link, dupEchoes
	}},
	{name: "spoofed hold echoes", build: func(f *forger, v, peer *side, n int) ([][]byte, netip.AddrPort, counterSum) {
		// Each claims a hold of up to 2^32 µs for a PSN near the
		// victim's latest: the requester believes at most a second, and
		// keeps an eighth of every round trip it samples, so that forged
		// holds can at most double what it has in flight (Inflight), as
		// a forged ACK can; the flows must stay intact. (Not exact, as
		// ECN echoes.)
		var ps [][]byte
		for range n {
			ps = append(ps, f.holdEcho(v.params.QPN, f.rnd.Uint32(), f.psnNear(v.params.PSN, -64, 1<<16)))
		}
		return ps, peer.link, holdEchoes
	}},
	{name: "flood of one spoofed duplicate", flood: true, build: func(f *forger, v, peer *side, n int) ([][]byte, netip.AddrPort, counterSum) {
		p := f.request(v.params.QPN, behind(f, peer), ringOutside(f, v), v.params.RingRKey)
		ps := make([][]byte, 5*n)
		for i := range ps {
			ps[i] = p
		}
		return ps, peer.link, duplicates
	}},
}

// waitCounter waits until c of dev reached want, or fails after a
// generous bound (the packets are sent already; this waits for delivery).
func waitCounter(t *testing.T, v *side, c counterSum, want uint64) uint64 {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		got := c.of(v.dev.Counters())
		if got >= want || time.Now().After(deadline) {
			return got
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestForgedPackets runs every attack, with a correct and a wrong ICRC,
// against both ends of a live stream, in both loss-recovery modes, and
// checks the stream, the canaries and the counters.
func TestForgedPackets(t *testing.T) {
	for _, c := range []struct {
		name   string
		cfg    rsock.Config
		strict bool
	}{
		{"selective", rsock.Config{ECN: true}, true},
		{"go-back-N", rsock.Config{GoBackN: true}, true},
		// The links as netconn opens them: a forged packet with a wrong
		// ICRC must still be dropped and counted as an ICRC error.
		{"selective/netconn-icrc", rsock.Config{ECN: true}, false},
	} {
		t.Run(c.name, func(t *testing.T) { testForged(t, c.cfg, c.strict) })
	}
}

func testForged(t *testing.T, cfg rsock.Config, strictICRC bool) {
	n, minBytes := 1000, int64(32<<20)
	if *soak {
		n, minBytes = 50000, 256<<20
	}
	a, b := newSides(t, cfg, strictICRC)
	sa, sb := connect(t, a, b)
	defer sb.Close()
	defer sa.Close()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	flows := []*flow{runFlow(sa, sb, 1, minBytes, stop, &wg), runFlow(sb, sa, 2, minBytes, stop, &wg)}
	stopped := false
	defer func() {
		if !stopped {
			close(stop)
			sa.Close()
			sb.Close()
			wg.Wait()
		}
	}()

	f := newForger(uint64(n))
	for _, victim := range [][2]*side{{b, a}, {a, b}} {
		v, peer := victim[0], victim[1]
		for _, at := range attacks {
			for _, good := range []bool{true, false} {
				pkts, src, c := at.build(f, v, peer, n)
				if !good && !at.runt {
					c = icrcErrors
				}
				all := v.dev.Counters()
				before := c.of(all)
				burst := 32
				if at.flood {
					burst = 0
				}
				if err := peer.raw.sendAll(src, v.link, pkts, good, burst); err != nil {
					t.Fatalf("sending %s: %v", at.name, err)
				}
				want := before + uint64(len(pkts))
				exact := at.exact || !good
				if at.flood {
					want = before + 1
				}
				got := waitCounter(t, v, c, want)
				desc := fmt.Sprintf("%s at %s (ICRC good: %v)", at.name, v.name, good)
				switch {
				case got < want:
					t.Errorf("%s: %d packets moved %s by %d, want at least %d\nbefore %+v\nafter  %+v", desc, len(pkts), c.name, got-before, want-before, all, v.dev.Counters())
				case exact && !at.flood && got != want:
					t.Errorf("%s: %d packets moved %s by %d", desc, len(pkts), c.name, got-before)
				}
			}
		}
	}
	close(stop)
	wg.Wait()
	stopped = true
	for i, fl := range flows {
		if fl.err != nil {
			t.Errorf("flow %d: %v", i, fl.err)
		}
		if fl.got != fl.sent || fl.sent < minBytes {
			t.Errorf("flow %d: sent %d bytes, received %d (at least %d were due)", i, fl.sent, fl.got, minBytes)
		}
		t.Logf("flow %d: %d bytes intact", i, fl.got)
	}
	a.checkCanary(t)
	b.checkCanary(t)
	for _, s := range []*side{a, b} {
		t.Logf("%s: %+v", s.name, s.dev.Counters())
		// Nothing marks CE in this lab: every echoed mark was forged.
		if c := s.dev.Counters(); c.ECNMarksEchoed != 0 || c.ECNCERecv != 0 {
			t.Errorf("%s believed %d echoed CE marks (%d CE received) where nothing marks", s.name, c.ECNMarksEchoed, c.ECNCERecv)
		}
		if c := s.dev.Counters(); c.CongestionUndos > c.Retransmits {
			t.Errorf("%s undid %d reductions with %d resends", s.name, c.CongestionUndos, c.Retransmits)
		}
	}
}
