package fallback

import (
	"container/list"
	"sync"
	"time"
)

// Defaults for NewPlainCache.
const (
	DefaultPlainTTL = 5 * time.Minute
	DefaultPlainMax = 1024
)

// PlainCache remembers, for a while, addresses that answered like a plain TCP
// server, so that a dialer pays the failed negotiation once and then dials
// plainly. It is bounded (the oldest entry is evicted first), entries expire
// after the TTL, and it is safe for concurrent use. The methods of a nil
// *PlainCache do nothing and report nothing as plain.
type PlainCache struct {
	mu      sync.Mutex
	ttl     time.Duration
	max     int
	now     func() time.Time
	entries map[string]*list.Element
	order   list.List // of *plainEntry, oldest (soonest to expire) first
}

type plainEntry struct {
	addr    string
	expires time.Time
}

// NewPlainCache returns a cache whose entries live for ttl (DefaultPlainTTL
// if ttl <= 0) and that holds at most max entries (DefaultPlainMax if
// max <= 0).
func NewPlainCache(ttl time.Duration, max int) *PlainCache {
	if ttl <= 0 {
		ttl = DefaultPlainTTL
	}
	if max <= 0 {
		max = DefaultPlainMax
	}
	return &PlainCache{ttl: ttl, max: max, now: time.Now, entries: make(map[string]*list.Element)}
}

// SetClock replaces time.Now as the cache's clock, for tests. A nil now
// restores time.Now.
func (c *PlainCache) SetClock(now func() time.Time) {
	if c == nil {
		return
	}
	if now == nil {
		now = time.Now
	}
	c.mu.Lock()
	c.now = now
	c.mu.Unlock()
}

// pruneLocked drops expired entries from the old end.
func (c *PlainCache) pruneLocked(now time.Time) {
	for e := c.order.Front(); e != nil; e = c.order.Front() {
		pe := e.Value.(*plainEntry)
		if now.Before(pe.expires) {
			return
		}
		c.order.Remove(e)
		delete(c.entries, pe.addr)
	}
}

// IsPlain reports whether addr was marked plain less than the TTL ago.
func (c *PlainCache) IsPlain(addr string) bool {
	if c == nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[addr]
	if !ok {
		return false
	}
	if c.now().Before(e.Value.(*plainEntry).expires) {
		return true
	}
	c.order.Remove(e)
	delete(c.entries, addr)
	return false
}

// MarkPlain records that addr answered like a plain TCP server. Marking an
// address again restarts its TTL. When the cache is full the oldest entry is
// evicted.
func (c *PlainCache) MarkPlain(addr string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	expires := now.Add(c.ttl)
	if e, ok := c.entries[addr]; ok {
		e.Value.(*plainEntry).expires = expires
		c.order.MoveToBack(e)
		return
	}
	c.pruneLocked(now)
	for c.order.Len() >= c.max {
		e := c.order.Front()
		c.order.Remove(e)
		delete(c.entries, e.Value.(*plainEntry).addr)
	}
	c.entries[addr] = c.order.PushBack(&plainEntry{addr: addr, expires: expires})
}

// Forget removes addr from the cache, e.g. after the server was upgraded.
func (c *PlainCache) Forget(addr string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.entries[addr]; ok {
		c.order.Remove(e)
		delete(c.entries, addr)
	}
}

// Len returns the number of unexpired entries.
func (c *PlainCache) Len() int {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pruneLocked(c.now())
	return c.order.Len()
}
