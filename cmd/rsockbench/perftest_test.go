package main

import (
	"bytes"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestPerftestFlagErrors(t *testing.T) {
	for _, args := range [][]string{
		{"-q", "2"},
		{"-i", "2"},
		{"-c", "UD"},
		{"-m", "1500"},
		{"-s", "0"},
		{"-n", "4"},
		{"-u", "0"},
		{"-p", "70000"},
		{"-roce", "localhost"},
		{"-bogus"},
		{"host1", "host2"},
	} {
		var out, errb bytes.Buffer
		if code := run(append([]string{"ib_write_bw"}, args...), &out, &errb); code != exitUsage || errb.Len() == 0 {
			t.Errorf("ib_write_bw %v: exit %d, stderr %q", args, code, errb.String())
		}
	}
	var out, errb bytes.Buffer
	if code := run([]string{"ib_read_bw", "-h"}, &out, &errb); code != exitOK || !strings.Contains(errb.String(), "--qp-timeout") && !strings.Contains(errb.String(), "-qp-timeout") {
		t.Errorf("ib_read_bw -h: exit %d, stderr %q", code, errb.String())
	}
}

// TestPerftestModes runs each perftest mode as server and client, through
// the command's entry point, over loopback, each RoCE link on a port of
// its own. Flags come after the host, as getopt allows.
func TestPerftestModes(t *testing.T) {
	for _, mode := range []string{"ib_send_bw", "ib_write_bw", "ib_read_bw", "ib_write_lat"} {
		t.Run(mode, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
			ln.Close()
			args := []string{"-s", "3000", "-n", "20", "-m", "1024", "-p", port, "-linger", "0", "-timeout", "20s"}
			sp, cp := freeUDPPort(t), freeUDPPort(t)
			for sp == cp {
				cp = freeUDPPort(t)
			}
			type out struct {
				code        int
				stdout, err string
			}
			srvc := make(chan out, 1)
			go func() {
				var o, e bytes.Buffer
				code := run(append([]string{mode, "-roce", "127.0.0.1:" + sp, "-peer-roce-port", cp}, args...), &o, &e)
				srvc <- out{code, o.String(), e.String()}
			}()
			var cli out
			for range 100 {
				var o, e bytes.Buffer
				code := run(append([]string{mode, "127.0.0.1", "-roce", "127.0.0.1:" + cp, "-peer-roce-port", sp}, args...), &o, &e)
				cli = out{code, o.String(), e.String()}
				if code != exitFail || !strings.Contains(cli.err, "couldn't connect") {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			srv := <-srvc
			if cli.code != exitOK || srv.code != exitOK {
				t.Fatalf("client exit %d: %s%s\nserver exit %d: %s%s", cli.code, cli.stdout, cli.err, srv.code, srv.stdout, srv.err)
			}
			row := fmt.Sprintf(" %-7d ", 3000)
			for side, o := range map[string]out{"client": cli, "server": srv} {
				i := strings.Index(o.stdout, "#bytes")
				if i < 0 || !strings.Contains(o.stdout[i:], "\n"+row) || !strings.Contains(o.stdout[i:], " 20 ") {
					t.Errorf("%s: no result row for 3000 bytes × 20:\n%s", side, o.stdout)
				}
			}
		})
	}
}

// freeUDPPort returns a UDP port on 127.0.0.1 that was free a moment ago.
func freeUDPPort(t *testing.T) string {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return strconv.Itoa(c.LocalAddr().(*net.UDPAddr).Port)
}
