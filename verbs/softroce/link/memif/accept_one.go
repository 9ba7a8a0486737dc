//go:build linux

package memif

import (
	"container/list"
	"errors"
	"fmt"
	"net"
	"sync"
)

// maxConcurrentHandshakes bounds the clients AcceptOne serves at once; a
// further client closes the one that has been waiting longest.
const maxConcurrentHandshakes = 8

// AcceptOne serves clients until one completes the handshake, returns its
// link and closes the listener: it is for a socket offered to one peer.
// Clients are served concurrently, as they come, so a client that stalls
// delays nobody; at most maxConcurrentHandshakes at once (8), a further
// one closing the oldest, each for at most Config.HandshakeTimeout. A
// client refused by Config.CheckPeer is closed before any message, and
// one that fails the handshake (a wrong secret, say) is refused: neither
// ends the wait, however many there are. It returns an error once the
// listener is closed (the caller's deadline) without a link; the error
// then names the last client refused, if any.
func (ln *Listener) AcceptOne() (*Link, error) {
	var (
		mu       sync.Mutex
		inflight list.List // of *pendingClient, oldest first
		lastErr  error
		closing  bool // the accept loop ended: failures are its doing
		won      *Link
		wg       sync.WaitGroup
	)
	for {
		conn, err := ln.ln.AcceptUnix()
		if err != nil {
			mu.Lock()
			closing = true
			for e := inflight.Front(); e != nil; e = e.Next() {
				e.Value.(*pendingClient).conn.Close()
			}
			mu.Unlock()
			wg.Wait()
			if won != nil {
				return won, nil
			}
			if lastErr != nil {
				return nil, fmt.Errorf("memif: no client connected (the last refused: %w): %w", lastErr, err)
			}
			return nil, fmt.Errorf("memif: accept: %w", err)
		}
		if err := ln.checkPeer(conn); err != nil {
			mu.Lock()
			lastErr = err
			mu.Unlock()
			continue
		}
		p := &pendingClient{conn: conn}
		mu.Lock()
		if won != nil {
			mu.Unlock()
			conn.Close()
			continue
		}
		if inflight.Len() >= maxConcurrentHandshakes {
			old := inflight.Remove(inflight.Front()).(*pendingClient)
			old.shed = true
			old.conn.Close()
		}
		p.elem = inflight.PushBack(p)
		mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := ln.serve(conn)
			mu.Lock()
			defer mu.Unlock()
			if !p.shed {
				inflight.Remove(p.elem)
			}
			switch {
			case err == nil && !p.shed && won == nil:
				won = l
				ln.ln.Close() // ends the accept loop
			case err == nil:
				l.Close() // a link on a closed control socket, or a second one
			case closing:
			case p.shed:
				lastErr = errors.New("memif: client closed to serve a newer one: " + err.Error())
			default:
				lastErr = err
			}
		}()
	}
}

// pendingClient is a client AcceptOne is serving.
type pendingClient struct {
	conn *net.UnixConn
	elem *list.Element
	shed bool // closed for a newer client
}
