package services

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Record is one measured point: a service over a transport with a number
// of callers. Its JSON form is one line of rsockbench services -json.
type Record struct {
	Service   string `json:"service"`
	Transport string `json:"transport"` // the transport's name, as asked for
	Callers   int    `json:"callers"`
	Size      int    `json:"size"` // request payload bytes
	// Round numbers the repetitions of a point, from 0.
	Round int `json:"round"`
	// Path says where the two processes ran: loopback, or the namespaces
	// joined through a router.
	Path string `json:"path"`

	Seconds   float64 `json:"seconds"`
	Requests  int     `json:"requests"`
	ReqPerSec float64 `json:"req_per_s"`
	P50us     float64 `json:"p50_us"`
	P99us     float64 `json:"p99_us"`
	P999us    float64 `json:"p999_us"`
	MeanUs    float64 `json:"mean_us"`
	// FirstRepliesMs is the time until every caller had its first reply
	// (opening connections included), in the warm-up.
	FirstRepliesMs float64 `json:"first_replies_ms"`

	// ClientConns and ServerConns count the point's connections by what
	// they ran on (netconn's Transport(), else "tcp" or "unix"), as the
	// client dialed them and as the server accepted them; Fallbacks
	// counts the FallbackReason()s of either side.
	ClientConns map[string]int `json:"client_conns"`
	ServerConns map[string]int `json:"server_conns"`
	Fallbacks   map[string]int `json:"fallback_reasons,omitempty"`

	// CPU time per request of the client and server processes (user +
	// system) during the window.
	ClientCPUus float64 `json:"client_cpu_us_per_req"`
	ServerCPUus float64 `json:"server_cpu_us_per_req"`
	ClientProcs int     `json:"client_gomaxprocs"`
	ServerProcs int     `json:"server_gomaxprocs"`

	// Ratios to tcp's point of the same run (same service, callers and
	// size); absent without one.
	ReqRatio *float64 `json:"req_per_s_vs_tcp,omitempty"`
	P50Ratio *float64 `json:"p50_vs_tcp,omitempty"`
	P99Ratio *float64 `json:"p99_vs_tcp,omitempty"`

	// Error is why the point failed; empty when every call succeeded.
	Error string `json:"error,omitempty"`
}

// SetResult fills the measurement's fields from r.
func (rec *Record) SetResult(r Result) {
	rec.Seconds, rec.Requests, rec.ReqPerSec = r.Seconds, r.Requests, r.ReqPerSec()
	rec.P50us, rec.P99us, rec.P999us, rec.MeanUs = us(r.P50), us(r.P99), us(r.P999), us(r.Mean)
	rec.FirstRepliesMs = us(r.FirstReplies) / 1e3
}

func us(d time.Duration) float64 { return float64(d) / 1e3 }

// SetRatios sets every record's ratios to the tcp record of the same
// service, callers, size and round.
func SetRatios(recs []*Record) {
	for _, r := range recs {
		r.ReqRatio, r.P50Ratio, r.P99Ratio = nil, nil, nil
		for _, base := range recs {
			if base.Transport != KindTCP || base.Service != r.Service || base.Callers != r.Callers || base.Size != r.Size || base.Round != r.Round ||
				base.Error != "" || r.Error != "" {
				continue
			}
			r.ReqRatio, r.P50Ratio, r.P99Ratio = ratio(r.ReqPerSec, base.ReqPerSec), ratio(r.P50us, base.P50us), ratio(r.P99us, base.P99us)
			break
		}
	}
}

func ratio(a, b float64) *float64 {
	if b <= 0 {
		return nil
	}
	x := a / b
	return &x
}

// WriteJSON writes one JSON object per record and line.
func WriteJSON(w io.Writer, recs []*Record) error {
	enc := json.NewEncoder(w)
	for _, r := range recs {
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	return nil
}

// FormatConns writes connection counts by transport, most first: "32×
// rdma/softroce/memif" or "1× tcp, 1× rdma/softroce/udp".
func FormatConns(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	keys := slices.Sorted(maps.Keys(m))
	slices.SortStableFunc(keys, func(a, b string) int { return m[b] - m[a] })
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%d× %s", m[k], k))
	}
	return strings.Join(parts, ", ")
}

// Row is a point of the table: the rounds of one service, callers, size
// and transport, summarized by their medians.
type Row struct {
	Service, Transport string
	Callers, Size      int
	Rounds             int
	// Ran says what the connections ran on, as FormatConns, client side
	// and then the server's if it differs; rounds that differ are listed
	// apart.
	Ran string
	// Medians of the rounds.
	ReqPerSec, P50us, P99us, ClientCPUus, ServerCPUus float64
	// Ratios of the medians to tcp's row; nil without one.
	ReqRatio, P50Ratio, P99Ratio *float64
	// ReqRatioLo and ReqRatioHi are the least and greatest of the rounds'
	// own req/s ratios (each to tcp's point of the same round).
	ReqRatioLo, ReqRatioHi *float64
	// Error is the first failed round's error.
	Error string
}

