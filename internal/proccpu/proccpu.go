// Package proccpu measures the CPU time of the whole process: for the
// benchmarks' CPU seconds per GB, and for the tests that check what an
// idle link or connection costs.
package proccpu

import "time"

// Total returns the process's user and system CPU time so far together.
func Total() time.Duration {
	u, s := Times()
	return u + s
}

// LeastShare sleeps through n windows of length each and returns the
// least share of one core the process used in any of them (0.01 is 1%),
// and the share of every window. The process's CPU time also counts the
// runtime's own work (the garbage collector, the race detector, what
// earlier tests left winding down), which a loaded machine can bunch into
// one window: the least window is the cost of what stays running.
func LeastShare(n int, each time.Duration) (least float64, shares []float64) {
	least = 1
	for range n {
		c0, w0 := Total(), time.Now()
		time.Sleep(each)
		s := float64(Total()-c0) / float64(time.Since(w0))
		shares = append(shares, s)
		least = min(least, s)
	}
	return least, shares
}
