package verbs

import (
	"errors"
	"fmt"
)

// Errors returned by providers. They match with errors.Is.
var (
	// ErrClosed: the object or its device was closed.
	ErrClosed = errors.New("verbs: closed")
	// ErrInvalidArgument: an argument is out of range (errno EINVAL).
	ErrInvalidArgument = errors.New("verbs: invalid argument")
	// ErrQueueFull: the work queue has no free slot (errno ENOMEM).
	ErrQueueFull = errors.New("verbs: work queue full")
	// ErrInvalidState: the QP's state does not allow the call.
	ErrInvalidState = errors.New("verbs: invalid QP state")
	// ErrNoDevice: no device of the requested kind exists.
	ErrNoDevice = errors.New("verbs: no such device")
	// ErrCQOverrun: completions were lost because the CQ was full.
	ErrCQOverrun = errors.New("verbs: completion queue overrun")
	// ErrBusy: the object is still in use (an MR or CQ referenced by a QP).
	ErrBusy = errors.New("verbs: resource busy")
)

// TransitionError reports a QP state change that is not allowed, or one
// given the wrong attributes.
type TransitionError struct {
	From, To QPState
	Missing  QPAttrMask
	Extra    QPAttrMask
}

func (e *TransitionError) Error() string {
	switch {
	case e.Missing != 0:
		return fmt.Sprintf("verbs: QP %v→%v needs attributes %#x", e.From, e.To, uint32(e.Missing))
	case e.Extra != 0:
		return fmt.Sprintf("verbs: QP %v→%v does not take attributes %#x", e.From, e.To, uint32(e.Extra))
	}
	return fmt.Sprintf("verbs: QP %v→%v is not a valid transition", e.From, e.To)
}

// Is makes a TransitionError match ErrInvalidState.
func (e *TransitionError) Is(target error) bool { return target == ErrInvalidState }
