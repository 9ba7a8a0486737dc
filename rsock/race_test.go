//go:build race

package rsock

// raceEnabled: the race detector keeps shadow memory of its own, which
// memory measurements must not count.
const raceEnabled = true
