package netlab

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/rsock-go/rsock/internal/streambench"
	"github.com/rsock-go/rsock/verbs"
)

// GoodputCase is one row of the goodput table: a path and its loss.
type GoodputCase struct {
	MTU int
	// LossPerMille is the share of frames dropped, per 1000 (1 is 0.1%).
	LossPerMille int
	// BothWays drops frames arriving at both ends (data and
	// acknowledgements); else only at the receiver of the stream.
	BothWays bool
	IPv6     bool
	// FromB sends the stream from B to A (the client in B, the server in
	// A); else from A to B.
	FromB bool
}

// ends returns the namespaces of the client (the sender of the stream)
// and of the server.
func (c GoodputCase) ends(lab *Lab) (client, server *Namespace) {
	if c.FromB {
		return lab.B, lab.A
	}
	return lab.A, lab.B
}

// String names the case, e.g. "mtu9000/loss1%/one-way/ipv4".
func (c GoodputCase) String() string {
	family := "ipv4"
	if c.IPv6 {
		family = "ipv6"
	}
	s := fmt.Sprintf("mtu%d/loss%s/%s/%s", c.MTU, FormatLoss(c.LossPerMille), c.direction(), family)
	if c.FromB {
		s += "/b-to-a"
	}
	return s
}

func (c GoodputCase) direction() string {
	if c.LossPerMille == 0 {
		return "no-loss"
	}
	if c.BothWays {
		return "both-ways"
	}
	return "one-way"
}

// FormatLoss writes a per-mille loss as a percentage: 1 is "0.1%".
func FormatLoss(perMille int) string {
	return strconv.FormatFloat(float64(perMille)/10, 'f', -1, 64) + "%"
}

// ParseLoss reads a loss percentage ("0.1", "5%") as per mille.
func ParseLoss(s string) (int, error) {
	f, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(s), "%"), 64)
	if err != nil || f < 0 || f > 100 {
		return 0, fmt.Errorf("loss %q: want a percentage in [0, 100]", s)
	}
	pm := f * 10
	if pm != float64(int(pm)) {
		return 0, fmt.Errorf("loss %q: the resolution is 0.1%%", s)
	}
	return int(pm), nil
}

// GoodputConfig configures MeasureGoodput.
type GoodputConfig struct {
	// Rsockbench is the path of an rsockbench binary.
	Rsockbench string
	// Bytes is what each transport moves (rsockbench client -bytes);
	// if 0, each runs for Duration instead.
	Bytes    int64
	Duration time.Duration
	// Timeout bounds each transport's run; a run still going then is
	// ended and reported as timed out. Default 2 minutes.
	Timeout time.Duration
	// Prefix of the lab's namespace names (Config.Prefix).
	Prefix string
}

// TransportRun is one transport's measurement in a goodput row.
type TransportRun struct {
	// ConnTransport is what the connection ran on, from rsockbench's
	// record: "tcp", or "rdma/softroce/udp" for rsock (or "tcp" if rsock
	// fell back).
	ConnTransport string `json:"conn_transport,omitempty"`
	// FallbackReason says why an rsock run's connection is on TCP.
	FallbackReason string  `json:"fallback_reason,omitempty"`
	Bytes          uint64  `json:"bytes"`
	VerifiedBytes  uint64  `json:"verified_bytes"`
	Seconds        float64 `json:"seconds"`
	GBps           float64 `json:"gbps"`
	// TimedOut is set when the run was ended at GoodputConfig.Timeout.
	TimedOut bool `json:"timed_out,omitempty"`
	// Err says why the run failed; empty when it completed, verified.
	Err string `json:"error,omitempty"`
	// Warning tells what went wrong around the run without failing it:
	// a server that printed no counters (they are then missing from the
	// row's).
	Warning string `json:"warning,omitempty"`
}

// OK reports whether the run completed with every byte verified.
func (r *TransportRun) OK() bool { return r.Err == "" && !r.TimedOut }

