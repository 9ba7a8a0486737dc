package verbsbench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rsock-go/rsock/verbs"
)

// postBatch is the most send requests handed to one PostSend call.
const postBatch = 16

// measured is what a client loop measured.
type measured struct {
	msgs    uint64
	elapsed time.Duration
	rtts    []time.Duration // write_lat only
}

// runBW keeps p.TxDepth WRITEs, READs or SENDs of p.Size bytes in flight,
// signaling every p.CQMod-th, until p.Iters are done or p.Duration has
// passed. Completions arrive in order on an RC QP, so a signaled
// completion of request i means requests 0…i are done.
func (e *endpoint) runBW(ctx context.Context, p, peer *Params) (measured, error) {
	var op verbs.WROpcode
	var want verbs.WCOpcode
	switch p.Test {
	case TestWriteBW:
		op, want = verbs.WRRDMAWrite, verbs.WCRDMAWrite
	case TestReadBW:
		op, want = verbs.WRRDMARead, verbs.WCRDMARead
	case TestSendBW:
		op, want = verbs.WRSend, verbs.WCSend
	default:
		return measured{}, fmt.Errorf("runBW: %v is not a bandwidth test", p.Test)
	}
	peerSlots := uint64(max(1, peer.Len/uint64(p.Size)))
	every := uint64(p.CQMod)
	depth := uint64(p.TxDepth)
	limit := p.Iters
	timed := p.Duration > 0
	if timed {
		limit = 1<<63 - 1
	}
	wrs := make([]verbs.SendWR, postBatch)
	sges := make([]verbs.SGE, postBatch)
	wcs := make([]verbs.WC, 64)
	var posted, completed uint64
	start := time.Now()
	deadline := start.Add(p.Duration)
	for completed < limit {
		if timed && limit == 1<<63-1 && time.Now().After(deadline) {
			// Stop after the next signaled request, so that the last
			// one posted reports completion.
			limit = (posted + every - 1) / every * every
			if limit == 0 {
				limit = every
			}
			if completed >= limit {
				break // every request posted is complete
			}
		}
		if n := min(depth-(posted-completed), limit-posted, postBatch); n > 0 {
			for k := range n {
				i := posted + k
				sges[k] = e.sge(i)
				wrs[k] = verbs.SendWR{ID: i, Opcode: op, SGL: sges[k : k+1]}
				if op != verbs.WRSend {
					wrs[k].RemoteAddr = peer.Addr + (i%peerSlots)*uint64(p.Size)
					wrs[k].RKey = peer.RKey
				}
				if (i+1)%every == 0 || i+1 == limit {
					wrs[k].Flags = verbs.SendSignaled
				}
			}
			k, err := e.qp.PostSend(wrs[:n])
			posted += uint64(k)
			if err != nil && !errors.Is(err, verbs.ErrQueueFull) {
				return measured{}, fmt.Errorf("post %v: %w", op, err)
			}
		}
		n, err := e.scq.Poll(wcs)
		if err != nil {
			return measured{}, pollErr(err)
		}
		for _, wc := range wcs[:n] {
			if wc.Status != verbs.WCSuccess {
				return measured{}, e.wcError(wc)
			}
			if wc.Opcode != want {
				return measured{}, fmt.Errorf("unexpected completion %v", wc)
			}
			completed = wc.WRID + 1
		}
		if n == 0 && posted > completed && (posted-completed == depth || posted == limit) {
			if err := waitCQ(ctx, e.scq); err != nil {
				return measured{}, err
			}
		}
	}
	return measured{msgs: completed, elapsed: time.Since(start)}, nil
}

