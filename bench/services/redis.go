package services

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"github.com/tidwall/redcon"
)

// Redis is a Redis-protocol key-value server (tidwall/redcon, with SET,
// GET, PING and ECHO) driven by go-redis. Each caller alternates SET of
// its own key and GET of it, so half the calls write and half read.
type Redis struct{}

// Name is "redis".
func (Redis) Name() string { return "redis" }

// Describe says what a call is.
func (Redis) Describe() string { return "redcon server, go-redis client: SET, GET alternately" }

// store is the server's keys and values.
type store struct {
	mu sync.RWMutex
	kv map[string][]byte
}

func (s *store) handle(conn redcon.Conn, cmd redcon.Command) {
	name := strings.ToUpper(string(cmd.Args[0]))
	switch {
	case name == "PING" && len(cmd.Args) == 1:
		conn.WriteString("PONG")
	case name == "ECHO" && len(cmd.Args) == 2:
		conn.WriteBulk(cmd.Args[1])
	case name == "SET" && len(cmd.Args) == 3:
		v := append([]byte(nil), cmd.Args[2]...)
		s.mu.Lock()
		s.kv[string(cmd.Args[1])] = v
		s.mu.Unlock()
		conn.WriteString("OK")
	case name == "GET" && len(cmd.Args) == 2:
		s.mu.RLock()
		v, ok := s.kv[string(cmd.Args[1])]
		s.mu.RUnlock()
		if ok {
			conn.WriteBulk(v)
		} else {
			conn.WriteNull()
		}
	case name == "PING" || name == "ECHO" || name == "SET" || name == "GET":
		conn.WriteError("ERR wrong number of arguments for '" + strings.ToLower(name) + "' command")
	default:
		// HELLO among them: go-redis then speaks RESP2, as with an old
		// redis-server.
		conn.WriteError("ERR unknown command '" + string(cmd.Args[0]) + "'")
	}
}

// Serve runs a redcon server on ln.
func (Redis) Serve(ln net.Listener) (func() error, error) {
	st := &store{kv: map[string][]byte{}}
	var conns sync.WaitGroup
	done := make(chan error, 1)
	go func() {
		done <- redcon.Serve(ln, st.handle,
			func(redcon.Conn) bool { conns.Add(1); return true },
			func(redcon.Conn, error) { conns.Done() })
	}()
	return func() error {
		// redcon closes the connections it serves once its listener
		// fails with net.ErrClosed.
		cerr := ln.Close()
		err := <-done
		conns.Wait()
		if errors.Is(cerr, net.ErrClosed) {
			cerr = nil
		}
		return errors.Join(err, cerr)
	}, nil
}

type redisClient struct {
	rdb     *redis.Client
	scratch []scratch
	keys    []string
}

// NewClient makes a go-redis client whose pool, one connection per
// caller at most, dials with cfg.Dial.
func (Redis) NewClient(cfg ClientConfig) (Client, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	rdb := redis.NewClient(&redis.Options{
		Addr: cfg.Addr,
		Dialer: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return cfg.Dial(ctx, cfg.Addr)
		},
		Protocol:                 2,
		DisableIdentity:          true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
		PoolSize:                 cfg.Callers,
	})
	keys := make([]string, cfg.Callers)
	for i := range keys {
		keys[i] = "bench:" + strconv.Itoa(i)
	}
	return &redisClient{rdb: rdb, scratch: newScratch(cfg), keys: keys}, nil
}

// Call sets the caller's key to the call's payload when seq is even, and
// gets it back (the payload of call seq-1) when seq is odd.
func (c *redisClient) Call(ctx context.Context, caller int, seq uint64) error {
	s := &c.scratch[caller]
	if seq%2 == 0 {
		fillPayload(s.req, caller, seq)
		ok, err := c.rdb.Set(ctx, c.keys[caller], s.req, 0).Result()
		if err != nil {
			return err
		}
		if ok != "OK" {
			return fmt.Errorf("SET %s: %q, want OK", c.keys[caller], ok)
		}
		return nil
	}
	v, err := c.rdb.Get(ctx, c.keys[caller]).Bytes()
	if err != nil {
		return fmt.Errorf("GET %s: %w", c.keys[caller], err)
	}
	return checkPayload(v, s.want, caller, seq-1)
}

func (c *redisClient) Close() error { return c.rdb.Close() }
