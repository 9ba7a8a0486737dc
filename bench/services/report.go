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
}

func us(d time.Duration) float64 { return float64(d) / 1e3 }

// SetRatios sets every record's ratios to the tcp record of the same
// service, callers and size.
func SetRatios(recs []*Record) {
	for _, r := range recs {
		r.ReqRatio, r.P50Ratio, r.P99Ratio = nil, nil, nil
		for _, base := range recs {
			if base.Transport != KindTCP || base.Service != r.Service || base.Callers != r.Callers || base.Size != r.Size ||
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

// WriteTable writes the records as one Markdown table, in their order,
// then the fallback reasons that any point reported.
func WriteTable(w io.Writer, recs []*Record) error {
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', tabwriter.Debug)
	fmt.Fprintln(tw, "| service\t callers\t transport\t ran on (client conns; server if different)\t req/s\t p50 µs\t p99 µs\t req/s ×TCP\t p50 ×TCP\t p99 ×TCP\t CPU µs/req client+server\t")
	fmt.Fprintln(tw, "| ---\t ---\t ---\t ---\t ---\t ---\t ---\t ---\t ---\t ---\t ---\t")
	for _, r := range recs {
		ran := FormatConns(r.ClientConns)
		if !maps.Equal(r.ClientConns, r.ServerConns) {
			ran += "; server " + FormatConns(r.ServerConns)
		}
		if r.Error != "" {
			fmt.Fprintf(tw, "| %s\t %d\t %s\t %s\t failed: %s\t\t\t\t\t\t\t\n", r.Service, r.Callers, r.Transport, ran, r.Error)
			continue
		}
		fmt.Fprintf(tw, "| %s\t %d\t %s\t %s\t %.0f\t %.1f\t %.1f\t %s\t %s\t %s\t %.1f + %.1f\t\n",
			r.Service, r.Callers, r.Transport, ran, r.ReqPerSec, r.P50us, r.P99us,
			fmtRatio(r.ReqRatio), fmtRatio(r.P50Ratio), fmtRatio(r.P99Ratio), r.ClientCPUus, r.ServerCPUus)
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
