package services

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Load is how a client is driven.
type Load struct {
	// Callers call at once, each in a loop, one call at a time.
	Callers int
	// Warmup runs before the measurement, uncounted: connections open,
	// pools fill, the runtime settles. It lasts at least until every
	// caller has had its first reply.
	Warmup time.Duration
	// Duration is the measurement's length.
	Duration time.Duration
	// Stuck bounds the wait for a call: for a caller's first reply
	// after Warmup, and for the calls still running when the window
	// ends; a call that takes longer fails. Default DefaultStuck.
	Stuck time.Duration
	// Mark, if set, is called as the measurement starts and as it ends
	// (start true, then false), to read CPU clocks at the same moments.
	Mark func(start bool)
}

// DefaultStuck is Load.Stuck's default.
const DefaultStuck = 10 * time.Second

// Result is one measurement.
type Result struct {
	// Requests are the calls that started in the measurement window and
	// completed with a correct reply; Seconds is the window's length.
	Requests int
	Seconds  float64
	// P50, P99 and P999 are percentiles of those calls' latencies (the
	// time from the call until its checked reply), and Mean their mean.
	P50, P99, P999, Mean time.Duration
	// FirstReplies is how long it took until every caller had its
	// first reply: connections opened, handshakes, first calls.
	FirstReplies time.Duration
	// Errors counts failed calls (during warm-up too); a caller stops at
	// its first. Err is the first.
	Errors int
	Err    error
}

// ReqPerSec is Requests per second of the window.
func (r Result) ReqPerSec() float64 {
	if r.Seconds <= 0 {
		return 0
	}
	return float64(r.Requests) / r.Seconds
}

// RunLoad drives c with l.Callers goroutines for l.Warmup (and until
// each has had a reply), then measures for l.Duration. It fails when a
// call fails, or when no call completed in the window.
func RunLoad(ctx context.Context, c Client, l Load) (Result, error) {
	if l.Callers < 1 || l.Duration <= 0 || l.Warmup < 0 || l.Stuck < 0 {
		return Result{}, fmt.Errorf("services: load of %d callers for %v after %v", l.Callers, l.Duration, l.Warmup)
	}
	if l.Stuck == 0 {
		l.Stuck = DefaultStuck
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	// The window, in nanoseconds since start; zero until it is known.
	start := time.Now()
	var measure, end atomic.Int64
	var firsts sync.WaitGroup
	firsts.Add(l.Callers)
	lat := make([][]time.Duration, l.Callers)
	errs := make([]error, l.Callers)
	var callers sync.WaitGroup
	for i := range l.Callers {
		callers.Go(func() {
			var own []time.Duration
			first := true
			defer func() {
				if first {
					firsts.Done()
				}
				lat[i] = own
			}()
			for seq := uint64(0); ; seq++ {
				t0 := time.Now()
				since := int64(t0.Sub(start))
				if e := end.Load(); (e != 0 && since >= e) || ctx.Err() != nil {
					return
				}
				err := c.Call(ctx, i, seq)
				if err != nil {
					if cause := context.Cause(ctx); cause != nil {
						err = fmt.Errorf("%w (%w)", cause, err)
					}
					errs[i] = fmt.Errorf("caller %d, call %d: %w", i, seq, err)
					return
				}
				if first {
					first = false
					firsts.Done()
				}
				if m := measure.Load(); m != 0 && since >= m {
					own = append(own, time.Since(t0))
				}
			}
		})
	}
	done := make(chan struct{})
	go func() { callers.Wait(); close(done) }()
	firstsDone := make(chan struct{})
	var firstReplies atomic.Int64
	go func() { firsts.Wait(); firstReplies.Store(int64(time.Since(start))); close(firstsDone) }()
	// The window opens after the warm-up, once every caller has had a
	// reply (or has stopped).
	var fail error
	if waitUntil(start.Add(l.Warmup), done, ctx) {
		select {
		case <-firstsDone:
		case <-time.After(l.Stuck):
			fail = fmt.Errorf("services: a caller had no reply %v after the warm-up", l.Stuck)
		case <-ctx.Done():
		}
	}
	opened := false
	if fail == nil && ctx.Err() == nil {
		select {
		case <-done:
		default:
			if l.Mark != nil {
				l.Mark(true)
			}
			m := time.Since(start)
			measure.Store(int64(m))
			end.Store(int64(m + l.Duration))
			opened = true
			waitUntil(start.Add(m+l.Duration), done, ctx)
			if l.Mark != nil {
				l.Mark(false)
			}
		}
	}
	if fail == nil {
		fail = fmt.Errorf("services: a call had no reply %v after the window ended", l.Stuck)
	}
	stuck := time.AfterFunc(l.Stuck, func() { cancel(fail) })
	if !opened {
		// Stop the callers now: the window never opened.
		end.Store(1)
		cancel(fail)
	}
	callers.Wait()
	stuck.Stop()
	var all []time.Duration
	var r Result
	<-firstsDone
	r.FirstReplies = time.Duration(firstReplies.Load())
	for i := range l.Callers {
		all = append(all, lat[i]...)
		if errs[i] != nil {
			r.Errors++
			if r.Err == nil {
				r.Err = errs[i]
			}
		}
	}
	r.Requests, r.Seconds = len(all), l.Duration.Seconds()
	if len(all) > 0 {
		slices.Sort(all)
		var sum time.Duration
		for _, d := range all {
			sum += d
		}
		r.Mean = sum / time.Duration(len(all))
		r.P50, r.P99, r.P999 = percentile(all, 0.50), percentile(all, 0.99), percentile(all, 0.999)
	}
	switch {
	case r.Err != nil:
		return r, r.Err
	case !opened && ctx.Err() != nil:
		return r, context.Cause(ctx)
	case r.Requests == 0:
		return r, errors.New("services: no call completed in the measurement window")
	}
	return r, nil
}

// waitUntil waits for t, and reports whether it came before done closed
// or ctx ended.
func waitUntil(t time.Time, done <-chan struct{}, ctx context.Context) bool {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-done:
	case <-ctx.Done():
	}
	return false
}

// percentile is the q-quantile of sorted (nearest rank).
func percentile(sorted []time.Duration, q float64) time.Duration {
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}
