package softroce

import (
	"testing"

	"github.com/rsock-go/rsock/verbs"
)

func TestMTUForIP(t *testing.T) {
	for _, tc := range []struct {
		ip   int
		v6   bool
		want verbs.MTU
	}{
		// IPv4 adds 64 bytes to the payload (20 IP, 8 UDP, 12 BTH, 16
		// RETH, 4 ImmDt, 4 ICRC), IPv6 84.
		{1500, false, verbs.MTU1024}, {1500, true, verbs.MTU1024}, {9000, false, verbs.MTU4096},
		{65536, false, verbs.MTU4096}, {1280, true, verbs.MTU1024}, {1088, false, verbs.MTU1024},
		{1087, false, verbs.MTU512}, {1108, true, verbs.MTU1024}, {1107, true, verbs.MTU512},
		{4096 + 64, false, verbs.MTU4096}, {4096 + 63, false, verbs.MTU2048}, {320, false, verbs.MTU256},
	} {
		got, err := MTUForIP(tc.ip, tc.v6)
		if err != nil || got != tc.want {
			t.Errorf("MTUForIP(%d, v6 %v) = %v, %v; want %v", tc.ip, tc.v6, got, err, tc.want)
		}
	}
	if _, err := MTUForIP(319, false); err == nil {
		t.Error("MTUForIP(319) found room for 256 bytes of payload")
	}
}
