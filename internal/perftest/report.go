package perftest

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// BWReport is a bandwidth result as perftest prints and exchanges it.
// Bandwidth is in MiB/s (perftest's "MB/sec"), message rate in millions
// of messages per second.
type BWReport struct {
	Size        uint64
	Iters       uint64
	PeakMBps    float64
	AvgMBps     float64
	MsgRateMpps float64
}

// newBWReport computes a report for iters messages of size bytes moved in
// elapsed. There are no per-request timestamps, so the peak is the
// average.
func newBWReport(size, iters int, elapsed time.Duration) BWReport {
	r := BWReport{Size: uint64(size), Iters: uint64(iters)}
	if s := elapsed.Seconds(); s > 0 {
		r.AvgMBps = float64(size) * float64(iters) / s / (1 << 20)
		r.PeakMBps = r.AvgMBps
		r.MsgRateMpps = float64(iters) / s / 1e6
	}
	return r
}

// bwHeader is perftest's bandwidth table header.
const bwHeader = " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n"

// Line formats r as a row of perftest's bandwidth table.
func (r BWReport) Line() string {
	return fmt.Sprintf(" %-7d    %-10d       %-7.2f            %-7.2f\t\t   %-7.6f\n", r.Size, r.Iters, r.PeakMBps, r.AvgMBps, r.MsgRateMpps)
}

// LatReport is a latency result: one-way times (half a round trip) in
// microseconds, as perftest's write_lat computes them.
type LatReport struct {
	Size                          uint64
	Iters                         uint64
	Min, Max, Typical, Avg, Stdev float64
	P99, P999                     float64
}

// latTail is how many of the largest samples perftest drops.
const latTail = 2

// newLatReport computes a report from the post times of the iterations:
// each sample is the time between two posts, halved.
func newLatReport(size int, posted []time.Duration) LatReport {
	r := LatReport{Size: uint64(size), Iters: uint64(len(posted))}
	if len(posted) < latTail+2 {
		return r
	}
	d := make([]float64, len(posted)-1)
	for i := range d {
		d[i] = float64(posted[i+1]-posted[i]) / 1e3 / 2
	}
	slices.Sort(d)
	d = d[:len(d)-latTail]
	var sum float64
	for _, v := range d {
		sum += v
	}
	r.Avg = sum / float64(len(d))
	var sq float64
	for _, v := range d {
		sq += (v - r.Avg) * (v - r.Avg)
	}
	r.Min, r.Max, r.Typical = d[0], d[len(d)-1], d[len(d)/2]
	r.Stdev = math.Sqrt(sq / float64(len(d)))
	r.P99 = d[min(len(d)-1, int(math.Ceil(float64(len(d))*0.99))-1)]
	r.P999 = d[min(len(d)-1, int(math.Ceil(float64(len(d))*0.999))-1)]
	return r
}

// latHeader is perftest's latency table header.
const latHeader = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] \n"

// Line formats r as a row of perftest's latency table.
func (r LatReport) Line() string {
	return fmt.Sprintf(" %-7d %d          %-7.2f        %-7.2f      %-7.2f  \t       %-7.2f     \t%-7.2f\t\t%-7.2f \t\t%-7.2f\n",
		r.Size, r.Iters, r.Min, r.Max, r.Typical, r.Avg, r.Stdev, r.P99, r.P999)
}

// resultLine is perftest's table rule.
const resultLine = "---------------------------------------------------------------------------------------\n"