// runPing is the client side of write_lat: it writes p.Size bytes with
// immediate data i into the server's buffer, waits for the server's
// answering write, and records the round trip.
func (e *endpoint) runPing(ctx context.Context, p, peer *Params) (measured, error) {
	if err := e.postRecvs(0, p.RxDepth, false); err != nil {
		return measured{}, err
	}
	var rtts []time.Duration
	if p.Iters > 0 {
		rtts = make([]time.Duration, 0, p.Iters)
	}
	sge := []verbs.SGE{e.sge(0)}
	wr := []verbs.SendWR{{Opcode: verbs.WRRDMAWriteWithImm, SGL: sge, RemoteAddr: peer.Addr, RKey: peer.RKey}}
	rwr := []verbs.RecvWR{{}}
	wcs := make([]verbs.WC, 16)
	every := uint64(p.CQMod)
	start := time.Now()
	deadline := start.Add(p.Duration)
	var i uint64
	for ; p.Duration > 0 || i < p.Iters; i++ {
		if p.Duration > 0 && i%64 == 0 && time.Now().After(deadline) {
			break
		}
		wr[0].ID = i
		wr[0].Imm = uint32(i)
		wr[0].Flags = 0
		if p.Size <= e.inline {
			wr[0].Flags = verbs.SendInline
		}
		if (i+1)%every == 0 {
			wr[0].Flags |= verbs.SendSignaled
		}
		t0 := time.Now()
		if _, err := e.qp.PostSend(wr); err != nil {
			return measured{}, fmt.Errorf("post write: %w", err)
		}
		wc, err := e.waitRecv(ctx, wcs[:1])
		if err != nil {
			return measured{}, err
		}
		rtts = append(rtts, time.Since(t0))
		if wc.Imm != uint32(i) {
			return measured{}, fmt.Errorf("answer %d carries immediate %d", i, wc.Imm)
		}
		rwr[0].ID = wc.WRID
		if _, err := e.qp.PostRecv(rwr); err != nil {
			return measured{}, fmt.Errorf("post receive: %w", err)
		}
		if err := e.drainSends(wcs); err != nil {
			return measured{}, err
		}
	}
	return measured{msgs: i, elapsed: time.Since(start), rtts: rtts}, nil
}

// waitRecv waits for one successful WRITE_WITH_IMM receive completion.
func (e *endpoint) waitRecv(ctx context.Context, wcs []verbs.WC) (verbs.WC, error) {
	for {
		n, err := e.rcq.Poll(wcs[:1])
		if err != nil {
			return verbs.WC{}, pollErr(err)
		}
		if n == 1 {
			wc := wcs[0]
			if wc.Status != verbs.WCSuccess {
				return wc, e.wcError(wc)
			}
			if wc.Opcode != verbs.WCRecvRDMAWithImm || wc.Flags&verbs.WCWithImm == 0 {
				return wc, fmt.Errorf("unexpected completion %v", wc)
			}
			return wc, nil
		}
		if err := waitCQ(ctx, e.rcq); err != nil {
			return verbs.WC{}, err
		}
	}
}

// drainSends polls the send CQ without waiting and checks what it finds.
func (e *endpoint) drainSends(wcs []verbs.WC) error {
	for {
		n, err := e.scq.Poll(wcs)
		if err != nil {
			return pollErr(err)
		}
		for _, wc := range wcs[:n] {
			if wc.Status != verbs.WCSuccess {
				return e.wcError(wc)
			}
		}
		if n < len(wcs) {
			return nil
		}
	}
}

// serverRun is the server's view of a running test: the test's context,
// and the client's Done once it arrives.
type serverRun struct {
	ctx     context.Context // cancelled when the client or connection fails
	waitCtx context.Context // also cancelled when Done arrives
	doneC   chan struct{}   // closed when Done arrives
	done    Done            // valid after doneC is closed
	grace   time.Duration   // how long to wait for the rest after Done
}

// finished reports whether Done arrived and, if so, its content.
func (s *serverRun) finished() (Done, bool) {
	select {
	case <-s.doneC:
		return s.done, true
	default:
		return Done{}, false
	}
}

// wait waits for cq to hold a completion. It returns nil early when Done
// arrives; after Done it waits at most the grace period, and not at all
// if have already reaches Done's count.
func (s *serverRun) wait(cq verbs.CQ, have uint64) error {
	if d, ok := s.finished(); ok {
		if have >= d.Msgs {
			return nil // Done arrived after the caller's check
		}
		ctx, cancel := context.WithTimeout(s.ctx, s.grace)
		defer cancel()
		if err := cq.Wait(ctx); err != nil {
			if c := context.Cause(s.ctx); c != nil {
				return c
			}
			return fmt.Errorf("client reported %d messages but %d arrived", d.Msgs, have)
		}
		return nil
	}
	if err := cq.Wait(s.waitCtx); err != nil {
		if c := context.Cause(s.ctx); c != nil {
			return c
		}
		if _, ok := s.finished(); ok {
			return nil
		}
		return err
	}
	return nil
}

