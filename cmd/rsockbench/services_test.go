package main

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestServicesFlagErrors(t *testing.T) {
	for _, args := range [][]string{
		{"-services", "memcached"},
		{"-transports", "udp"},
		{"-transports", "tcp,tcp"},
		{"-transports", "rsock:"},
		{"-transports", "unix", "-netns"},
		{"-callers", "0"},
		{"-callers", "x"},
		{"-duration", "0"},
		{"-warmup", "-1s"},
		{"-stuck", "0"},
		{"-size", "4"},
		{"-procs", "-1"},
		{"-mtu", "100"},
		{"-rounds", "0"},
		{"-host", "localhost"},
		{"extra"},
	} {
		var out, errb bytes.Buffer
		if code := run(append([]string{"services"}, args...), &out, &errb); code != exitUsage || errb.Len() == 0 {
			t.Errorf("services %v: exit %d, stderr %q", args, code, errb.String())
		}
	}
	var out, errb bytes.Buffer
	if code := run([]string{"services", "-h"}, &out, &errb); code != exitOK || !strings.Contains(errb.String(), "-transports") ||
		strings.Contains(errb.String(), "-serve") {
		t.Errorf("services -h: exit %d, stderr %q", code, errb.String())
	}
}

// runBinTimeout runs the binary, killed (by its PID) after limit, and
// returns its exit code and output.
func runBinTimeout(t *testing.T, limit time.Duration, bin string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	timer := time.AfterFunc(limit, func() { cmd.Process.Kill() })
	defer timer.Stop()
	err := cmd.Wait()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, out.String(), errb.String()
}

// TestServicesBinary builds rsockbench and runs services as two
// processes.
func TestServicesBinary(t *testing.T) {
	bin := buildBin(t)
	t.Run("loopback", func(t *testing.T) { testServicesLoopback(t, bin) })
	t.Run("procs", func(t *testing.T) { testServicesProcs(t, bin) })
	t.Run("server-killed", func(t *testing.T) { testServicesServerKilled(t, bin) })
	t.Run("netns", func(t *testing.T) { testServicesNetns(t, bin) })
}

// runServicesBin runs services with args and -json, and returns its records
// (one per service, callers and transport, checked for that) and stdout.
func runServicesBin(t *testing.T, bin string, svcs, trs, callers []string, rounds int, args ...string) ([]map[string]any, string) {
	t.Helper()
	js := filepath.Join(t.TempDir(), "services.json")
	args = append([]string{"services", "-json", js, "-duration", "500ms", "-warmup", "100ms",
		"-services", strings.Join(svcs, ","), "-transports", strings.Join(trs, ","), "-callers", strings.Join(callers, ","), "-rounds", strconv.Itoa(rounds)}, args...)
	code, stdout, stderr := runBinTimeout(t, 3*time.Minute, bin, args...)
	if code != 0 {
		t.Fatalf("rsockbench %v: exit %d\nstdout:\n%s\nstderr:\n%s", args, code, stdout, stderr)
	}
	t.Logf("rsockbench %s:\n%s", strings.Join(args, " "), stdout)
	recs := readRecords(t, js)
	if len(recs) != len(svcs)*len(trs)*len(callers)*rounds {
		t.Fatalf("%d records, want %d", len(recs), len(svcs)*len(trs)*len(callers)*rounds)
	}
	i := 0
	for _, s := range svcs {
		for _, c := range callers {
			for round := range rounds {
				for _, tr := range trs {
					r := recs[i]
					i++
					if r["service"] != s || r["transport"] != tr || strconv.Itoa(int(num(r["callers"]))) != c || int(num(r["round"])) != round {
						t.Errorf("record %d is %v %v x%v round %v, want %s %s x%s round %d", i, r["service"], r["transport"], r["callers"], r["round"], s, tr, c, round)
					}
				}
			}
		}
	}
	return recs, stdout
}

func num(v any) float64 { f, _ := v.(float64); return f }

// conns returns a record's connection counts of one side.
func conns(r map[string]any, side string) map[string]int {
	m := map[string]int{}
	raw, _ := r[side+"_conns"].(map[string]any)
	for k, v := range raw {
		m[k] = int(num(v))
	}
	return m
}

// checkServiceRecord checks that a point made requests with correct
// replies (the client checks each; an error fails the point) over
// connections that ran on what the transport asked for, on both sides.
func checkServiceRecord(t *testing.T, r map[string]any) {
	t.Helper()
	name := r["service"].(string) + " " + r["transport"].(string) + " x" + strconv.Itoa(int(num(r["callers"])))
	if e, ok := r["error"]; ok {
		t.Errorf("%s failed: %v", name, e)
	}
	if num(r["requests"]) < 1 || num(r["req_per_s"]) <= 0 || num(r["p50_us"]) <= 0 || num(r["p50_us"]) > num(r["p99_us"]) {
		t.Errorf("%s: requests %v, req/s %v, p50 %v, p99 %v", name, r["requests"], r["req_per_s"], r["p50_us"], r["p99_us"])
	}
	if num(r["client_cpu_us_per_req"]) <= 0 || num(r["server_cpu_us_per_req"]) <= 0 {
		t.Errorf("%s: CPU per request %v + %v", name, r["client_cpu_us_per_req"], r["server_cpu_us_per_req"])
	}
	tr := r["transport"].(string)
	callers := int(num(r["callers"]))
	for _, side := range []string{"client", "server"} {
		m := conns(r, side)
		total := 0
		for k, n := range m {
			total += n
			var ok bool
			switch {
			case tr == "tcp" || tr == "unix":
				ok = k == tr
			case strings.HasPrefix(tr, "rsock:"):
				ok = k == "rdma/softroce/"+strings.TrimPrefix(tr, "rsock:")
			default: // the library's default between two processes on one host: RDMA of some kind
				ok = strings.HasPrefix(k, "rdma/")
			}
			if !ok {
				t.Errorf("%s: %s connections ran on %v (fallbacks %v)", name, side, m, r["fallback_reasons"])
			}
		}
		// net/http dials a new connection for a request that finds none
		// idle, and one that is freed meanwhile lingers in the pool, so it
		// may hold a few more than its callers (on tcp and unix too).
		most := callers
		if r["service"] == "http" {
			most = 2 * callers
		}
		if total < 1 || total > most || (r["service"] == "grpc" && total != 1) {
			t.Errorf("%s: %d %s connections for %d callers: %v", name, total, side, callers, m)
		}
	}
	if tr != "tcp" {
		if _, ok := r["req_per_s_vs_tcp"]; !ok {
			t.Errorf("%s: no ratio to tcp", name)
		}
	} else if num(r["req_per_s_vs_tcp"]) != 1 {
		t.Errorf("%s: ratio to itself %v", name, r["req_per_s_vs_tcp"])
	}
}

