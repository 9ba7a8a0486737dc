package services

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
)

// HTTP is net/http: POST /echo with the payload as body, answered with
// the same body, over HTTP/1.1 with keep-alives.
type HTTP struct{}

// Name is "http".
func (HTTP) Name() string { return "http" }

// Describe says what a call is.
func (HTTP) Describe() string { return "net/http POST /echo, keep-alive" }

// echoHandler answers a POST with its body.
func echoHandler(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxSize+1))
	if err != nil || len(body) > MaxSize {
		http.Error(w, "bad body", http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Write(body)
}

// Serve runs an http.Server on ln.
func (HTTP) Serve(ln net.Listener) (func() error, error) {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /echo", echoHandler)
	srv := &http.Server{Handler: mux}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	return func() error {
		cerr := srv.Close()
		err := <-done
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		return errors.Join(err, cerr)
	}, nil
}

type httpClient struct {
	tr      *http.Transport
	client  *http.Client
	url     string
	scratch []scratch
}

// NewClient makes an http.Client whose Transport dials with cfg.Dial and
// keeps up to one connection per caller, idle between calls.
func (HTTP) NewClient(cfg ClientConfig) (Client, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return cfg.Dial(ctx, cfg.Addr)
		},
		MaxIdleConns:        cfg.Callers,
		MaxIdleConnsPerHost: cfg.Callers,
		MaxConnsPerHost:     cfg.Callers,
		DisableCompression:  true,
	}
	// The URL's host only names the server in requests: DialContext
	// reaches cfg.Addr, a Unix socket's path included.
	return &httpClient{tr: tr, client: &http.Client{Transport: tr}, url: "http://services.test/echo", scratch: newScratch(cfg)}, nil
}

func (c *httpClient) Call(ctx context.Context, caller int, seq uint64) error {
	s := &c.scratch[caller]
	fillPayload(s.req, caller, seq)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(s.req))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := c.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxSize+1))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("POST /echo: %s: %q", resp.Status, body)
	}
	return checkPayload(body, s.want, caller, seq)
}

func (c *httpClient) Close() error {
	c.tr.CloseIdleConnections()
	return nil
}
