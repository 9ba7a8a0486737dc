//go:build race

package scale

// raceEnabled: the race detector caps a process at 8128 live goroutines.
const raceEnabled = true
