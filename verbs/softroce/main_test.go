package softroce

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// holdEnv, if set by a build-tagged file, acquires what the whole test
// binary shares (the DPDK environment) and returns its release.
var holdEnv func() (release func())

func TestMain(m *testing.M) {
	if holdEnv != nil {
		release := holdEnv()
		code := m.Run()
		release()
		if err := goleak.Find(); err != nil {
			println(err.Error())
			code = 1
		}
		os.Exit(code)
	}
	goleak.VerifyTestMain(m)
}
