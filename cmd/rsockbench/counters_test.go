package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/rsock-go/rsock/verbs"
)

// TestCountersFlag checks that -counters prints the device counters as
// one JSON line on stderr, also when the run fails.
func TestCountersFlag(t *testing.T) {
	var out, errb bytes.Buffer
	// Port 1 of loopback refuses the connection: the client fails at once.
	code := run([]string{"client", "-counters", "-addr", "127.0.0.1:1", "-timeout", "5s"}, &out, &errb)
	if code != exitFail {
		t.Errorf("exit %d, want %d; stderr %q", code, exitFail, errb.String())
	}
	var found bool
	for line := range strings.Lines(errb.String()) {
		rest, ok := strings.CutPrefix(line, countersPrefix)
		if !ok {
			continue
		}
		found = true
		var c verbs.Counters
		if err := json.Unmarshal([]byte(rest), &c); err != nil {
			t.Errorf("counters line %q: %v", line, err)
		}
	}
	if !found {
		t.Errorf("no %q line in stderr %q", countersPrefix, errb.String())
	}
}
