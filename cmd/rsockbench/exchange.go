package main

import (
	"context"
	"fmt"
	"net"
	"strconv"
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
