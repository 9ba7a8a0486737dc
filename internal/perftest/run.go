package perftest

import (
	"context"
	"encoding/binary"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/rsock-go/rsock/verbs"
)

// waitCQ waits for completions and polls them into wcs, failing after a
// stretch of cfg.Timeout without any.
func (s *side) waitCQ(ctx context.Context, wcs []verbs.WC) ([]verbs.WC, error) {
	for {
		n, err := s.cq.Poll(wcs)
		if err != nil {
			return nil, fmt.Errorf("poll CQ: %w", err)
		}
		if n > 0 {
			for _, wc := range wcs[:n] {
				if wc.Status != verbs.WCSuccess {
					return nil, fmt.Errorf("completion with error: %v", wc)
				}
			}
			return wcs[:n], nil
		}
		wctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
		err = s.cq.Wait(wctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, fmt.Errorf("no completion for %v: %w", s.cfg.Timeout, err)
		}
	}
}

// stepper walks an address through the cycle buffer as perftest does for
// bandwidth tests: by the message size rounded up to a cache line,
// wrapping to the start; a message larger than half the buffer always
// goes to the start.
type stepper struct {
	base, off, inc, cycle uint64
}

func newStepper(base uint64, size, cacheLine, cycle int) stepper {
	st := stepper{base: base, cycle: uint64(cycle)}
	if size <= cycle/2 {
		st.inc = uint64((size + cacheLine - 1) / cacheLine * cacheLine)
	}
	return st
}

func (st *stepper) next() uint64 {
	a := st.base + st.off
	st.off += st.inc
	if st.off >= st.cycle {
		st.off = 0
	}
	return a
}

// bwClient is a bandwidth client: Iters requests of Size bytes with at
// most TxDepth in flight, every CQMod-th (and the last) signaled. WRITE
// and READ tests first warm up with TxDepth requests, as perftest does.
func (s *side) bwClient(ctx context.Context, rem Dest, cycle, cacheLine int) (BWReport, error) {
	cfg := s.cfg
	op := map[Test]verbs.WROpcode{SendBW: verbs.WRSend, WriteBW: verbs.WRRDMAWrite, ReadBW: verbs.WRRDMARead}[cfg.Test]
	local := newStepper(s.mr.Addr(), cfg.Size, cacheLine, cycle)
	remote := newStepper(rem.VAddr, cfg.Size, cacheLine, cycle)
	sges := make([]verbs.SGE, cfg.TxDepth)
	wrs := make([]verbs.SendWR, 0, cfg.TxDepth)
	wcs := make([]verbs.WC, 16)
	post := func(first, n int, signal func(i int) bool) error {
		wrs = wrs[:0]
		for i := first; i < first+n; i++ {
			sge := &sges[len(wrs)]
			*sge = verbs.SGE{Addr: local.next(), Length: uint32(cfg.Size), LKey: s.mr.LKey()}
			wr := verbs.SendWR{ID: uint64(i + 1), Opcode: op, SGL: sges[len(wrs) : len(wrs)+1]}
			if op != verbs.WRSend {
				wr.RemoteAddr, wr.RKey = remote.next(), rem.RKey
			}
			if signal(i) {
				wr.Flags = verbs.SendSignaled
			}
			wrs = append(wrs, wr)
		}
		if _, err := s.qp.PostSend(wrs); err != nil {
			return fmt.Errorf("post send: %w", err)
		}
		return nil
	}

	if cfg.Test != SendBW {
		if err := post(0, cfg.TxDepth, func(int) bool { return true }); err != nil {
			return BWReport{}, fmt.Errorf("warm up: %w", err)
		}
		for done := 0; done < cfg.TxDepth; {
			got, err := s.waitCQ(ctx, wcs)
			if err != nil {
				return BWReport{}, fmt.Errorf("warm up: %w", err)
			}
			done += len(got)
		}
		local, remote = newStepper(s.mr.Addr(), cfg.Size, cacheLine, cycle), newStepper(rem.VAddr, cfg.Size, cacheLine, cycle)
	}

	signaled := func(i int) bool { return cfg.CQMod == 1 || i%cfg.CQMod == cfg.CQMod-1 || i == cfg.Iters-1 }
	scnt, ccnt := 0, 0
	start := time.Now()
	for ccnt < cfg.Iters {
		if n := min(cfg.Iters-scnt, cfg.TxDepth-(scnt-ccnt)); n > 0 {
			if err := post(scnt, n, signaled); err != nil {
				return BWReport{}, err
			}
			scnt += n
		}
		got, err := s.waitCQ(ctx, wcs)
		if err != nil {
			return BWReport{}, fmt.Errorf("after %d of %d completed: %w", ccnt, cfg.Iters, err)
		}
		for _, wc := range got {
			ccnt = max(ccnt, int(wc.WRID))
		}
	}
	return newBWReport(cfg.Size, cfg.Iters, time.Since(start)), nil
}

