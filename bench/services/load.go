package services

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Load is how a client is driven.
type Load struct {
	// Callers call at once, each in a loop, one call at a time.
	Callers int
	// Warmup runs before the measurement, uncounted: connections open,
	// pools fill, the runtime settles.
	Warmup time.Duration
	// Duration is the measurement's length.
	Duration time.Duration
	// Mark, if set, is called as the measurement starts and as it ends
	// (start true, then false), to read CPU clocks at the same moments.
	Mark func(start bool)
}

// Result is one measurement.
type Result struct {
	// Requests are the calls that started in the measurement window and
	// completed with a correct reply; Seconds is the window's length.
	Requests int
	Seconds  float64
	// P50, P99 and P999 are percentiles of those calls' latencies (the
	// time from the call until its checked reply), and Mean their mean.
	P50, P99, P999, Mean time.Duration
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

// RunLoad drives c with l.Callers goroutines for l.Warmup, then measures
// for l.Duration. It fails when a call fails, or when no call completed
// in the window.
func RunLoad(ctx context.Context, c Client, l Load) (Result, error) {
	if l.Callers < 1 || l.Duration <= 0 || l.Warmup < 0 {
		return Result{}, fmt.Errorf("services: load of %d callers for %v after %v", l.Callers, l.Duration, l.Warmup)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	measure, end := start.Add(l.Warmup), start.Add(l.Warmup+l.Duration)
	lat := make([][]time.Duration, l.Callers)
	errs := make([]error, l.Callers)
	var wg sync.WaitGroup
	for i := range l.Callers {
		wg.Go(func() {
			var own []time.Duration
			for seq := uint64(0); ; seq++ {
				t0 := time.Now()
				if !t0.Before(end) || ctx.Err() != nil {
					break
				}
				if err := c.Call(ctx, i, seq); err != nil {
					if ctx.Err() == nil {
						errs[i] = fmt.Errorf("caller %d, call %d: %w", i, seq, err)
					}
					break
				}
				if !t0.Before(measure) {
					own = append(own, time.Since(t0))
				}
			}
			lat[i] = own
		})
	}
	if l.Mark != nil {
		// The marks run here, at the window's edges, unless every caller
		// stopped first.
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		if waitUntil(measure, done, ctx) {
			l.Mark(true)
			waitUntil(end, done, ctx)
			l.Mark(false)
		}
	}
	wg.Wait()
	var all []time.Duration
	var r Result
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
	if r.Err != nil {
		return r, r.Err
	}
	if ctx.Err() != nil {
		return r, ctx.Err()
	}
	if r.Requests == 0 {
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
