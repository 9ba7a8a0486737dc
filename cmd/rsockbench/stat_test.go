package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/rsock-go/rsock/netconn"
)

// TestDebugAndStat starts 'rsockbench server -debug-addr' as a process,
// holds an RDMA conn and a conn that fell back to TCP open to it, and
// checks what an operator sees: /debug/vars is JSON with the rsock
// snapshot listing both, /metrics is accepted by Prometheus' parser, and
// 'rsockbench stat' prints a line for each conn (the TCP one with its
// reason) and one for the device.
func TestDebugAndStat(t *testing.T) {
	bin := buildBin(t)
	srv := exec.Command(bin, "server", "-addr", "127.0.0.1:0", "-link", "udp", "-debug-addr", "127.0.0.1:0", "-timeout", "60s")
	srv.Stderr = os.Stderr
	out, err := srv.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		srv.Process.Signal(os.Interrupt)
		timer := time.AfterFunc(10*time.Second, func() { srv.Process.Kill() })
		srv.Wait()
		timer.Stop()
	}()
	lines := bufio.NewScanner(out)
	var debugAddr, rsockAddr string
	for (debugAddr == "" || rsockAddr == "") && lines.Scan() {
		if a, ok := strings.CutPrefix(lines.Text(), debugPrefix); ok {
			debugAddr = a
		}
		if a, ok := strings.CutPrefix(lines.Text(), streamServerPrefix); ok {
			rsockAddr, _, _ = strings.Cut(a, ",")
		}
	}
	if debugAddr == "" || rsockAddr == "" {
		t.Fatalf("the server did not announce its addresses (debug %q, rsock %q): %v", debugAddr, rsockAddr, lines.Err())
	}
	go io.Copy(io.Discard, out)

	// An RDMA conn, and one that falls back: a dialer that demands memif
	// from a server that runs udp declines, and the server keeps the TCP
	// conn with the reason.
	ctx := context.Background()
	rc, err := (&netconn.Dialer{Provider: netconn.ProviderSoftRoCE, Link: netconn.LinkUDP}).DialContext(ctx, "tcp", rsockAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	fc, err := (&netconn.Dialer{Provider: netconn.ProviderSoftRoCE, Link: netconn.LinkMemif}).DialContext(ctx, "tcp", rsockAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer fc.Close()
	if tr := rc.(*netconn.Conn).Transport(); tr != "rdma/softroce/udp" {
		t.Fatalf("the RDMA conn is on %q", tr)
	}
	if tr := fc.(*netconn.Conn).Transport(); tr != "tcp" {
		t.Fatalf("the memif-only conn is on %q", tr)
	}
	rLocal, fLocal := rc.LocalAddr().String(), fc.LocalAddr().String()

	// /debug/vars: the snapshot lists both, as the server sees them. The
	// server's Accept may lag the dialer by a moment.
	var st netconn.State
	deadline := time.Now().Add(10 * time.Second)
	for {
		st = fetch(t, "http://"+debugAddr+"/debug/vars")
		if findConn(st, rLocal, true) != nil && findConn(st, fLocal, false) != nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	r, f := findConn(st, rLocal, true), findConn(st, fLocal, false)
	if r == nil || f == nil {
		t.Fatalf("snapshot lacks the RDMA conn from %s (%v) or the TCP conn from %s (%v): %+v", rLocal, r != nil, fLocal, f != nil, st)
	}
	if r.QPN == 0 || r.PathMTU == 0 || r.Transport != "rdma/softroce/udp" {
		t.Errorf("RDMA conn %+v", r)
	}
	if !strings.Contains(f.FallbackReason, "memif") {
		t.Errorf("TCP conn's reason %q does not say memif", f.FallbackReason)
	}

	// /metrics: Prometheus' parser accepts it.
	resp, err := http.Get("http://" + debugAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("/metrics: %v\n%s", err, body)
	}
	if f := fams["rsock_fallbacks_total"]; f == nil || len(f.GetMetric()) != len(netconn.FallbackKinds) {
		t.Errorf("/metrics: rsock_fallbacks_total %v", f)
	}
	if f := fams["rsock_device_connections"]; f == nil || len(f.GetMetric()) == 0 {
		t.Errorf("/metrics: no device connections: %v", f)
	}

	// stat, as an operator runs it.
	var sout, serr bytes.Buffer
	if code := run([]string{"stat", "-addr", debugAddr}, &sout, &serr); code != exitOK {
		t.Fatalf("stat: exit %d: %s", code, serr.String())
	}
	t.Logf("rsockbench stat:\n%s", sout.String())
	var rdmaLine, tcpLine, devLine bool
	for _, l := range strings.Split(sout.String(), "\n") {
		fields := strings.Fields(l)
		switch {
		case len(fields) > 3 && fields[0] == "rdma" && fields[2] == rLocal:
			rdmaLine = strings.Contains(l, "rdma/softroce/udp") && strings.Contains(l, "qpn:") && strings.Contains(l, "retrans:")
		case len(fields) > 3 && fields[0] == "tcp" && fields[2] == fLocal:
			tcpLine = strings.Contains(l, `reason:"`) && strings.Contains(l, "memif")
		case len(fields) > 1 && fields[0] == "link" && strings.HasPrefix(fields[1], r.Device+"/"):
			devLine = strings.Contains(l, "sent_pkts") && strings.Contains(l, "conns ")
		}
	}
	if !rdmaLine || !tcpLine || !devLine {
		t.Errorf("stat: a line for the RDMA conn %v, for the TCP conn with its reason %v, for the device %v", rdmaLine, tcpLine, devLine)
	}

	// Bad addresses are errors, not hangs.
	if code := run([]string{"stat", "-addr", "127.0.0.1:1", "-timeout", "2s"}, &sout, &serr); code != exitFail {
		t.Errorf("stat of a closed port: exit %d", code)
	}
	if code := run([]string{"stat"}, &sout, &serr); code != exitUsage {
		t.Errorf("stat without -addr: exit %d", code)
	}
}

// fetch reads the rsock snapshot from a /debug/vars URL, checking that
// the whole document is JSON.
func fetch(t *testing.T, url string) netconn.State {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var vars map[string]json.RawMessage
	if err := json.NewDecoder(resp.Body).Decode(&vars); err != nil {
		t.Fatalf("%s: not JSON: %v", url, err)
	}
	var st netconn.State
	if err := json.Unmarshal(vars[netconn.ExpvarName], &st); err != nil {
		t.Fatalf("%s: %q: %v", url, netconn.ExpvarName, err)
	}
	return st
}

// findConn finds the server's end of the conn whose peer is remote: on a
// device if rdma, else among the TCP conns.
func findConn(st netconn.State, remote string, rdma bool) *netconn.ConnStats {
	if rdma {
		for _, d := range st.Devices {
			for i := range d.Conns {
				if d.Conns[i].Remote.String() == remote {
					return &d.Conns[i]
				}
			}
		}
		return nil
	}
	for i := range st.TCPConns {
		if st.TCPConns[i].Remote.String() == remote {
			return &st.TCPConns[i]
		}
	}
	return nil
}

// TestRDMADetailsECN: an RDMA conn's line shows the ECN counters once
// any is non-zero, and not before (ss -ti's style: only what happened).
func TestRDMADetailsECN(t *testing.T) {
	c := netconn.ConnStats{Device: "softroce0", QPN: 17}
	if s := rdmaDetails(c); strings.Contains(s, "ecn_") {
		t.Errorf("no ECN counts, yet %q", s)
	}
	c.ECNCERecv, c.ECNEchoesSent, c.ECNEchoesRecv, c.ECNMarksEchoed = 5, 2, 3, 7
	s := rdmaDetails(c)
	if !strings.Contains(s, "ecn_ce_recv:5 ecn_echoes_sent:2 ecn_echoes_recv:3 ecn_marks_echoed:7") {
		t.Errorf("ECN counts missing from %q", s)
	}
}
