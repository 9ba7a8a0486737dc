//go:build !race

package scale

const raceEnabled = false
