package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"
)

// exchangeConn opens the TCP connection over which rdma-core's tools and
// perftest swap queue pair addresses: a client dials host:port; a server
// (host empty) accepts one connection on port and stops listening.
func exchangeConn(ctx context.Context, host string, port int, timeout time.Duration) (net.Conn, error) {
	if host != "" {
		d := net.Dialer{Timeout: timeout}
		c, err := d.DialContext(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err != nil {
			return nil, fmt.Errorf("couldn't connect to %s:%d: %w", host, port, err)
		}
		return c, nil
	}
	ln, err := net.Listen("tcp", ":"+strconv.Itoa(port))
	if err != nil {
		return nil, fmt.Errorf("couldn't listen to port %d: %w", port, err)
	}
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	c, err := ln.Accept()
	ln.Close()
	if err != nil {
		return nil, fmt.Errorf("accept: %w", err)
	}
	return c, nil
}

// runExchange opens the exchange connection (to host, or as a server when
// host is empty), runs fn over it with a context that ends on SIGINT or
// SIGTERM, and turns the outcome into an exit code, reporting an error on
// stderr after name.
func runExchange(name, host string, port int, timeout time.Duration, stderr io.Writer, fn func(ctx context.Context, conn net.Conn) error) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	conn, err := exchangeConn(ctx, host, port, timeout)
	if err == nil {
		err = fn(ctx, conn)
		conn.Close()
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return exitFail
	}
	return exitOK
}

// parseRoCE parses a -roce IP:PORT, IPv4-mapped addresses as IPv4.
func parseRoCE(s string) (netip.AddrPort, error) {
	ap, err := netip.ParseAddrPort(s)
	if err != nil {
		return netip.AddrPort{}, err
	}
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), nil
}
