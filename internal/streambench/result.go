package streambench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Record is the outcome of one measurement; its JSON form is one line of
// rsockbench's -json output. Rates are decimal (GBps is 10⁹ bytes per
// second). Latencies are round-trip times in microseconds, nearest-rank
// percentiles over every round trip of every connection.
type Record struct {
	Transport       string `json:"transport"`        // "rsock" or "tcp": what was asked for
	ConnTransport   string `json:"conn_transport"`   // the client conns' Transport(), e.g. "rdma/softroce/udp"
	ServerTransport string `json:"server_transport"` // the same, as the server saw it
	Mode            string `json:"mode"`             // "stream" or "pingpong"
	Size            int    `json:"size"`             // bytes per write or message
	Conns           int    `json:"conns"`

	// ClientProcs and ServerProcs are the GOMAXPROCS of the two
	// processes; ServerProcs is 0 when the server did not say.
	ClientProcs int `json:"client_gomaxprocs"`
	ServerProcs int `json:"server_gomaxprocs,omitempty"`

	// Bytes is the payload moved: received by the server (stream), or
	// sent both ways (ping-pong). Seconds is the server's time from the
	// start to the last end of stream (stream), or the client's time
	// (ping-pong).
	Bytes      uint64  `json:"bytes"`
	Seconds    float64 `json:"seconds"`
	GBps       float64 `json:"gbps"`
	RoundTrips uint64  `json:"round_trips"`
	P50Us      float64 `json:"p50_us"`
	P99Us      float64 `json:"p99_us"`
	P999Us     float64 `json:"p999_us"`

	// CPU time (user plus system) of each process during the
	// measurement, and per 10⁹ bytes moved.
	ClientCPUSeconds float64 `json:"client_cpu_s"`
	ServerCPUSeconds float64 `json:"server_cpu_s"`
	ClientCPUPerGB   float64 `json:"client_cpu_s_per_gb"`
	ServerCPUPerGB   float64 `json:"server_cpu_s_per_gb"`

	VerifiedBytes uint64 `json:"verified_bytes"`

	// FallbackReason says why the client's first data connection is on
	// TCP after it tried RDMA ((*netconn.Conn).FallbackReason); empty
	// otherwise.
	FallbackReason string `json:"fallback_reason,omitempty"`
}

// setLatencies sets the percentiles from round-trip times; it sorts rtts.
func (r *Record) setLatencies(rtts []time.Duration) {
	if len(rtts) == 0 {
		return
	}
	slices.Sort(rtts)
	rank := func(q float64) float64 {
		i := int(math.Ceil(q*float64(len(rtts)))) - 1
		return float64(rtts[max(0, min(i, len(rtts)-1))].Nanoseconds()) / 1000
	}
	r.P50Us, r.P99Us, r.P999Us = rank(0.5), rank(0.99), rank(0.999)
}

// finish computes the rates.
func (r *Record) finish() {
	if r.Seconds > 0 {
		r.GBps = float64(r.Bytes) / r.Seconds / 1e9
	}
	if r.Bytes > 0 {
		gb := float64(r.Bytes) / 1e9
		r.ClientCPUPerGB = r.ClientCPUSeconds / gb
		r.ServerCPUPerGB = r.ServerCPUSeconds / gb
	}
}

// WriteJSON writes one JSON object per record, one a line.
func WriteJSON(w io.Writer, recs []*Record) error {
	for _, r := range recs {
		b, err := json.Marshal(r)
		if err != nil {
			return err
		}
		if _, err := w.Write(append(b, '\n')); err != nil {
			return err
		}
	}
	return nil
}

// Sweep describes a series of measurements: every mode, size and
// connection count, each on every transport, the transports back to back
// (their order alternates from one point to the next).
type Sweep struct {
	Modes      []string
	Transports []string
	Sizes      []int
	Conns      []int
	// Duration, Iters, Bytes, Verify and Seed are as in Point; the seed
	// of each measurement is Seed plus its number.
	Duration time.Duration
	Iters    int
	Bytes    int64
	Verify   bool
	Seed     uint64
	// Progress, if set, is called before each measurement with its
	// number (from 1) and the total.
	Progress func(n, total int, p Point)
	// Corrupt and CorruptAt are passed to every Point (a test hook).
	Corrupt   bool
	CorruptAt int64
}

// Points lists the measurements of s in the order Run makes them.
func (s *Sweep) Points() []Point {
	var pts []Point
	k := 0
	for _, mode := range s.Modes {
		for _, size := range s.Sizes {
			for _, conns := range s.Conns {
				ts := slices.Clone(s.Transports)
				if k%2 == 1 {
					slices.Reverse(ts)
				}
				k++
				for _, t := range ts {
					pts = append(pts, Point{Mode: mode, Transport: t, Size: size, Conns: conns,
						Duration: s.Duration, Iters: s.Iters, Bytes: s.Bytes, Verify: s.Verify,
						Seed: s.Seed + uint64(len(pts)), Corrupt: s.Corrupt, CorruptAt: s.CorruptAt})
				}
			}
		}
	}
	return pts
}

// Run measures every point of s in turn. On an error it returns the
// records measured so far with the error.
func (s *Sweep) Run(ctx context.Context, c *Client) ([]*Record, error) {
	pts := s.Points()
	var recs []*Record
	for i, p := range pts {
		if s.Progress != nil {
			s.Progress(i+1, len(pts), p)
		}
		r, err := c.Measure(ctx, p)
		if err != nil {
			return recs, fmt.Errorf("%s %s %s x%d: %w", p.Mode, p.Transport, FormatSize(p.Size), p.Conns, err)
		}
		recs = append(recs, r)
	}
	return recs, nil
}