// GoodputRow is one measured GoodputCase: TCP and then rsock, back to back
// on the same fresh lab.
type GoodputRow struct {
	Case       GoodputCase `json:"case"`
	TCP, Rsock TransportRun
	// Counters are rsock's device counters, the client's and the
	// server's summed (the client sends the stream: its Retransmits,
	// SeqNAKsRecv and Timeouts; the server's SeqNAKsSent).
	Counters verbs.Counters `json:"counters"`
	// Frames and Dropped count the frames that arrived at each end's veth
	// and those the loss rules dropped, over the whole row: [0] A, [1] B.
	Frames, Dropped [2]uint64
	// Err is a failure to set the row up or read its outcome.
	Err string `json:"error,omitempty"`
}

// goodputPorts are the ports of the rsockbench servers in B, one per
// transport (the plain TCP listener of each takes the next port).
var goodputPorts = map[string]int{streambench.TransportTCP: 18600, streambench.TransportRsock: 18610}

// MeasureGoodput measures one case: it makes a lab at the case's MTU,
// sets the loss, and runs rsockbench client -verify in A against
// rsockbench server -verify -counters in B (or the other way round), first over TCP and then over
// rsock, each with a 64 KiB write size and one connection, and each
// against a server of its own (so that the rsock server's counters are
// read while its device is open, whatever the TCP run left behind). The
// lab is removed before it returns.
func MeasureGoodput(ctx context.Context, cfg GoodputConfig, c GoodputCase) (row GoodputRow) {
	row.Case = c
	if cfg.Timeout <= 0 {
		cfg.Timeout = 2 * time.Minute
	}
	fail := func(err error) GoodputRow {
		if row.Err == "" {
			row.Err = err.Error()
		}
		return row
	}
	lab, err := New(Config{MTU: c.MTU, Prefix: cfg.Prefix})
	if err != nil {
		return fail(err)
	}
	defer lab.Close()
	client, server := c.ends(lab)
	if err := lab.DropIngress(server, c.LossPerMille); err != nil {
		return fail(err)
	}
	if c.BothWays {
		if err := lab.DropIngress(client, c.LossPerMille); err != nil {
			return fail(err)
		}
	}
	tmp, err := os.MkdirTemp("", "netlab-goodput-")
	if err != nil {
		return fail(err)
	}
	defer os.RemoveAll(tmp)
	for _, tr := range []string{streambench.TransportTCP, streambench.TransportRsock} {
		if ctx.Err() != nil {
			return fail(ctx.Err())
		}
		run, counters, err := runTransport(ctx, lab, cfg, c, tr, tmp)
		if err != nil {
			return fail(err)
		}
		if tr == streambench.TransportTCP {
			row.TCP = run
		} else {
			row.Rsock, row.Counters = run, counters
		}
	}
	for i, ns := range []*Namespace{lab.A, lab.B} {
		if row.Frames[i], row.Dropped[i], err = lab.IngressCounts(ns); err != nil {
			return fail(err)
		}
	}
	return row
}

// runTransport runs one transport's measurement: a server in B for one
// session, the client in A. It returns the run and the counters of both
// processes, summed; err is a failure to set the run up.
func runTransport(ctx context.Context, lab *Lab, cfg GoodputConfig, c GoodputCase, tr, tmp string) (TransportRun, verbs.Counters, error) {
	clientNS, serverNS := c.ends(lab)
	addr := net.JoinHostPort(serverNS.Addr(c.IPv6).String(), strconv.Itoa(goodputPorts[tr]))
	timeout := cfg.Timeout.String()
	// The udp link: the path benchmark measures soft-RoCE over the
	// kernel's UDP (auto would run TCP between the namespaces).
	server, err := lab.Start(serverNS, cfg.Rsockbench, "server", "-verify", "-counters", "-sessions", "1",
		"-addr", addr, "-timeout", timeout, "-link", "udp")
	if err != nil {
		return TransportRun{}, verbs.Counters{}, err
	}
	if err := waitServer(server); err != nil {
		return TransportRun{}, verbs.Counters{}, err
	}
	jsonPath := filepath.Join(tmp, tr+".json")
	args := []string{"client", "-verify", "-addr", addr, "-transports", tr, "-modes", "stream", "-link", "udp",
		"-sizes", "64KiB", "-conns", "1", "-timeout", timeout, "-counters", "-json", jsonPath}
	if cfg.Bytes > 0 {
		args = append(args, "-bytes", strconv.FormatInt(cfg.Bytes, 10))
	} else {
		args = append(args, "-duration", cfg.Duration.String())
	}
	run, counters := runClient(ctx, lab, clientNS, cfg, args, jsonPath)
	// The server exits when its session ends, as a rule at once after a
	// completed run, but its last close can take a while on a lossy
	// path. One still in its session after 15 s is stopped, and prints
	// its counters then: its connection, and so its device, is still
	// open.
	wait := time.NewTimer(15 * time.Second)
	defer wait.Stop()
	select {
	case <-server.Done():
	case <-wait.C:
	case <-ctx.Done():
	}
	grace := 10 * time.Second
	if ctx.Err() != nil {
		grace = time.Second
	}
	server.Stop(grace)
	serverCounters, err := parseCounters(server.Stderr())
	if err != nil {
		run.Warning = fmt.Sprintf("server: %v: %s", err, lastLine(server.Stderr()))
	}
	counters.Add(serverCounters)
	return run, counters, nil
}

