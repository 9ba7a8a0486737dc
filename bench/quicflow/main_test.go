package main

import (
	"context"
	"testing"
	"time"
)

// TestFlowOverLoopback: the client's count is what the server read, and
// the client's time covers the server's reading of it.
func TestFlowOverLoopback(t *testing.T) {
	ln, err := listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type result struct {
		n   int64
		err error
	}
	got := make(chan result, 1)
	go func() {
		n, err := serveOne(context.Background(), ln)
		got <- result{n, err}
	}()
	const dur = 300 * time.Millisecond
	n, el, err := send(context.Background(), ln.Addr().String(), dur)
	if err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil {
		t.Fatalf("server: %v", r.err)
	}
	if n == 0 || r.n != n {
		t.Fatalf("client wrote %d bytes, server read %d", n, r.n)
	}
	if el < dur {
		t.Fatalf("goodput time %v, shorter than the %v of writing", el, dur)
	}
}

// TestClientSeesNoServer: a client whose server is not there fails
// rather than reporting a goodput.
func TestClientSeesNoServer(t *testing.T) {
	ln, err := listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, _, err := send(ctx, addr, 100*time.Millisecond); err == nil {
		t.Fatal("send to a closed port succeeded")
	}
}