// testServicesLoopback runs every service over every kind of transport,
// 1 and 3 callers.
func testServicesLoopback(t *testing.T, bin string) {
	recs, stdout := runServicesBin(t, bin, []string{"grpc", "redis", "http"}, []string{"tcp", "rsock", "unix", "rsock:udp"}, []string{"1", "3"}, 1)
	for _, r := range recs {
		checkServiceRecord(t, r)
		if r["path"] != "loopback 127.0.0.1" || num(r["client_gomaxprocs"]) < 1 || num(r["server_gomaxprocs"]) < 1 {
			t.Errorf("record %v", r)
		}
	}
	for _, want := range []string{"| grpc ", "| redis ", "| http ", "| rsock:udp ", "×TCP"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("table lacks %q", want)
		}
	}
}

// testServicesProcs runs with -procs 1 (both processes say so) and two
// rounds.
func testServicesProcs(t *testing.T, bin string) {
	recs, stdout := runServicesBin(t, bin, []string{"http"}, []string{"tcp", "rsock"}, []string{"2"}, 2, "-procs", "1")
	for _, r := range recs {
		checkServiceRecord(t, r)
		if num(r["client_gomaxprocs"]) != 1 || num(r["server_gomaxprocs"]) != 1 {
			t.Errorf("-procs 1: GOMAXPROCS %v in the client, %v in the server", r["client_gomaxprocs"], r["server_gomaxprocs"])
		}
	}
	if !strings.Contains(stdout, "GOMAXPROCS 1 in the client, 1 in the server") || !strings.Contains(stdout, "medians of 2 rounds") {
		t.Errorf("header: %s", stdout)
	}
}

// testServicesServerKilled kills the server child in the middle of a
// point: the run fails promptly, saying why.
func testServicesServerKilled(t *testing.T, bin string) {
	cmd := exec.Command(bin, "services", "-v", "-services", "redis", "-transports", "rsock", "-callers", "2", "-duration", "20s", "-stuck", "3s")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	var rest bytes.Buffer
	sc := bufio.NewScanner(stderr)
	pid := 0
	for sc.Scan() {
		if p, ok := strings.CutPrefix(sc.Text(), "server child: pid "); ok {
			pid, _ = strconv.Atoi(p)
			break
		}
		rest.WriteString(sc.Text() + "\n")
	}
	if pid <= 0 {
		t.Fatalf("no server child pid on stderr: %q", rest.String())
	}
	time.Sleep(time.Second)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	done := make(chan []byte)
	go func() { b, _ := io.ReadAll(stderr); done <- b }()
	var tail []byte
	select {
	case tail = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the client did not end within 30 s of the server's death")
	}
	err = cmd.Wait()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != exitFail || !strings.Contains(string(tail), "rsockbench services: server child exited (signal: killed)") {
		t.Fatalf("client: %v after the server died; stderr %s", err, tail)
	}
	t.Logf("after %v: %s", time.Since(start), bytes.TrimSpace(tail))
}

// testServicesNetns runs the two processes in two namespaces through a
// router: rsock's default and tcp, and the udp link.
func testServicesNetns(t *testing.T, bin string) {
	if os.Geteuid() != 0 {
		t.Skip("not root: cannot make network namespaces")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skipf("no ip (iproute2): %v", err)
	}
	before := labNamespaces(t)
	recs, _ := runServicesBin(t, bin, []string{"grpc", "http"}, []string{"tcp", "rsock", "rsock:udp"}, []string{"2"}, 1, "-netns")
	for _, r := range recs {
		if r["transport"] == "rsock" {
			// Between hosts the default may be TCP (with its reason) or
			// RDMA: say which.
			t.Logf("%s rsock between namespaces: client %v, server %v, fallbacks %v", r["service"], conns(r, "client"), conns(r, "server"), r["fallback_reasons"])
			if e, ok := r["error"]; ok || num(r["requests"]) < 1 {
				t.Errorf("rsock: %v requests, error %v", r["requests"], e)
			}
			continue
		}
		checkServiceRecord(t, r)
		if r["path"] != "two namespaces through a router namespace, MTU 1500" {
			t.Errorf("path %q", r["path"])
		}
	}
	if after := labNamespaces(t); after != before {
		t.Errorf("namespaces left behind: before %q, after %q", before, after)
	}
}

// labNamespaces lists the router labs' namespaces that exist.
func labNamespaces(t *testing.T) string {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, labNamePrefix) {
			names = append(names, strings.Fields(line)[0])
		}
	}
	return strings.Join(names, " ")
}