// FormatSize writes a byte count the way ParseSize reads it: 64B, 16KiB,
// 1MiB, or bytes when it is not a whole number of KiB.
func FormatSize(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return strconv.Itoa(n>>20) + "MiB"
	case n >= 1<<10 && n%(1<<10) == 0:
		return strconv.Itoa(n>>10) + "KiB"
	}
	return strconv.Itoa(n) + "B"
}

// ParseSize reads a byte count: a number with an optional suffix B, K,
// KiB, M, MiB, G or GiB (binary multiples, any case).
func ParseSize(s string) (int64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30}, {"k", 1 << 10}, {"m", 1 << 20}, {"g", 1 << 30}, {"b", 1}} {
		if v, ok := strings.CutSuffix(t, u.suffix); ok {
			t, mult = v, u.mult
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 || n > math.MaxInt64/mult {
		return 0, fmt.Errorf("bad size %q", s)
	}
	return n * mult, nil
}

// ParseSizes reads a comma-separated list of message sizes, each in
// 1..MaxSize.
func ParseSizes(s string) ([]int, error) {
	var sizes []int
	for _, f := range strings.Split(s, ",") {
		n, err := ParseSize(f)
		if err != nil {
			return nil, err
		}
		if n <= 0 || n > MaxSize {
			return nil, fmt.Errorf("size %q not in 1..%s", f, FormatSize(MaxSize))
		}
		sizes = append(sizes, int(n))
	}
	return sizes, nil
}

// pair is the two transports' records of one point.
type pair struct {
	size, conns int
	tcp, rsock  *Record
}

// pairs groups the records of one mode by point, in the order first seen.
func pairs(recs []*Record, mode string) []*pair {
	var ps []*pair
	for _, r := range recs {
		if r.Mode != mode {
			continue
		}
		i := slices.IndexFunc(ps, func(p *pair) bool { return p.size == r.Size && p.conns == r.Conns })
		if i < 0 {
			ps = append(ps, &pair{size: r.Size, conns: r.Conns})
			i = len(ps) - 1
		}
		if r.Transport == TransportTCP {
			ps[i].tcp = r
		} else {
			ps[i].rsock = r
		}
	}
	return ps
}

// WriteTables prints one table per mode: each point's TCP and rsock
// values side by side, with the ratio rsock/TCP.
func WriteTables(w io.Writer, recs []*Record) {
	val := func(r *Record, f func(*Record) float64, prec int) string {
		if r == nil {
			return "-"
		}
		return strconv.FormatFloat(f(r), 'f', prec, 64)
	}
	ratio := func(p *pair, f func(*Record) float64) string {
		if p.tcp == nil || p.rsock == nil || f(p.tcp) == 0 {
			return "-"
		}
		return strconv.FormatFloat(f(p.rsock)/f(p.tcp), 'f', 2, 64) + "x"
	}
	gbps := func(r *Record) float64 { return r.GBps }
	ccpu := func(r *Record) float64 { return r.ClientCPUPerGB }
	scpu := func(r *Record) float64 { return r.ServerCPUPerGB }
	p50 := func(r *Record) float64 { return r.P50Us }
	p99 := func(r *Record) float64 { return r.P99Us }
	p999 := func(r *Record) float64 { return r.P999Us }

	if ps := pairs(recs, ModeStream); len(ps) > 0 {
		fmt.Fprintln(w, "stream throughput, GB/s (10^9 B/s), and CPU seconds per GB on the client and the server\n(throughput ratio > 1: rsock faster; CPU ratio > 1: rsock costs more)")
		fmt.Fprintf(w, "%-7s %5s %10s %10s %9s | %10s %10s %9s | %10s %10s %9s\n", "size", "conns",
			"tcp", "rsock", "rsock/tcp", "cli tcp", "cli rsock", "rsock/tcp", "srv tcp", "srv rsock", "rsock/tcp")
		for _, p := range ps {
			fmt.Fprintf(w, "%-7s %5d %10s %10s %9s | %10s %10s %9s | %10s %10s %9s\n", FormatSize(p.size), p.conns,
				val(p.tcp, gbps, 3), val(p.rsock, gbps, 3), ratio(p, gbps),
				val(p.tcp, ccpu, 3), val(p.rsock, ccpu, 3), ratio(p, ccpu),
				val(p.tcp, scpu, 3), val(p.rsock, scpu, 3), ratio(p, scpu))
		}
	}
	if ps := pairs(recs, ModePingPong); len(ps) > 0 {
		if len(pairs(recs, ModeStream)) > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintln(w, "ping-pong round-trip latency, µs (ratio < 1: rsock faster)")
		fmt.Fprintf(w, "%-7s %5s %10s %10s %9s | %10s %10s %9s | %10s %10s %9s\n", "size", "conns",
			"p50 tcp", "p50 rsock", "rsock/tcp", "p99 tcp", "p99 rsock", "rsock/tcp", "p999 tcp", "p999 rsock", "rsock/tcp")
		for _, p := range ps {
			fmt.Fprintf(w, "%-7s %5d %10s %10s %9s | %10s %10s %9s | %10s %10s %9s\n", FormatSize(p.size), p.conns,
				val(p.tcp, p50, 1), val(p.rsock, p50, 1), ratio(p, p50),
				val(p.tcp, p99, 1), val(p.rsock, p99, 1), ratio(p, p99),
				val(p.tcp, p999, 1), val(p.rsock, p999, 1), ratio(p, p999))
		}
	}
}