// waitServer waits for rsockbench server's first line, which says it
// listens.
func waitServer(p *Proc) error {
	t := time.NewTimer(30 * time.Second)
	defer t.Stop()
	select {
	case line, ok := <-p.Lines():
		if !ok || !strings.HasPrefix(line, "rsockbench server: rsock on ") {
			<-p.Done()
			return fmt.Errorf("%v did not start: first line %q, %v, stderr %s", p, line, p.Err(), strings.TrimSpace(p.Stderr()))
		}
		// Drain the rest of its output (one line per measurement).
		go func() {
			for range p.Lines() {
			}
		}()
		return nil
	case <-t.C:
		return fmt.Errorf("%v: not listening after 30s; stderr %s", p, strings.TrimSpace(p.Stderr()))
	}
}

// runClient runs one rsockbench client in ns, ending it at cfg.Timeout,
// and reads its record and counters.
func runClient(ctx context.Context, lab *Lab, ns *Namespace, cfg GoodputConfig, args []string, jsonPath string) (run TransportRun, counters verbs.Counters) {
	p, err := lab.Start(ns, cfg.Rsockbench, args...)
	if err != nil {
		run.Err = err.Error()
		return run, counters
	}
	go func() {
		for range p.Lines() { // the tables: the JSON file has the numbers
		}
	}()
	t := time.NewTimer(cfg.Timeout)
	defer t.Stop()
	select {
	case <-p.Done():
	case <-t.C:
		run.TimedOut = true
	case <-ctx.Done():
		run.Err = ctx.Err().Error()
	}
	// A client told to stop (SIGTERM) still prints its counters. When
	// the whole run is being interrupted, it gets less time for that.
	grace := 5 * time.Second
	if ctx.Err() != nil {
		grace = time.Second
	}
	exitErr := p.Stop(grace)
	counters, cerr := parseCounters(p.Stderr())
	if run.TimedOut {
		run.Err = fmt.Sprintf("timed out after %v", cfg.Timeout)
		return run, counters
	}
	if run.Err != "" {
		return run, counters
	}
	if exitErr != nil {
		run.Err = fmt.Sprintf("%v: %s", exitErr, lastLine(p.Stderr()))
		return run, counters
	}
	if cerr != nil {
		run.Err = cerr.Error()
		return run, counters
	}
	rec, err := readRecord(jsonPath)
	if err != nil {
		run.Err = err.Error()
		return run, counters
	}
	run.ConnTransport, run.FallbackReason = rec.ConnTransport, rec.FallbackReason
	run.Bytes, run.VerifiedBytes = rec.Bytes, rec.VerifiedBytes
	run.Seconds, run.GBps = rec.Seconds, rec.GBps
	if rec.VerifiedBytes != rec.Bytes {
		run.Err = fmt.Sprintf("verified %d of %d bytes", rec.VerifiedBytes, rec.Bytes)
	}
	return run, counters
}

// readRecord reads the one record of an rsockbench -json file.
func readRecord(path string) (*streambench.Record, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var recs []*streambench.Record
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		var r streambench.Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return nil, fmt.Errorf("%s: %v", path, err)
		}
		recs = append(recs, &r)
	}
	if len(recs) != 1 {
		return nil, fmt.Errorf("%s: %d records, want 1", path, len(recs))
	}
	return recs[0], nil
}

