//go:build linux

package memif

import (
	"errors"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/rsock-go/rsock/verbs/softroce/link"
)

// childEnv names the socket a child test process dials.
const childEnv = "MEMIF_TEST_CHILD_SOCKET"

// TestPeerKilled runs the client in a child process, SIGKILLs it, and
// checks that the server's Recv fails within 5 s and that the server
// releases everything.
func TestPeerKilled(t *testing.T) {
	if path := os.Getenv(childEnv); path != "" {
		runChild(path)
		return
	}
	if testing.Short() {
		t.Skip("starts a child process")
	}
	path := sockPath(t)
	ln, err := Listen(path, testSecret, Config{})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestPeerKilled$")
	cmd.Env = append(os.Environ(), childEnv+"="+path)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	srv, err := ln.Accept()
	ln.Close() // the socket file is not needed once the peer is connected
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	recvN(t, srv, 1) // the child is up
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = recvErr(t, srv)
	if !errors.Is(err, errConnLost) || time.Since(start) > 5*time.Second {
		t.Fatalf("Recv after %v: %v", time.Since(start), err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket file left: %v", err)
	}
	t.Logf("survivor failed %v after SIGKILL: %v", time.Since(start).Round(time.Microsecond), err)
}

// runChild dials path, sends one packet and waits to be killed.
func runChild(path string) {
	l, err := Dial(path, testSecret, Config{Local: addrB})
	if err != nil {
		os.Exit(3)
	}
	l.Send([]link.Packet{{Buf: mkPkt(64, 0), N: 64, Addr: addrA}})
	time.Sleep(time.Minute)
	os.Exit(4)
}