// postRecvs posts n receives of Size bytes into the receive half,
// stepping through the cycle buffer.
func (s *side) postRecvs(st *stepper, n int) error {
	if cap(s.rwrs) < n {
		s.rwrs, s.rsges = make([]verbs.RecvWR, n), make([]verbs.SGE, n)
	}
	wrs, sges := s.rwrs[:n], s.rsges[:n] // PostRecv copies them
	for i := range wrs {
		sges[i] = verbs.SGE{Addr: st.next(), Length: uint32(s.cfg.Size), LKey: s.mr.LKey()}
		wrs[i] = verbs.RecvWR{ID: 1, SGL: sges[i : i+1]}
	}
	if _, err := s.qp.PostRecv(wrs); err != nil {
		return fmt.Errorf("post recv: %w", err)
	}
	return nil
}

// sendServer is ib_send_bw's server: it keeps RxDepth receives posted
// (never more than Iters in all) until Iters messages arrived, each of
// exactly Size bytes.
func (s *side) sendServer(ctx context.Context, st *stepper) (BWReport, error) {
	cfg := s.cfg
	posted, rcnt := cfg.RxDepth, 0
	wcs := make([]verbs.WC, 16)
	var start time.Time
	for rcnt < cfg.Iters {
		got, err := s.waitCQ(ctx, wcs)
		if err != nil {
			return BWReport{}, fmt.Errorf("after %d of %d received: %w", rcnt, cfg.Iters, err)
		}
		if rcnt == 0 {
			start = time.Now()
		}
		for _, wc := range got {
			if wc.Opcode != verbs.WCRecv || wc.ByteLen != uint32(cfg.Size) {
				return BWReport{}, fmt.Errorf("message %d: %v, want a receive of %d bytes", rcnt+1, wc, cfg.Size)
			}
		}
		rcnt += len(got)
		if more := min(len(got), cfg.Iters-posted); more > 0 {
			if err := s.postRecvs(st, more); err != nil {
				return BWReport{}, err
			}
			posted += more
		}
	}
	return newBWReport(cfg.Size, cfg.Iters, time.Since(start)), nil
}

// latWrite is ib_write_lat's loop on either side. The server sends
// first. Each side waits until the last byte of the peer's message in its
// receive half holds the count of messages received so far, then WRITEs
// its next message, whose last byte carries its own count, and waits for
// that WRITE to complete; the server ends by waiting for the client's
// last message. It returns the post times.
func (s *side) latWrite(ctx context.Context, rem Dest, server bool) ([]time.Duration, error) {
	cfg := s.cfg
	postByte := &s.buf[cfg.Size-1]
	// The peer's WRITE lands in registered memory behind the engine's
	// back: read the aligned word holding the polled byte atomically,
	// so the loop really reloads it.
	// The buffer is page-aligned, so word alignment follows the index.
	at := s.buffSize + cfg.Size - 1
	pollWord := (*uint32)(unsafe.Pointer(&s.buf[at&^3]))
	polled := func() byte {
		var w [4]byte
		binary.NativeEndian.PutUint32(w[:], atomic.LoadUint32(pollWord))
		return w[at&3]
	}

	wr := []verbs.SendWR{{ID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{s.sendHalf(cfg.Size)}, RemoteAddr: rem.VAddr, RKey: rem.RKey}}
	wcs := make([]verbs.WC, 1)
	posted := make([]time.Duration, 0, cfg.Iters)
	start := time.Now()
	for scnt, rcnt := 0, 0; scnt < cfg.Iters || rcnt < cfg.Iters; {
		if rcnt < cfg.Iters && !(server && scnt == 0) {
			rcnt++
			if err := s.pollFor(ctx, polled, byte(rcnt)); err != nil {
				return nil, fmt.Errorf("waiting for message %d: %w", rcnt, err)
			}
		}
		if scnt < cfg.Iters {
			posted = append(posted, time.Since(start))
			scnt++
			*postByte = byte(scnt)
			if _, err := s.qp.PostSend(wr); err != nil {
				return nil, fmt.Errorf("post send %d: %w", scnt, err)
			}
			if _, err := s.waitCQ(ctx, wcs); err != nil {
				return nil, fmt.Errorf("completion of send %d: %w", scnt, err)
			}
		}
	}
	return posted, nil
}

// pollFor spins until polled returns want, yielding the processor
// between looks (the engine needs it to land the WRITE), and fails after
// a stretch of cfg.Timeout.
func (s *side) pollFor(ctx context.Context, polled func() byte, want byte) error {
	deadline := time.Now().Add(s.cfg.Timeout)
	for i := 0; polled() != want; i++ {
		runtime.Gosched()
		if i%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("nothing for %v", s.cfg.Timeout)
			}
		}
	}
	return nil
}
