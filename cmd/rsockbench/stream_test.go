package main

import (
	"bufio"
	"bytes"
	"encoding/xml"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestStreamFlagErrors(t *testing.T) {
	for _, args := range [][]string{
		{"local", "-sizes", "0"},
		{"local", "-sizes", "65MiB"},
		{"local", "-conns", "0"},
		{"local", "-conns", "x"},
		{"local", "-modes", "bulk"},
		{"local", "-transports", "udp"},
		{"local", "-duration", "0"},
		{"local", "-bytes", "-5"},
		{"local", "-bytes", "1MiB", "-modes", "pingpong"},
		{"local", "-corrupt-at", "5"},
		{"local", "-addr", "x"},
		{"local", "-host", "x"},
		{"client", "extra"},
		{"client", "-iters", "-1"},
		{"server", "-addr", "127.0.0.1"},
		{"server", "-sessions", "-1"},
		{"server", "-sizes", "1KiB"},
	} {
		var out, errb bytes.Buffer
		if code := run(args, &out, &errb); code != exitUsage || errb.Len() == 0 {
			t.Errorf("%v: exit %d, stderr %q", args, code, errb.String())
		}
	}
	for _, cmd := range []string{"local", "server", "client"} {
		var out, errb bytes.Buffer
		if code := run([]string{cmd, "-h"}, &out, &errb); code != exitOK || !strings.Contains(errb.String(), "-verify") ||
			strings.Contains(errb.String(), "corrupt-at") {
			t.Errorf("%s -h: exit %d, stderr %q", cmd, code, errb.String())
		}
	}
}

func TestDefaultTCPAddr(t *testing.T) {
	for _, c := range []struct{ addr, tcp, want string }{
		{"127.0.0.1:18600", "", "127.0.0.1:18601"},
		{"127.0.0.1:0", "", "127.0.0.1:0"},
		{"[::1]:7", "", "[::1]:8"},
		{":5000", "", ":5001"},
		{"127.0.0.1:1", "10.0.0.1:9", "10.0.0.1:9"},
	} {
		if got, err := defaultTCPAddr(c.addr, c.tcp); err != nil || got != c.want {
			t.Errorf("%q %q: %q %v", c.addr, c.tcp, got, err)
		}
	}
	if _, err := defaultTCPAddr("127.0.0.1:65535", ""); err == nil {
		t.Error("port 65535 + 1 accepted")
	}
}

// TestStreamBinary builds rsockbench and runs local, and server and client
// as two processes.
func TestStreamBinary(t *testing.T) {
	bin := buildBin(t)
	t.Run("local", func(t *testing.T) { testStreamLocal(t, bin) })
	t.Run("host", func(t *testing.T) { testStreamLocalHost(t, bin) })
	t.Run("procs", func(t *testing.T) { testStreamLocalProcs(t, bin) })
	t.Run("verify", func(t *testing.T) { testStreamVerify(t, bin) })
	t.Run("corrupt", func(t *testing.T) { testStreamCorrupt(t, bin) })
}

// testStreamLocalHost runs local's two processes on another loopback
// address, as on a guest's RoCEv2 address for -provider rdmacore.
func testStreamLocalHost(t *testing.T, bin string) {
	args := []string{"local", "-v", "-host", "127.0.0.2", "-sizes", "1KiB", "-conns", "1", "-modes", "pingpong", "-duration", "100ms", "-iters", "50"}
	code, stdout, stderr := runBin(t, bin, args...)
	if code != 0 {
		t.Fatalf("rsockbench %v: exit %d\nstdout:\n%s\nstderr:\n%s", args, code, stdout, stderr)
	}
	if !strings.Contains(stderr, streamServerPrefix+"127.0.0.2:") || !strings.Contains(stdout, "rsock/tcp") {
		t.Errorf("the server did not listen on 127.0.0.2, or no ratio:\nstdout:\n%s\nstderr:\n%s", stdout, stderr)
	}
}

// testStreamLocalProcs runs local with -procs 1: both processes must say
// they ran with GOMAXPROCS 1, in the output and in every record; without
// -procs both run with the same default.
func testStreamLocalProcs(t *testing.T, bin string) {
	for _, procs := range []int{1, 0} {
		js := filepath.Join(t.TempDir(), "out.json")
		args := []string{"local", "-sizes", "1KiB", "-conns", "1", "-modes", "pingpong", "-duration", "100ms", "-iters", "50", "-json", js}
		if procs > 0 {
			args = append(args, "-procs", strconv.Itoa(procs))
		}
		code, stdout, stderr := runBin(t, bin, args...)
		if code != 0 {
			t.Fatalf("rsockbench %v: exit %d\nstdout:\n%s\nstderr:\n%s", args, code, stdout, stderr)
		}
		recs := readRecords(t, js)
		if len(recs) != 2 {
			t.Fatalf("%d records, want 2", len(recs))
		}
		for _, r := range recs {
			c, _ := r["client_gomaxprocs"].(float64)
			s, _ := r["server_gomaxprocs"].(float64)
			if c < 1 || s != c || (procs > 0 && c != float64(procs)) {
				t.Errorf("-procs %d: client GOMAXPROCS %v, server %v", procs, r["client_gomaxprocs"], r["server_gomaxprocs"])
			}
		}
		if procs > 0 && !strings.Contains(stdout, "GOMAXPROCS 1 in the client, 1 in the server") {
			t.Errorf("-procs 1: output does not say so:\n%s", stdout)
		}
	}
	if code, _, stderr := runBin(t, bin, "local", "-procs", "-1"); code != exitUsage {
		t.Errorf("-procs -1: exit %d, want %d (%s)", code, exitUsage, stderr)
	}
}

func testStreamLocal(t *testing.T, bin string) {
	dir := t.TempDir()
	js, svg := filepath.Join(dir, "out.json"), filepath.Join(dir, "out.svg")
	args := []string{"local", "-sizes", "1KiB,64KiB", "-conns", "1", "-duration", "200ms", "-json", js, "-plot", svg}
	code, stdout, stderr := runBin(t, bin, args...)
	if code != 0 {
		t.Fatalf("rsockbench %v: exit %d\nstdout:\n%s\nstderr:\n%s", args, code, stdout, stderr)
	}
	t.Logf("\n%s", stdout)
	if stderr != "" {
		t.Errorf("stderr is not a terminal, yet it got %q", stderr)
	}
	for _, s := range []string{"stream throughput", "ping-pong round-trip latency", "rsock/tcp", "64KiB"} {
		if !strings.Contains(stdout, s) {
			t.Errorf("output lacks %q", s)
		}
	}
	recs := readRecords(t, js)
	if len(recs) != 8 {
		t.Fatalf("%d records, want 8", len(recs))
	}
	// Every point has both transports, so every ratio is computable.
	type key struct {
		mode string
		size float64
	}
	gbps := map[key]map[string]float64{}
	for _, r := range recs {
		k := key{r["mode"].(string), r["size"].(float64)}
		if gbps[k] == nil {
			gbps[k] = map[string]float64{}
		}
		tr, _ := r["transport"].(string)
		gbps[k][tr], _ = r["gbps"].(float64)
		want := map[string]string{"rsock": loopbackTransport(), "tcp": "tcp"}[tr]
		if r["conn_transport"] != want || r["server_transport"] != want || r["conns"] != 1.0 {
			t.Errorf("record %v", r)
		}
		for _, f := range []string{"bytes", "seconds", "client_cpu_s_per_gb", "server_cpu_s_per_gb"} {
			if v, _ := r[f].(float64); v <= 0 {
				t.Errorf("%s = %v in %v", f, r[f], r)
			}
		}
		if k.mode == "pingpong" {
			p50, _ := r["p50_us"].(float64)
			p999, _ := r["p999_us"].(float64)
			if p50 <= 0 || p999 < p50 {
				t.Errorf("percentiles in %v", r)
			}
		}
	}
	if len(gbps) != 4 {
		t.Fatalf("points %v", gbps)
	}
	for k, m := range gbps {
		if m["tcp"] <= 0 || m["rsock"] <= 0 {
			t.Errorf("%v: no ratio from %v", k, m)
		}
	}
	b := readFile(t, svg)
	var doc struct {
		XMLName xml.Name
		G       []struct {
			Polylines []struct{} `xml:"polyline"`
		} `xml:"g"`
	}
	if err := xml.Unmarshal(b, &doc); err != nil {
		t.Fatalf("-plot is not well-formed XML: %v", err)
	}
	if doc.XMLName.Local != "svg" || len(doc.G) != 2 || len(doc.G[0].Polylines) != 2 || len(doc.G[1].Polylines) != 2 {
		t.Errorf("SVG %v with %d panels", doc.XMLName, len(doc.G))
	}
}

// startStreamServer runs "rsockbench server" and returns its address and
// a function that waits for its exit code and output.
func startStreamServer(t *testing.T, bin string, args ...string) (string, func() (int, string)) {
	t.Helper()
	srv := exec.Command(bin, append([]string{"server", "-addr", "127.0.0.1:0"}, args...)...)
	pipe, err := srv.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errb bytes.Buffer
	srv.Stderr = &errb
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	kill := time.AfterFunc(30*time.Second, func() { srv.Process.Kill() })
	r := bufio.NewReader(pipe)
	line, err := r.ReadString('\n')
	rest, ok := strings.CutPrefix(strings.TrimSpace(line), streamServerPrefix)
	addr, _, ok2 := strings.Cut(rest, ",")
	if err != nil || !ok || !ok2 {
		srv.Process.Kill()
		srv.Wait()
		t.Fatalf("server said %q, %v", line, err)
	}
	var out bytes.Buffer
	copied := make(chan struct{})
	go func() { out.ReadFrom(r); close(copied) }()
	done := false
	wait := func() (int, string) {
		if !done {
			<-copied
			srv.Wait()
			kill.Stop()
			done = true
		}
		return srv.ProcessState.ExitCode(), out.String() + errb.String()
	}
	t.Cleanup(func() {
		if !done {
			srv.Process.Kill()
			wait()
		}
	})
	return addr, wait
}

func testStreamVerify(t *testing.T, bin string) {
	addr, wait := startStreamServer(t, bin, "-verify", "-sessions", "1")
	code, stdout, stderr := runBin(t, bin, "client", "-verify", "-bytes", "67108864", "-addr", addr)
	if code != 0 || !strings.Contains(stdout, "verified 67108864 bytes") {
		t.Fatalf("client: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	t.Logf("client:\n%s", stdout)
	if code, out := wait(); code != 0 || !strings.Contains(out, "verified 67108864") {
		t.Fatalf("server: exit %d\n%s", code, out)
	}
}

func testStreamCorrupt(t *testing.T, bin string) {
	addr, wait := startStreamServer(t, bin, "-verify")
	code, stdout, stderr := runBin(t, bin, "client", "-verify", "-bytes", "16MiB", "-corrupt-at", "1000003", "-addr", addr)
	if code != exitFail || !strings.Contains(stderr, "offset 1000003") {
		t.Fatalf("client: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	t.Logf("client: %s", strings.TrimSpace(stderr))
	code, out := wait()
	if code != exitFail || !strings.Contains(out, "offset 1000003") {
		t.Fatalf("server: exit %d\n%s", code, out)
	}
	t.Logf("server: %s", strings.TrimSpace(out))
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// loopbackTransport is the transport of an rsock connection over loopback
// with the environment's link: shm (auto's choice on one host), or the
// link RSOCK_LINK names.
func loopbackTransport() string {
	switch os.Getenv("RSOCK_LINK") {
	case "udp":
		return "rdma/softroce/udp"
	case "memif":
		return "rdma/softroce/memif"
	}
	return "rdma/shm"
}
