package netconn

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
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

// childRoles are the child process's other roles, by the part of
// childEnv before its first colon (the role gets the rest), registered
// by the files that use them (memif_test.go and shm_conn_test.go, which
// build on Linux only).
var childRoles = map[string]func(arg string){}

// runChild is the child process of TestPeerKilled: with "listen" in its
// environment it listens on loopback, prints the address and accepts one
// connection; otherwise it dials the address in its environment. It
// prints its transport and streams both ways until killed.
func runChild() {
	if name, arg, _ := strings.Cut(os.Getenv(childEnv), ":"); childRoles[name] != nil {
		childRoles[name](arg)
		return
	}
	var c net.Conn
	var err error
	if os.Getenv(childEnv) == "listen" {
		var ln net.Listener
		if ln, err = Listen("tcp", "127.0.0.1:0"); err == nil {
			fmt.Println(ln.Addr())
			c, err = ln.Accept()
		}
	} else {
		c, err = (&Dialer{}).DialContext(context.Background(), "tcp", os.Getenv(childEnv))
	}
	if err != nil {
		fmt.Println("child:", err)
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

// TestPeerKilled: a peer process killed with SIGKILL mid-stream, as
// dialer or as listener, while data flows both ways; the survivor's Read
// and Write fail within 5 s, and once it closed, nothing of the link is
// left (no memif mapping, memfd or socket).
func TestPeerKilled(t *testing.T) {
	for _, role := range []string{"dialer", "listener"} {
		t.Run("child-"+role, func(t *testing.T) { peerKilled(t, role) })
	}
}

func peerKilled(t *testing.T, childRole string) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	var ln net.Listener
	if childRole == "dialer" {
		ln = listen(t, ListenConfig{})
		cmd.Env = append(os.Environ(), childEnv+"="+ln.Addr().String())
	} else {
		cmd.Env = append(os.Environ(), childEnv+"=listen")
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	lines := bufio.NewReader(out)
	var s net.Conn
	if childRole == "dialer" {
		s, err = ln.Accept()
	} else {
		var addr string
		if addr, err = lines.ReadString('\n'); err == nil {
			s, err = Dial("tcp", strings.TrimSpace(addr))
		}
	}
	if err != nil {
		cmd.Process.Kill()
		t.Fatal(err)
	}
	defer s.Close()
	line, _ := lines.ReadString('\n')
	if strings.TrimSpace(line) != loopbackTransport() || transport(s) != loopbackTransport() {
		cmd.Process.Kill()
		t.Fatalf("transports: child %q, here %q", line, transport(s))
	}
	// Let data flow both ways, then kill the child mid-stream.
	buf := make([]byte, 1<<20)
	if _, err := io.ReadFull(s, buf); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Write(buf[:256<<10]); err != nil {
		t.Fatal(err)
	}
	if loopbackTransport() != trUDP && len(linkResidue(t)) == 0 {
		t.Fatal("linkResidue sees nothing of a live same-host link: it cannot see what is left behind")
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
	wrote := time.Since(killed)
	// shm learns of the death from the channel's socket at once: within
	// milliseconds (bounded loosely here, for a loaded machine).
	quick := 5 * time.Second
	if transport(s) == trShm {
		quick = time.Second
		if !errors.Is(werr, syscall.ECONNRESET) {
			t.Errorf("write error %v does not wrap ECONNRESET", werr)
		}
	}
	select {
	case err := <-readErr:
		t.Logf("read failed after %v: %v; write after %v: %v", time.Since(killed), err, wrote, werr)
		if !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("read error %v does not wrap ECONNRESET", err)
		}
		if time.Since(killed) > quick {
			t.Errorf("read failed %v after the kill, want within %v", time.Since(killed), quick)
		}
	case <-time.After(5*time.Second - time.Since(killed)):
		t.Fatal("read still blocked 5 s after the peer was killed")
	}
	if werr == nil || wrote > quick {
		t.Fatalf("write: %v after %v, want within %v", werr, wrote, quick)
	}
	s.Close()
	if left := linkResidue(t); len(left) > 0 {
		t.Fatalf("left behind after the survivor closed: %q", left)
	}
}

// TestPeerStopped: a peer process stopped with SIGSTOP mid-stream (alive,
// its channel open, never reading): the survivor's read and write
// deadlines still fire, with os.ErrDeadlineExceeded.
func TestPeerStopped(t *testing.T) {
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
	defer cmd.Process.Kill()
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	line, _ := bufio.NewReader(out).ReadString('\n')
	if strings.TrimSpace(line) != loopbackTransport() || transport(s) != loopbackTransport() {
		t.Fatalf("transports: child %q, here %q", line, transport(s))
	}
	buf := make([]byte, 1<<20)
	if _, err := io.ReadFull(s, buf); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// Drain what the child wrote before it stopped, then wait on nothing.
	s.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	var rerr error
	for rerr == nil {
		_, rerr = s.Read(buf)
	}
	if !errors.Is(rerr, os.ErrDeadlineExceeded) {
		t.Fatalf("read from a stopped peer: %v, want a deadline error", rerr)
	}
	// Fill what the stopped child does not read, until the deadline.
	s.SetWriteDeadline(time.Now().Add(500 * time.Millisecond))
	start := time.Now()
	var werr error
	for werr == nil && time.Since(start) < 10*time.Second {
		_, werr = s.Write(buf)
	}
	if !errors.Is(werr, os.ErrDeadlineExceeded) {
		t.Fatalf("write to a stopped peer: %v after %v, want a deadline error", werr, time.Since(start))
	}
	cmd.Process.Signal(syscall.SIGCONT)
}
