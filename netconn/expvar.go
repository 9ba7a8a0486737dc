package netconn

import "expvar"

// ExpvarName is the name under which the process-wide Snapshot is
// published through expvar (and so on /debug/vars).
const ExpvarName = "rsock"

// The snapshot is published once, when the package initialises, unless
// something already published the name (expvar.Publish panics on a
// duplicate).
func init() {
	if expvar.Get(ExpvarName) == nil {
		expvar.Publish(ExpvarName, expvar.Func(func() any { return Snapshot() }))
	}
}
