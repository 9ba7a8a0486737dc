package netconn

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rsock-go/rsock/rsock"
)

const childEnv = "RSOCK_NETCONN_TEST_CHILD"

var streamSmall = rsock.Config{RingSize: 64 << 10}

// runChild is the child process of TestPeerKilled: it dials the address
// in its environment, reports its transport, and streams until killed.
func runChild() {
	c, err := (&Dialer{}).DialContext(context.Background(), "tcp", os.Getenv(childEnv))
	if err != nil {
		fmt.Println("dial:", err)
		os.Exit(1)
	}
	fmt.Println(c.(*Conn).Transport())
	buf := make([]byte, 64<<10)
	go io.Copy(io.Discard, c)
	for {
		if _, err := c.Write(buf); err != nil {
			os.Exit(2)
		}
	}
}

// TestPeerKilled: a peer process killed with SIGKILL mid-stream; the
// survivor's Read and Write fail within 5 s, and once it closed, nothing
// of the link is left (no memif mapping, memfd or socket).
func TestPeerKilled(t *testing.T) {
	ln := listen(t, ListenConfig{})
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+ln.Addr().String())
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	s, err := ln.Accept()
	if err != nil {
		cmd.Process.Kill()
		t.Fatal(err)
	}
	defer s.Close()
	line := make([]byte, 64)
	n, _ := out.Read(line)
	if strings.TrimSpace(string(line[:n])) != loopbackTransport() {
		cmd.Process.Kill()
		t.Fatalf("child transport %q", line[:n])
	}
	// Let data flow, then kill the child mid-stream.
	buf := make([]byte, 1<<20)
	if _, err := io.ReadFull(s, buf); err != nil {
		t.Fatal(err)
	}
	if loopbackTransport() == trMemif && len(memifResidue(t)) == 0 {
		t.Fatal("memifResidue sees nothing of a live memif link: it cannot see what is left behind")
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	readErr := make(chan error, 1)
	go func() {
		rbuf := make([]byte, 64<<10)
		for {
			if _, err := s.Read(rbuf); err != nil {
				readErr <- err
				return
			}
		}
	}()
	var werr error
	for werr == nil && time.Since(killed) < 10*time.Second {
		_, werr = s.Write(buf[:4096])
	}
	select {
	case err := <-readErr:
		t.Logf("read failed after %v: %v", time.Since(killed), err)
	case <-time.After(5*time.Second - time.Since(killed)):
		t.Fatal("read still blocked 5 s after the peer was killed")
	}
	if werr == nil || time.Since(killed) > 5*time.Second {
		t.Fatalf("write: %v after %v", werr, time.Since(killed))
	}
	s.Close()
	if left := memifResidue(t); len(left) > 0 {
		t.Fatalf("left behind after the survivor closed: %q", left)
	}
}
