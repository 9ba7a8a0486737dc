package netlab

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// Event is one line of output of the netlab program (cmd/netlab): a JSON
// object whose "event" field says what it is.
type Event struct {
	// Event is EventListening, EventProgress, EventResult, EventReady or
	// EventRelay.
	Event string `json:"event"`
	// Addr is the address a listener listens on (EventListening).
	Addr string `json:"addr,omitempty"`
	// Received is how many bytes have been received (EventProgress).
	Received int64 `json:"received,omitempty"`
	// Result is an exchange's outcome (EventResult).
	Result *ExchangeResult `json:"result,omitempty"`
	// Relay is a relay's counts as it ends (EventRelay).
	Relay *RelayReport `json:"relay,omitempty"`
}

// The kinds of Event.
const (
	EventListening = "listening" // an exchange listener is ready for its dialer
	EventProgress  = "progress"  // an exchange side received another ProgressEvery bytes
	EventResult    = "result"    // an exchange side ended
	EventReady     = "ready"     // a relay is relaying
	EventRelay     = "relay"     // a relay stopped, with its counts
)

// WaitEvent reads p's output until an event for which match is true,
// skipping the others. It fails when the output ends first (quoting the
// process's standard error) or after timeout.
func WaitEvent(p *Proc, timeout time.Duration, match func(*Event) bool) (*Event, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		select {
		case line, ok := <-p.Lines():
			if !ok {
				<-p.Done()
				return nil, fmt.Errorf("%v ended (%v) before the awaited event; stderr: %s", p, p.Err(), strings.TrimSpace(p.Stderr()))
			}
			var ev Event
			if err := json.Unmarshal([]byte(line), &ev); err != nil {
				return nil, fmt.Errorf("%v: output line %q is not an event: %v", p, line, err)
			}
			if match(&ev) {
				return &ev, nil
			}
		case <-t.C:
			return nil, fmt.Errorf("%v: no awaited event within %v; stderr: %s", p, timeout, strings.TrimSpace(p.Stderr()))
		}
	}
}

// IsEvent matches events of one kind, for WaitEvent.
func IsEvent(kind string) func(*Event) bool {
	return func(ev *Event) bool { return ev.Event == kind }
}
