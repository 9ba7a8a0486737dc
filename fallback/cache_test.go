package fallback

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func TestPlainCacheTTL(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	c := NewPlainCache(time.Minute, 10)
	c.SetClock(clk.Now)
	if c.IsPlain("a:1") {
		t.Fatal("empty cache says plain")
	}
	c.MarkPlain("a:1")
	clk.Advance(59 * time.Second)
	if !c.IsPlain("a:1") {
		t.Fatal("entry expired early")
	}
	c.MarkPlain("a:1") // refresh
	clk.Advance(59 * time.Second)
	if !c.IsPlain("a:1") {
		t.Fatal("refresh did not restart the TTL")
	}
	clk.Advance(time.Second)
	if c.IsPlain("a:1") {
		t.Fatal("entry outlived its TTL")
	}
	if c.Len() != 0 {
		t.Fatalf("Len %d after expiry", c.Len())
	}
	c.MarkPlain("b:1")
	c.Forget("b:1")
	if c.IsPlain("b:1") || c.Len() != 0 {
		t.Fatal("Forget did not forget")
	}
	c.Forget("never")
}

func TestPlainCacheEvictsOldest(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	c := NewPlainCache(time.Hour, 3)
	c.SetClock(clk.Now)
	for _, a := range []string{"a", "b", "c"} {
		c.MarkPlain(a)
		clk.Advance(time.Second)
	}
	c.MarkPlain("a") // a is now the newest
	c.MarkPlain("d") // evicts b
	if c.IsPlain("b") || !c.IsPlain("a") || !c.IsPlain("c") || !c.IsPlain("d") || c.Len() != 3 {
		t.Fatalf("eviction order wrong: len %d", c.Len())
	}
	// Expired entries go before live ones are evicted.
	clk.Advance(2 * time.Hour)
	c.MarkPlain("e")
	if c.Len() != 1 || !c.IsPlain("e") {
		t.Fatalf("expired entries kept: len %d", c.Len())
	}
}

func TestPlainCacheDefaultsAndNil(t *testing.T) {
	c := NewPlainCache(0, 0)
	if c.ttl != DefaultPlainTTL || c.max != DefaultPlainMax {
		t.Fatalf("defaults %v %d", c.ttl, c.max)
	}
	c.SetClock(nil)
	c.MarkPlain("x")
	if !c.IsPlain("x") {
		t.Fatal("real clock entry missing")
	}
	var n *PlainCache
	n.MarkPlain("x")
	n.Forget("x")
	n.SetClock(time.Now)
	if n.IsPlain("x") || n.Len() != 0 {
		t.Fatal("nil cache not empty")
	}
}

func TestPlainCacheConcurrent(t *testing.T) {
	c := NewPlainCache(time.Millisecond*50, 64)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 2000; i++ {
				a := fmt.Sprintf("10.0.0.%d:80", (g*31+i)%200)
				switch i % 4 {
				case 0, 1:
					c.MarkPlain(a)
				case 2:
					c.IsPlain(a)
				case 3:
					c.Forget(a)
				}
			}
		}()
	}
	wg.Wait()
	if n := c.Len(); n > 64 {
		t.Fatalf("cache grew to %d, max 64", n)
	}
	if len(c.entries) != c.order.Len() {
		t.Fatalf("map %d and list %d disagree", len(c.entries), c.order.Len())
	}
}
