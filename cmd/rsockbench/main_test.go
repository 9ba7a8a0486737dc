package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestStat dials the server from this process: netconn keeps an idle
// soft-RoCE device open for a few seconds after its last connection
// closes, for the next one; its receive loop, fine clock and linger timer are not
// leaks.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/rsock-go/rsock/verbs/softroce.(*receiver).loop"),
		goleak.IgnoreAnyFunction("github.com/rsock-go/rsock/verbs/softroce.(*fineClock).run"),
		goleak.IgnoreAnyFunction("github.com/rsock-go/rsock/verbs/softroce/internal/timerfd.(*Timer).wait"),
		goleak.IgnoreAnyFunction("github.com/rsock-go/rsock/netconn.releaseDevice.func1"),
		// An shm channel outlives its last connection for a few seconds,
		// for the next one between the same two processes.
		goleak.IgnoreAnyFunction("github.com/rsock-go/rsock/verbs/shm.(*Device).watch"),
	)
}

func TestUsage(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(nil, &out, &errb); code != exitUsage || !strings.Contains(errb.String(), "verbs") {
		t.Errorf("no args: exit %d, stderr %q", code, errb.String())
	}
	out.Reset()
	if code := run([]string{"-h"}, &out, &errb); code != exitOK || !strings.Contains(out.String(), "Subcommands:") {
		t.Errorf("-h: exit %d, stdout %q", code, out.String())
	}
	errb.Reset()
	if code := run([]string{"nope"}, &out, &errb); code != exitUsage || !strings.Contains(errb.String(), `unknown subcommand "nope"`) {
		t.Errorf("unknown: exit %d, stderr %q", code, errb.String())
	}
}

func TestVerbsFlagErrors(t *testing.T) {
	for _, args := range [][]string{
		{"-test", "atomic_bw"},
		{"-iters", "5", "-duration", "1s"},
		{"-mtu", "1500"},
		{"-size", "0"},
		{"-tx-depth", "100000"},
		{"-server", "-local"},
		{"-roce", "localhost"},
		{"-provider", "nosuch"},
		{"-bogus"},
		{"extra"},
	} {
		var out, errb bytes.Buffer
		if code := run(append([]string{"verbs"}, args...), &out, &errb); code != exitUsage || errb.Len() == 0 {
			t.Errorf("verbs %v: exit %d, stderr %q", args, code, errb.String())
		}
	}
	var out, errb bytes.Buffer
	if code := run([]string{"verbs", "-h"}, &out, &errb); code != exitOK || !strings.Contains(errb.String(), "-tx-depth") {
		t.Errorf("verbs -h: exit %d, stderr %q", code, errb.String())
	}
}

// buildBin builds rsockbench into a temporary directory and returns its
// path; it skips the test without a go tool.
func buildBin(t *testing.T) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go tool: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "rsockbench")
	if out, err := exec.Command(goTool, "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// TestBinary builds rsockbench into a temporary directory and runs it as
// separate processes.
func TestBinary(t *testing.T) {
	bin := buildBin(t)
	t.Run("local", func(t *testing.T) { testVerbsLocal(t, bin) })
	t.Run("server-killed", func(t *testing.T) { testVerbsServerKilled(t, bin) })
	t.Run("no-server", func(t *testing.T) { testVerbsNoServer(t, bin) })
	t.Run("pcap", func(t *testing.T) { testLocalPcap(t, bin) })
}

// runBin runs the binary with a time limit and returns its exit code and output.
func runBin(t *testing.T, bin string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	timer := time.AfterFunc(30*time.Second, func() { cmd.Process.Kill() })
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

// readRecords parses a -json file: one JSON object per line.
func readRecords(t *testing.T, path string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var recs []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("-json line %q: %v", sc.Text(), err)
		}
		recs = append(recs, m)
	}
	return recs
}

// testVerbsLocal runs one-command -local tests and checks the -json records.
func testVerbsLocal(t *testing.T, bin string) {
	dir := t.TempDir()
	cases := []struct {
		args  []string
		test  string
		size  float64
		iters float64
	}{
		{[]string{"-test", "write_bw", "-size", "4096", "-iters", "2000"}, "write_bw", 4096, 2000},
		{[]string{"-test", "write_lat", "-iters", "1000"}, "write_lat", 65536, 1000},
	}
	for i, c := range cases {
		js := filepath.Join(dir, c.test+".json")
		args := append([]string{"verbs", "-local", "-json", js}, c.args...)
		code, stdout, stderr := runBin(t, bin, args...)
		if code != 0 {
			t.Fatalf("rsockbench %v: exit %d\nstdout:\n%s\nstderr:\n%s", args, code, stdout, stderr)
		}
		t.Logf("case %d:\n%s", i, stdout)
		if !strings.Contains(stdout, "#bytes") {
			t.Errorf("no table in output:\n%s", stdout)
		}
		recs := readRecords(t, js)
		if len(recs) != 1 {
			t.Fatalf("%d JSON records, want 1", len(recs))
		}
		r := recs[0]
		if r["mode"] != "verbs" || r["test"] != c.test || r["size"] != c.size || r["iters"] != c.iters ||
			r["bytes"] != c.size*c.iters {
			t.Errorf("record %v", r)
		}
		for _, k := range []string{"seconds", "gbps"} {
			if v, _ := r[k].(float64); v <= 0 {
				t.Errorf("%s = %v", k, r[k])
			}
		}
		user, _ := r["cpu_user_s"].(float64)
		sys, _ := r["cpu_sys_s"].(float64)
		if user+sys <= 0 {
			t.Errorf("cpu_user_s %v + cpu_sys_s %v", r["cpu_user_s"], r["cpu_sys_s"])
		}
		if c.test == "write_lat" {
			p50, _ := r["p50_us"].(float64)
			p99, _ := r["p99_us"].(float64)
			if p50 <= 0 || p50 > p99 {
				t.Errorf("p50 %v p99 %v", p50, p99)
			}
		}
		for _, k := range []string{"retransmits", "p999_us", "mtu"} {
			if _, ok := r[k]; !ok {
				t.Errorf("record lacks %q", k)
			}
		}
	}
}

// testVerbsServerKilled kills a server process in the middle of a test: the
// client must exit non-zero with a message, promptly.
func testVerbsServerKilled(t *testing.T, bin string) {
	srv := exec.Command(bin, "verbs", "-server", "-addr", "127.0.0.1:0", "-wait", "20s")
	pipe, err := srv.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		srv.Process.Kill()
		srv.Wait()
	}()
	line, err := bufio.NewReader(pipe).ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), verbsServerPrefix)
	if err != nil || !ok {
		t.Fatalf("server said %q, %v", line, err)
	}
	time.AfterFunc(500*time.Millisecond, func() { srv.Process.Kill() })
	start := time.Now()
	code, stdout, stderr := runBin(t, bin, "verbs", "-addr", addr, "-test", "write_bw", "-size", "4096", "-duration", "20s", "-timeout", "3s")
	if code != exitFail || !strings.Contains(stderr, "rsockbench verbs: write_bw:") {
		t.Fatalf("client: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("client took %v to give up", d)
	}
	t.Logf("client said: %s", strings.TrimSpace(stderr))
}

// testVerbsNoServer runs a client with nobody listening.
func testVerbsNoServer(t *testing.T, bin string) {
	code, _, stderr := runBin(t, bin, "verbs", "-addr", "127.0.0.1:1", "-test", "write_bw", "-timeout", "2s")
	if code != exitFail || !strings.Contains(stderr, "connect to server") {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
}
