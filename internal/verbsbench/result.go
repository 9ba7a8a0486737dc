package verbsbench

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"
)

// Result is the outcome of one test, as the client saw it, with the
// server's report folded in. Its JSON form is one record of rsockbench's
// -json output. Rates are decimal: GBps is 10⁹ bytes per second, MBps 10⁶.
// Latencies are one-way, half the round trip, in microseconds.
type Result struct {
	Mode    string  `json:"mode"`
	Test    string  `json:"test"`
	Size    int     `json:"size"`
	MTU     int     `json:"mtu"`
	TxDepth int     `json:"tx_depth"`
	Iters   uint64  `json:"iters"`
	Bytes   uint64  `json:"bytes"`
	Seconds float64 `json:"seconds"`
	GBps    float64 `json:"gbps"`
	MBps    float64 `json:"mbps"`
	MsgRate float64 `json:"msg_rate"` // messages (round trips for write_lat) per second

	MinUs   float64 `json:"min_us"`
	P50Us   float64 `json:"p50_us"`
	P99Us   float64 `json:"p99_us"`
	P999Us  float64 `json:"p999_us"`
	MaxUs   float64 `json:"max_us"`
	AvgUs   float64 `json:"avg_us"`
	StdevUs float64 `json:"stdev_us"`

	// Counters of both devices, summed.
	Retransmits uint64 `json:"retransmits"`
	Timeouts    uint64 `json:"timeouts"`
	RNRNAKs     uint64 `json:"rnr_naks"`

	// CPU time of each process during the test (getrusage).
	CPUUser       float64 `json:"cpu_user_s"`
	CPUSys        float64 `json:"cpu_sys_s"`
	ServerCPUUser float64 `json:"server_cpu_user_s"`
	ServerCPUSys  float64 `json:"server_cpu_sys_s"`

	// What the server counted (send_bw: receive completions; write_lat:
	// answered writes) and how many payload bytes were checked.
	ServerMsgs    uint64 `json:"server_msgs"`
	ServerBytes   uint64 `json:"server_bytes"`
	VerifiedBytes uint64 `json:"verified_bytes"`

	// Transport names the client's device: "softroce/udp", or the
	// provider and device name, e.g. "rdmacore/rxe0".
	Transport string `json:"transport"`
	LocalRoCE string `json:"local_roce"`
	PeerRoCE  string `json:"peer_roce"`
}

// newResult computes rates and latency statistics from a measurement.
func newResult(p *Params, m measured) *Result {
	r := &Result{Mode: "verbs", Test: p.Test.String(), Size: p.Size, MTU: p.MTU, TxDepth: p.TxDepth,
		Iters: m.msgs, Bytes: m.msgs * uint64(p.Size), Seconds: m.elapsed.Seconds()}
	if r.Seconds > 0 {
		r.GBps = float64(r.Bytes) / r.Seconds / 1e9
		r.MBps = float64(r.Bytes) / r.Seconds / 1e6
		r.MsgRate = float64(r.Iters) / r.Seconds
	}
	if len(m.rtts) > 0 {
		l := Latencies(m.rtts)
		r.MinUs, r.P50Us, r.P99Us, r.P999Us, r.MaxUs, r.AvgUs, r.StdevUs = l.Min, l.P50, l.P99, l.P999, l.Max, l.Avg, l.Stdev
	}
	return r
}

// LatencyStats are one-way latencies in microseconds.
type LatencyStats struct {
	Min, P50, P99, P999, Max, Avg, Stdev float64
}

// Latencies computes one-way latency statistics (half of each round trip)
// from round-trip times. It sorts rtts. Percentiles are nearest-rank.
func Latencies(rtts []time.Duration) LatencyStats {
	if len(rtts) == 0 {
		return LatencyStats{}
	}
	slices.Sort(rtts)
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 2000 }
	rank := func(q float64) float64 {
		i := int(math.Ceil(q*float64(len(rtts)))) - 1
		return us(rtts[max(0, min(i, len(rtts)-1))])
	}
	var sum, sq float64
	for _, d := range rtts {
		v := us(d)
		sum += v
		sq += v * v
	}
	n := float64(len(rtts))
	avg := sum / n
	return LatencyStats{Min: us(rtts[0]), P50: rank(0.5), P99: rank(0.99), P999: rank(0.999), Max: us(rtts[len(rtts)-1]),
		Avg: avg, Stdev: math.Sqrt(max(0, sq/n-avg*avg))}
}

var testTitles = map[string]string{
	"write_bw":  "RDMA_Write BW Test",
	"write_lat": "RDMA_Write Latency Test",
	"send_bw":   "Send BW Test",
	"read_bw":   "RDMA_Read BW Test",
}

const rule = "---------------------------------------------------------------------------------------\n"

// WriteHeader prints a perftest-style banner and column header for r's test.
func (r *Result) WriteHeader(w io.Writer) {
	title := testTitles[r.Test]
	if title == "" {
		title = r.Test
	}
	fmt.Fprint(w, rule)
	fmt.Fprintf(w, "                    %s (%s)\n", title, transportTitle(r.Transport))
	fmt.Fprintf(w, " Link: %s <-> %s  MTU: %d[B]  TX depth: %d\n", r.LocalRoCE, r.PeerRoCE, r.MTU, r.TxDepth)
	fmt.Fprint(w, rule)
	if r.Test == "write_lat" {
		fmt.Fprintf(w, " %-8s %-12s %-12s %-12s %-12s %-12s %-12s %-12s %-12s\n", "#bytes", "#iterations",
			"t_min[usec]", "t_max[usec]", "t_typical", "t_avg[usec]", "t_stdev", "99%[usec]", "99.9%[usec]")
		return
	}
	fmt.Fprintf(w, " %-8s %-12s %-10s %-18s %-16s %-14s %-10s\n", "#bytes", "#iterations", "seconds",
		"BW average[MB/s]", "BW average[GB/s]", "MsgRate[Mpps]", "retrans")
}

// transportTitle says in words what carried a test.
func transportTitle(t string) string {
	if t == "" || t == ProviderSoftRoCE+"/udp" {
		return "soft-RoCE over UDP"
	}
	return t
}

// WriteRow prints r as one line under WriteHeader.
func (r *Result) WriteRow(w io.Writer) {
	if r.Test == "write_lat" {
		fmt.Fprintf(w, " %-8d %-12d %-12.2f %-12.2f %-12.2f %-12.2f %-12.2f %-12.2f %-12.2f\n", r.Size, r.Iters,
			r.MinUs, r.MaxUs, r.P50Us, r.AvgUs, r.StdevUs, r.P99Us, r.P999Us)
		return
	}
	fmt.Fprintf(w, " %-8d %-12d %-10.3f %-18.2f %-16.3f %-14.6f %-10d\n", r.Size, r.Iters, r.Seconds,
		r.MBps, r.GBps, r.MsgRate/1e6, r.Retransmits)
}

// Summary is a one-line description of r for logs.
func (r *Result) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s size=%d iters=%d", r.Test, r.Size, r.Iters)
	if r.Test == "write_lat" {
		fmt.Fprintf(&b, " p50=%.2fus p99=%.2fus p999=%.2fus max=%.2fus", r.P50Us, r.P99Us, r.P999Us, r.MaxUs)
	} else {
		fmt.Fprintf(&b, " %.3f GB/s %.0f msg/s", r.GBps, r.MsgRate)
	}
	fmt.Fprintf(&b, " retrans=%d cpu=%.2fs+%.2fs", r.Retransmits, r.CPUUser, r.CPUSys)
	return b.String()
}