// countersPrefix starts the line rsockbench -counters prints on stderr.
const countersPrefix = "rsockbench counters: "

// parseCounters finds the counters line in rsockbench's stderr.
func parseCounters(stderr string) (verbs.Counters, error) {
	var c verbs.Counters
	for line := range strings.Lines(stderr) {
		if rest, ok := strings.CutPrefix(line, countersPrefix); ok {
			if err := json.Unmarshal([]byte(rest), &c); err != nil {
				return c, fmt.Errorf("counters line %q: %v", line, err)
			}
			return c, nil
		}
	}
	return c, errors.New("rsockbench printed no counters line")
}

// lastLine is the last non-empty line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// WriteGoodputTable writes rows as a markdown table: per row TCP and rsock
// goodput (GB/s, 10⁹ bytes per second, verified), their ratio, rsock's
// retransmissions, sequence NAKs sent and received, and ACK timeouts
// (client and server summed), and the frames the loss rules dropped at
// each end over both runs of the row. A run that did not complete shows
// why instead of a rate.
func WriteGoodputTable(w io.Writer, rows []GoodputRow) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintln(bw, "| MTU | loss | direction | TCP GB/s | rsock GB/s | rsock/TCP | rsock retransmits | NAKs sent/recv | timeouts | frames dropped at A, B |")
	fmt.Fprintln(bw, "| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	var notes []string
	for _, r := range rows {
		c := r.Counters
		ratio := "—"
		if r.TCP.OK() && r.Rsock.OK() && r.TCP.GBps > 0 {
			ratio = fmt.Sprintf("%.2fx", r.Rsock.GBps/r.TCP.GBps)
		}
		family := ""
		if r.Case.IPv6 {
			family = " (IPv6)"
		}
		if r.Case.FromB {
			family += " (B to A)"
		}
		for _, run := range []struct {
			name string
			r    *TransportRun
		}{{"tcp", &r.TCP}, {"rsock", &r.Rsock}} {
			if run.r.Warning != "" {
				notes = append(notes, fmt.Sprintf("%v %s: warning: %s", r.Case, run.name, run.r.Warning))
			}
		}
		fmt.Fprintf(bw, "| %d | %s | %s%s | %s | %s | %s | %d | %d/%d | %d | %d, %d |\n",
			r.Case.MTU, FormatLoss(r.Case.LossPerMille), r.Case.direction(), family,
			cell(&r.TCP, &notes, r.Case, "tcp"), cell(&r.Rsock, &notes, r.Case, "rsock"), ratio,
			c.Retransmits, c.SeqNAKsSent, c.SeqNAKsRecv, c.Timeouts, r.Dropped[0], r.Dropped[1])
		if r.Err != "" {
			notes = append(notes, fmt.Sprintf("%v: %s", r.Case, r.Err))
		}
	}
	if len(notes) > 0 {
		fmt.Fprintln(bw)
		for _, n := range notes {
			fmt.Fprintf(bw, "- %s\n", n)
		}
	}
	return bw.Flush()
}

// cell formats a goodput cell, adding a note for a failed run.
func cell(r *TransportRun, notes *[]string, c GoodputCase, name string) string {
	switch {
	case *r == TransportRun{}:
		return "—" // not run
	case r.TimedOut:
		*notes = append(*notes, fmt.Sprintf("%v %s: %s", c, name, r.Err))
		return "timeout"
	case r.Err != "":
		*notes = append(*notes, fmt.Sprintf("%v %s: %s", c, name, r.Err))
		return "failed"
	case name == "rsock" && !strings.HasPrefix(r.ConnTransport, "rdma/"):
		*notes = append(*notes, fmt.Sprintf("%v rsock ran on %q, not RDMA: %s", c, r.ConnTransport, r.FallbackReason))
		return fmt.Sprintf("%s (on %s)", FormatGBps(r.GBps), r.ConnTransport)
	}
	return FormatGBps(r.GBps)
}

// FormatGBps writes a rate with three significant digits at least to the
// third decimal: 1.23, 0.456, 0.00123.
func FormatGBps(v float64) string {
	if v >= 0.01 || v == 0 {
		return strconv.FormatFloat(v, 'f', 3, 64)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}