// Rows summarizes records into rows, in the order of their first
// records. A row with a failed round has its Error and no figures.
func Rows(recs []*Record) []*Row {
	type key struct {
		service, transport string
		callers, size      int
	}
	var order []key
	groups := map[key][]*Record{}
	for _, r := range recs {
		k := key{r.Service, r.Transport, r.Callers, r.Size}
		if groups[k] == nil {
			order = append(order, k)
		}
		groups[k] = append(groups[k], r)
	}
	rows := map[key]*Row{}
	var out []*Row
	for _, k := range order {
		g := groups[k]
		row := &Row{Service: k.service, Transport: k.transport, Callers: k.callers, Size: k.size, Rounds: len(g)}
		var rans []string
		for _, r := range g {
			ran := FormatConns(r.ClientConns)
			if !maps.Equal(r.ClientConns, r.ServerConns) {
				ran += "; server " + FormatConns(r.ServerConns)
			}
			if !slices.Contains(rans, ran) {
				rans = append(rans, ran)
			}
			if r.Error != "" && row.Error == "" {
				row.Error = r.Error
			}
			if r.ReqRatio != nil {
				if row.ReqRatioLo == nil || *r.ReqRatio < *row.ReqRatioLo {
					row.ReqRatioLo = r.ReqRatio
				}
				if row.ReqRatioHi == nil || *r.ReqRatio > *row.ReqRatioHi {
					row.ReqRatioHi = r.ReqRatio
				}
			}
		}
		row.Ran = strings.Join(rans, " / ")
		if row.Error == "" {
			row.ReqPerSec = median(g, func(r *Record) float64 { return r.ReqPerSec })
			row.P50us = median(g, func(r *Record) float64 { return r.P50us })
			row.P99us = median(g, func(r *Record) float64 { return r.P99us })
			row.ClientCPUus = median(g, func(r *Record) float64 { return r.ClientCPUus })
			row.ServerCPUus = median(g, func(r *Record) float64 { return r.ServerCPUus })
		}
		rows[k] = row
		out = append(out, row)
	}
	for k, row := range rows {
		base := rows[key{k.service, KindTCP, k.callers, k.size}]
		if base == nil || base.Error != "" || row.Error != "" {
			continue
		}
		row.ReqRatio, row.P50Ratio, row.P99Ratio = ratio(row.ReqPerSec, base.ReqPerSec), ratio(row.P50us, base.P50us), ratio(row.P99us, base.P99us)
	}
	return out
}

// median is the median of f over recs (the mean of the middle two of an
// even count).
func median(recs []*Record, f func(*Record) float64) float64 {
	v := make([]float64, len(recs))
	for i, r := range recs {
		v[i] = f(r)
	}
	slices.Sort(v)
	if n := len(v); n%2 == 0 {
		return (v[n/2-1] + v[n/2]) / 2
	}
	return v[len(v)/2]
}

// WriteTable writes the records as one Markdown table of Rows, then the
// fallback reasons that any point reported. With more than one round a
// column gives the range of the rounds' req/s ratios.
func WriteTable(w io.Writer, recs []*Record) error {
	rows := Rows(recs)
	rounds := 1
	for _, r := range rows {
		rounds = max(rounds, r.Rounds)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', tabwriter.Debug)
	head := "| service\t callers\t transport\t ran on (client conns; server if different)\t req/s\t p50 µs\t p99 µs\t req/s ×TCP\t p50 ×TCP\t p99 ×TCP\t CPU µs/req client+server\t"
	rule := "| ---\t ---\t ---\t ---\t ---\t ---\t ---\t ---\t ---\t ---\t ---\t"
	if rounds > 1 {
		fmt.Fprintf(w, "medians of %d rounds; req/s ×TCP of each round in the last column\n", rounds)
		head += " req/s ×TCP, rounds\t"
		rule += " ---\t"
	}
	fmt.Fprintln(tw, head)
	fmt.Fprintln(tw, rule)
	for _, r := range rows {
		if r.Error != "" {
			fmt.Fprintf(tw, "| %s\t %d\t %s\t %s\t failed: %s\t\t\t\t\t\t\t", r.Service, r.Callers, r.Transport, r.Ran, r.Error)
		} else {
			fmt.Fprintf(tw, "| %s\t %d\t %s\t %s\t %.0f\t %.1f\t %.1f\t %s\t %s\t %s\t %.1f + %.1f\t",
				r.Service, r.Callers, r.Transport, r.Ran, r.ReqPerSec, r.P50us, r.P99us,
				fmtRatio(r.ReqRatio), fmtRatio(r.P50Ratio), fmtRatio(r.P99Ratio), r.ClientCPUus, r.ServerCPUus)
		}
		if rounds > 1 {
			rng := "-"
			if r.ReqRatioLo != nil {
				rng = fmt.Sprintf("%.2f–%.2f×", *r.ReqRatioLo, *r.ReqRatioHi)
			}
			fmt.Fprintf(tw, " %s\t", rng)
		}
		fmt.Fprintln(tw)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, r := range recs {
		for _, reason := range slices.Sorted(maps.Keys(r.Fallbacks)) {
			key := r.Transport + "\x00" + reason
			if seen[key] {
				continue
			}
			seen[key] = true
			fmt.Fprintf(w, "%s fell back to TCP (%s, %d callers, first seen): %s\n", r.Transport, r.Service, r.Callers, reason)
		}
	}
	return nil
}

func fmtRatio(x *float64) string {
	if x == nil {
		return "-"
	}
	return fmt.Sprintf("%.2f×", *x)
}
