//go:build linux

package netconn

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// shmChannelsLeft appends the process's shm channels and the goroutines
// that watch channels to left.
func shmChannelsLeft(left *[]string) {
	shmChannels.Lock()
	for id, c := range shmChannels.byID {
		*left = append(*left, fmt.Sprintf("listener's channel %x (%d conns)", id, c.refs))
	}
	for addr, c := range shmChannels.toListener {
		*left = append(*left, fmt.Sprintf("dialer's channel to %v (%d conns)", addr, c.refs))
	}
	shmChannels.Unlock()
	buf := make([]byte, 1<<20)
	for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
		if strings.Contains(g, "verbs/shm.(*Device).watch") {
			*left = append(*left, "goroutine "+strings.SplitN(g, "\n", 2)[0])
		}
	}
}

// noShm makes shm unavailable for the rest of a test (the tests of what
// memif does when auto would otherwise choose shm).
func noShm(t *testing.T) {
	t.Helper()
	old := shmUnavailable
	shmUnavailable = errShmOffForTest
	t.Cleanup(func() { shmUnavailable = old })
}
