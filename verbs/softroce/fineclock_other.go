//go:build !linux

package softroce

// fineClock is Linux's (a timerfd); elsewhere QPs use their runtime
// timers alone.
type fineClock struct{}

const fineHorizon = 0

func newFineClock() *fineClock { return nil }

func (c *fineClock) schedule(q *QP, at int64) {}

func (c *fineClock) close() {}
