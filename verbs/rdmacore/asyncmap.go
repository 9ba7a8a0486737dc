//go:build rdmacore

package rdmacore

// #include <infiniband/verbs.h>
import "C"

// asyncAction is what an async event of the device does to the objects
// it names.
type asyncAction uint8

const (
	// actNote: informational (communication established, port active,
	// GID change, ...): logged, nothing fails.
	actNote asyncAction = iota
	// actFailQP: the event's QP is in error (fatal, request or access
	// error); its connection is lost.
	actFailQP
	// actFailCQ: the event's CQ overran and lost completions; the QPs
	// that use it cannot be trusted either.
	actFailCQ
	// actFailPort: the port went down; every QP on it lost its path.
	actFailPort
	// actFailDevice: the device is dead; every QP fails.
	actFailDevice
)

// The libibverbs event types the mapping tells apart (enum
// ibv_event_type).
const (
	evCQErr       = int(C.IBV_EVENT_CQ_ERR)
	evQPFatal     = int(C.IBV_EVENT_QP_FATAL)
	evQPReqErr    = int(C.IBV_EVENT_QP_REQ_ERR)
	evQPAccessErr = int(C.IBV_EVENT_QP_ACCESS_ERR)
	evCommEst     = int(C.IBV_EVENT_COMM_EST)
	evDeviceFatal = int(C.IBV_EVENT_DEVICE_FATAL)
	evPortActive  = int(C.IBV_EVENT_PORT_ACTIVE)
	evPortErr     = int(C.IBV_EVENT_PORT_ERR)
	evLastWQE     = int(C.IBV_EVENT_QP_LAST_WQE_REACHED)
	evGIDChange   = int(C.IBV_EVENT_GID_CHANGE)
)

// asyncActionOf maps an event type to its action.
func asyncActionOf(kind int) asyncAction {
	switch kind {
	case evQPFatal, evQPReqErr, evQPAccessErr:
		return actFailQP
	case evCQErr:
		return actFailCQ
	case evPortErr:
		return actFailPort
	case evDeviceFatal:
		return actFailDevice
	}
	return actNote
}

// eventName is libibverbs' name of an event type, e.g. "port error".
func eventName(kind int) string {
	return C.GoString(C.ibv_event_type_str(C.enum_ibv_event_type(kind)))
}
