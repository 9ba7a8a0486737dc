package softroce

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/rsock-go/rsock/verbs"
)

// BenchmarkWriteBW is shaped like perftest's ib_write_bw: one side keeps
// up to 64 RDMA WRITEs of 64 KiB in flight over loopback UDP at MTU 4096,
// signaling every 16th.
func BenchmarkWriteBW(b *testing.B) {
	for _, size := range []int{4 << 10, 64 << 10} {
		b.Run(byteSize(size), func(b *testing.B) {
			o := pairOpts{mtu: verbs.MTU4096, bufSize: 64 * size, sendWR: 128}
			a, p := newPair(b, udpLinks, noFaults, o)
			const depth, every = 64, 16
			wr := make([]verbs.SendWR, 1)
			sge := make([]verbs.SGE, 1)
			wcs := make([]verbs.WC, 16)
			ctx := context.Background()
			outstanding := 0
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for outstanding >= depth {
					n, err := a.scq.Poll(wcs)
					if err != nil {
						b.Fatal(err)
					}
					for _, wc := range wcs[:n] {
						if wc.Status != verbs.WCSuccess {
							b.Fatal(wc)
						}
						outstanding -= every
					}
					if n == 0 {
						a.scq.Wait(ctx)
					}
				}
				slot := i % 64
				sge[0] = a.sge(slot*size, size)
				wr[0] = verbs.SendWR{ID: uint64(i), Opcode: verbs.WRRDMAWrite, SGL: sge,
					RemoteAddr: p.mr.Addr() + uint64(slot*size), RKey: p.mr.RKey()}
				if i%every == every-1 || i == b.N-1 {
					wr[0].Flags = verbs.SendSignaled
				}
				if _, err := a.qp.PostSend(wr); err != nil {
					b.Fatal(err)
				}
				outstanding++
			}
			for outstanding > 0 && outstanding > (b.N%every) {
				n, _ := a.scq.Poll(wcs)
				outstanding -= n * every
				if n == 0 {
					a.scq.Wait(ctx)
				}
			}
			b.StopTimer()
			c := a.dev.Counters()
			b.ReportMetric(float64(c.Retransmits)/float64(b.N), "retrans/op")
		})
	}
}

// BenchmarkWriteLat is shaped like ib_write_lat: the two sides bounce a
// 64-byte RDMA WRITE_WITH_IMM back and forth; the metrics are half the
// round trip, as perftest reports.
func BenchmarkWriteLat(b *testing.B) {
	const size = 64
	o := pairOpts{mtu: verbs.MTU4096, bufSize: 4096}
	a, p := newPair(b, udpLinks, noFaults, o)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	// The peer answers each write with a write.
	go func() {
		done <- pong(ctx, p, a, b.N)
	}()
	rtts := make([]time.Duration, 0, b.N)
	wr := make([]verbs.SendWR, 1)
	rwr := make([]verbs.RecvWR, 1)
	wcs := make([]verbs.WC, 1)
	sge := []verbs.SGE{a.sge(0, size)}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		rwr[0] = verbs.RecvWR{ID: uint64(i)}
		if _, err := a.qp.PostRecv(rwr); err != nil {
			b.Fatal(err)
		}
		wr[0] = verbs.SendWR{ID: uint64(i), Opcode: verbs.WRRDMAWriteWithImm, Flags: verbs.SendInline,
			SGL: sge, RemoteAddr: p.mr.Addr(), RKey: p.mr.RKey()}
		if i%64 == 63 {
			wr[0].Flags |= verbs.SendSignaled
		}
		if _, err := a.qp.PostSend(wr); err != nil {
			b.Fatal(err)
		}
		if err := pollOne(ctx, a.rcq, wcs); err != nil {
			b.Fatal(err)
		}
		rtts = append(rtts, time.Since(start))
		for {
			n, _ := a.scq.Poll(wcs)
			if n == 0 {
				break
			}
		}
	}
	b.StopTimer()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	slices.Sort(rtts)
	q := func(f float64) float64 { return float64(rtts[int(f*float64(len(rtts)-1))].Nanoseconds()) / 2000 }
	b.ReportMetric(q(0.5), "p50-µs")
	b.ReportMetric(q(0.99), "p99-µs")
}

// pong answers n writes from peer with writes back.
func pong(ctx context.Context, me, peer *node, n int) error {
	wr := make([]verbs.SendWR, 1)
	rwr := make([]verbs.RecvWR, 1)
	wcs := make([]verbs.WC, 1)
	sge := []verbs.SGE{me.sge(0, 64)}
	for i := 0; i < n; i++ {
		rwr[0] = verbs.RecvWR{ID: uint64(i)}
		if _, err := me.qp.PostRecv(rwr); err != nil {
			return err
		}
		if err := pollOne(ctx, me.rcq, wcs); err != nil {
			return err
		}
		wr[0] = verbs.SendWR{ID: uint64(i), Opcode: verbs.WRRDMAWriteWithImm, Flags: verbs.SendInline,
			SGL: sge, RemoteAddr: peer.mr.Addr(), RKey: peer.mr.RKey()}
		if i%64 == 63 {
			wr[0].Flags |= verbs.SendSignaled
		}
		if _, err := me.qp.PostSend(wr); err != nil {
			return err
		}
		for {
			k, _ := me.scq.Poll(wcs)
			if k == 0 {
				break
			}
		}
	}
	return nil
}

// pollOne waits for one successful completion.
func pollOne(ctx context.Context, cq verbs.CQ, wcs []verbs.WC) error {
	for {
		n, err := cq.Poll(wcs[:1])
		if err != nil {
			return err
		}
		if n == 1 {
			if wcs[0].Status != verbs.WCSuccess {
				return &wcError{wcs[0]}
			}
			return nil
		}
		if err := cq.Wait(ctx); err != nil {
			return err
		}
	}
}

type wcError struct{ wc verbs.WC }

func (e *wcError) Error() string { return e.wc.String() }

func byteSize(n int) string {
	switch {
	case n >= 1<<20:
		return itoa(n>>20) + "MiB"
	case n >= 1<<10:
		return itoa(n>>10) + "KiB"
	}
	return itoa(n) + "B"
}

func itoa(n int) string { return strconv.Itoa(n) }