// waitDone waits for the client's Done.
func (s *serverRun) waitDone() (Done, error) {
	select {
	case <-s.doneC:
		return s.done, nil
	case <-s.ctx.Done():
		return Done{}, context.Cause(s.ctx)
	}
}

// runRecv is the server side of send_bw: it keeps p.RxDepth receives
// posted, counts their completions and checks each carries p.Size bytes,
// until the count reaches the client's Done.
func (e *endpoint) runRecv(s *serverRun, p *Params) (Report, error) {
	var r Report
	wcs := make([]verbs.WC, 64)
	wrs := make([]verbs.RecvWR, len(wcs))
	sges := make([]verbs.SGE, len(wcs))
	for {
		if d, ok := s.finished(); ok && r.Msgs >= d.Msgs {
			if r.Msgs > d.Msgs {
				return r, fmt.Errorf("client reported %d messages but %d arrived", d.Msgs, r.Msgs)
			}
			return r, nil
		}
		n, err := e.rcq.Poll(wcs)
		if err != nil {
			return r, pollErr(err)
		}
		for k, wc := range wcs[:n] {
			if wc.Status != verbs.WCSuccess {
				return r, e.wcError(wc)
			}
			if wc.Opcode != verbs.WCRecv || int(wc.ByteLen) != p.Size {
				return r, fmt.Errorf("unexpected completion %v (want RECV of %d bytes)", wc, p.Size)
			}
			r.Msgs++
			r.Bytes += uint64(wc.ByteLen)
			// Post it again, into the slot it used.
			sges[k] = e.sge(wc.WRID)
			wrs[k] = verbs.RecvWR{ID: wc.WRID, SGL: sges[k : k+1]}
		}
		if n > 0 {
			if _, err := e.qp.PostRecv(wrs[:n]); err != nil {
				return r, fmt.Errorf("post receive: %w", err)
			}
			continue
		}
		if err := s.wait(e.rcq, r.Msgs); err != nil {
			return r, err
		}
	}
}

// runPong is the server side of write_lat: it answers each write from the
// client with a write of the same immediate data, until the count reaches
// the client's Done. The receives are already posted.
func (e *endpoint) runPong(s *serverRun, p, peer *Params) (Report, error) {
	var r Report
	sge := []verbs.SGE{e.sge(0)}
	wr := []verbs.SendWR{{Opcode: verbs.WRRDMAWriteWithImm, SGL: sge, RemoteAddr: peer.Addr, RKey: peer.RKey}}
	rwr := []verbs.RecvWR{{}}
	wcs := make([]verbs.WC, 16)
	every := uint64(p.CQMod)
	for {
		if d, ok := s.finished(); ok && r.Msgs >= d.Msgs {
			if r.Msgs > d.Msgs {
				return r, fmt.Errorf("client reported %d round trips but %d writes arrived", d.Msgs, r.Msgs)
			}
			return r, nil
		}
		n, err := e.rcq.Poll(wcs[:1])
		if err != nil {
			return r, pollErr(err)
		}
		if n == 0 {
			if err := s.wait(e.rcq, r.Msgs); err != nil {
				return r, err
			}
			continue
		}
		wc := wcs[0]
		if wc.Status != verbs.WCSuccess {
			return r, e.wcError(wc)
		}
		if wc.Opcode != verbs.WCRecvRDMAWithImm || wc.Imm != uint32(r.Msgs) {
			return r, fmt.Errorf("unexpected completion %v (want write %d with immediate)", wc, r.Msgs)
		}
		rwr[0].ID = wc.WRID
		if _, err := e.qp.PostRecv(rwr); err != nil {
			return r, fmt.Errorf("post receive: %w", err)
		}
		wr[0].ID = r.Msgs
		wr[0].Imm = wc.Imm
		wr[0].Flags = 0
		if p.Size <= e.inline {
			wr[0].Flags = verbs.SendInline
		}
		if (r.Msgs+1)%every == 0 {
			wr[0].Flags |= verbs.SendSignaled
		}
		if _, err := e.qp.PostSend(wr); err != nil {
			return r, fmt.Errorf("post write: %w", err)
		}
		r.Msgs++
		r.Bytes += uint64(wc.ByteLen)
		if err := e.drainSends(wcs); err != nil {
			return r, err
		}
	}
}
