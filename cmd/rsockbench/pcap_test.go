package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rsock-go/rsock/netconn"
	"github.com/rsock-go/rsock/verbs/softroce/pcap"
)

// testLocalPcap runs "rsockbench local -link udp" with RSOCK_PCAP set, as
// a user would: the server child inherits the variable. Each process must
// write a file of its own (mode 0600), both valid pcaps holding the
// stream's packets, and tshark (when installed) must read every frame of
// each.
func testLocalPcap(t *testing.T, bin string) {
	dir := t.TempDir()
	cmd := exec.Command(bin, "local", "-link", "udp", "-transports", "rsock", "-modes", "stream",
		"-bytes", "2MiB", "-sizes", "64KiB", "-conns", "1")
	cmd.Env = append(os.Environ(), netconn.EnvPcap+"="+filepath.Join(dir, "cap.pcap"), netconn.EnvPcapMax+"=")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	timer := time.AfterFunc(60*time.Second, func() { cmd.Process.Kill() })
	defer timer.Stop()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("%v\nstdout: %s\nstderr: %s", err, out.String(), errb.String())
	}
	m := regexp.MustCompile(`packet captures: (\S+) \(client\), (\S+) \(server\)`).FindStringSubmatch(errb.String())
	if m == nil {
		t.Fatalf("no capture files named on stderr: %s", errb.String())
	}
	files, err := filepath.Glob(filepath.Join(dir, "*"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 2 || m[1] == m[2] {
		t.Fatalf("files %v, named %s and %s: want two, one per process", files, m[1], m[2])
	}
	for _, f := range m[1:] {
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want 0600", f, fi.Mode().Perm())
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		r, err := pcap.NewReader(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		frames := 0
		for {
			_, err := r.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: frame %d: %v", f, frames+1, err)
			}
			frames++
		}
		// 2 MiB from client to server in 4 KiB packets (more with a
		// smaller MTU), each in both files: sent by one, received by the other.
		if frames < (2<<20)/4096 {
			t.Errorf("%s: %d frames, fewer than the stream's packets", f, frames)
		}
		t.Logf("%s: %d frames, %d bytes", filepath.Base(f), frames, len(b))
		if tshark, err := exec.LookPath("tshark"); err != nil {
			t.Log("tshark is not installed: its reading is not checked")
		} else {
			out, err := exec.Command(tshark, "-r", f, "-T", "fields", "-e", "frame.number").Output()
			if err != nil {
				t.Fatalf("tshark -r %s: %v", f, err)
			}
			if n := len(strings.Fields(string(out))); n != frames {
				t.Errorf("tshark read %d frames of %s, want %d", n, f, frames)
			}
		}
	}
}
