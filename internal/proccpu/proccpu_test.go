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
	c0 := Total()
	for end := time.Now().Add(50 * time.Millisecond); time.Now().Before(end); {
	}
	if used := Total() - c0; used < 20*time.Millisecond {
		t.Fatalf("50 ms of spinning counted as %v", used)
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
