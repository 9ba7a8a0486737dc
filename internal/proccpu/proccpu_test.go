package proccpu

import (
	"runtime"
	"testing"
	"time"
)

// TestTimesCountWork: CPU spent spinning shows in Total, and a window
// spent busy on another goroutine is counted by LeastShare.
func TestTimesCountWork(t *testing.T) {
	if runtime.GOOS == "windows" || runtime.GOOS == "plan9" {
		t.Skip("no getrusage on this platform")
	}
	// Spinning must show in Total. On a loaded machine the spinner gets
	// only part of a CPU, so it spins until 20 ms are counted, for at most
	// 5 s of wall time.
	c0 := Total()
	start := time.Now()
	for Total()-c0 < 20*time.Millisecond && time.Since(start) < 5*time.Second {
		for end := time.Now().Add(time.Millisecond); time.Now().Before(end); {
		}
	}
	if used := Total() - c0; used < 20*time.Millisecond {
		t.Fatalf("%v of spinning counted as %v", time.Since(start), used)
	}
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
		}
	}()
	least, shares := LeastShare(2, 50*time.Millisecond)
	close(stop)
	if len(shares) != 2 || least < 0.3 {
		t.Fatalf("a spinning goroutine: least share %.2f of %v", least, shares)
	}
}
