//go:build linux

package shm

import (
	"testing"

	"github.com/rsock-go/rsock/internal/verbstest"
	"github.com/rsock-go/rsock/verbs"
)

// TestOperations runs the suite every provider passes (internal/verbstest)
// between two devices of one process joined by a channel, at sizes up to
// 1 MiB.
func TestOperations(t *testing.T) {
	da, db := newPair(t)
	const big = 1 << 20
	a, b := newNode(t, da, 2*big, allAccess), newNode(t, db, 2*big, allAccess)
	connect(t, a, b, allAccess)
	verbstest.Operations(t, a.vt(), b.vt(), verbs.MTU4096, big, wcTimeout)
}
