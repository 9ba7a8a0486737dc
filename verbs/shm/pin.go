//go:build linux

package shm

import (
	"sync"
	"sync/atomic"
)

// pin guards a resource that a control message may retire while a data
// path uses it (a mapping of the peer's region, the peer's doorbell): it
// is freed when it was retired and its last user let go.
type pin struct {
	refs atomic.Int64
	dead atomic.Bool
	once sync.Once
	free func()
}

// acquire pins the resource for one use; false once it was retired.
func (p *pin) acquire() bool {
	p.refs.Add(1)
	if p.dead.Load() {
		p.release()
		return false
	}
	return true
}

func (p *pin) release() {
	if p.refs.Add(-1) == 0 && p.dead.Load() {
		p.once.Do(p.free)
	}
}

// retire frees the resource now, or when its last user lets go.
func (p *pin) retire() {
	p.dead.Store(true)
	if p.refs.Load() == 0 {
		p.once.Do(p.free)
	}
}
