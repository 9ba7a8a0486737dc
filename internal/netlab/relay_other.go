//go:build !linux

package netlab

import "errors"

// Relay is the impairment relay; it runs on Linux only.
type Relay struct{}

var errNoRelay = errors.New("netlab: the relay needs Linux (AF_PACKET)")

// OpenRelay fails: the relay needs Linux.
func OpenRelay(a, b string, imp Impairment) (*Relay, error) { return nil, errNoRelay }

// Run fails: the relay needs Linux.
func (r *Relay) Run() error { return errNoRelay }

// Stop does nothing.
func (r *Relay) Stop() {}

// Report returns no counts.
func (r *Relay) Report() RelayReport { return RelayReport{} }

// Close does nothing.
func (r *Relay) Close() error { return nil }
