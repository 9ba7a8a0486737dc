package fallback

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// tcpPair returns both ends of a loopback TCP connection.
func tcpPair(t *testing.T) (client, server *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s, err := ln.Accept()
	if err != nil {
		c.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return c.(*net.TCPConn), s.(*net.TCPConn)
}

func TestReplayConnRead(t *testing.T) {
	c, s := tcpPair(t)
	rc := NewReplayConn(s, []byte("hello "))
	if rc.Buffered() != 6 || rc.Unwrap() != s {
		t.Fatal("bad state")
	}
	if _, err := c.Write([]byte("world")); err != nil {
		t.Fatal(err)
	}
	c.CloseWrite()
	// Small reads: replayed bytes never mix with conn bytes in one read.
	buf := make([]byte, 4)
	n, err := rc.Read(buf)
	if err != nil || string(buf[:n]) != "hell" {
		t.Fatalf("read %q %v", buf[:n], err)
	}
	n, err = rc.Read(buf)
	if err != nil || string(buf[:n]) != "o " {
		t.Fatalf("read %q %v", buf[:n], err)
	}
	rest, err := io.ReadAll(rc)
	if err != nil || string(rest) != "world" {
		t.Fatalf("rest %q %v", rest, err)
	}
}

func TestReplayConnDeadlineAndClose(t *testing.T) {
	_, s := tcpPair(t)
	rc := NewReplayConn(s, []byte("abc"))
	rc.SetReadDeadline(time.Now().Add(-time.Second))
	_, err := rc.Read(make([]byte, 8))
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("past deadline: %v", err)
	}
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("not a timeout net.Error: %v", err)
	}
	rc.SetDeadline(time.Time{})
	if n, err := rc.Read(make([]byte, 1)); n != 1 || err != nil {
		t.Fatalf("after clearing deadline: %d %v", n, err)
	}
	rc.Close()
	if _, err := rc.Read(make([]byte, 8)); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("after close: %v", err)
	}
}

func TestReplayConnCloseWrite(t *testing.T) {
	c, s := tcpPair(t)
	rc := NewReplayConn(s, []byte("x"))
	if _, err := rc.Write([]byte("reply")); err != nil {
		t.Fatal(err)
	}
	if err := rc.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(c)
	if err != nil || string(got) != "reply" {
		t.Fatalf("peer read %q, %v; want reply then EOF", got, err)
	}
	// The read side still works after CloseWrite.
	c.Write([]byte("more"))
	c.CloseWrite()
	got, err = io.ReadAll(rc)
	if err != nil || string(got) != "xmore" {
		t.Fatalf("read %q %v", got, err)
	}
	_, s2 := tcpPair(t)
	if err := NewReplayConn(s2, nil).CloseRead(); err != nil {
		t.Fatal(err)
	}

	p1, p2 := net.Pipe()
	defer p1.Close()
	defer p2.Close()
	pc := NewReplayConn(p1, nil)
	if pc.CloseWrite() == nil || pc.CloseRead() == nil {
		t.Fatal("CloseWrite/CloseRead on net.Pipe should fail")
	}
}

func TestReplayConnCopy(t *testing.T) {
	c, s := tcpPair(t)
	rc := NewReplayConn(s, []byte("head-"))
	payload := bytes.Repeat([]byte("0123456789"), 10000)
	go func() {
		c.Write(payload)
		c.CloseWrite()
	}()
	var out bytes.Buffer
	n, err := io.Copy(&out, rc) // uses WriteTo
	if err != nil || n != int64(5+len(payload)) || !bytes.Equal(out.Bytes(), append([]byte("head-"), payload...)) {
		t.Fatalf("copy: %d %v", n, err)
	}
	// ReadFrom: the server sends a stream back through the replay conn.
	done := make(chan []byte)
	go func() {
		b, _ := io.ReadAll(c)
		done <- b
	}()
	if n, err := io.Copy(rc, bytes.NewReader(payload)); err != nil || n != int64(len(payload)) {
		t.Fatalf("ReadFrom: %d %v", n, err)
	}
	rc.CloseWrite()
	if got := <-done; !bytes.Equal(got, payload) {
		t.Fatalf("peer got %d bytes", len(got))
	}
}
