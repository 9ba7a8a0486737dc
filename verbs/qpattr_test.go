package verbs

import "testing"

// TestQPAttrApply: each mask bit copies its own field and no other; a
// zero mask copies nothing, State and Cap never.
func TestQPAttrApply(t *testing.T) {
	src := QPAttr{
		State: QPSRTS, AccessFlags: AccessRemoteWrite, PKeyIndex: 3, Port: 1,
		AH: AH{DPort: 4791}, PathMTU: MTU1024, Timeout: 14, RetryCnt: 7, RNRRetry: 6,
		RQPSN: 11, MaxRdAtomic: 4, MinRNRTimer: 12, SQPSN: 13, MaxDestRdAtomic: 5,
		DestQPN: 0x123, Cap: QPCap{MaxSendWR: 9},
	}
	fields := map[QPAttrMask]func(a *QPAttr) bool{
		AttrAccessFlags:     func(a *QPAttr) bool { return a.AccessFlags == src.AccessFlags },
		AttrPKeyIndex:       func(a *QPAttr) bool { return a.PKeyIndex == src.PKeyIndex },
		AttrPort:            func(a *QPAttr) bool { return a.Port == src.Port },
		AttrAV:              func(a *QPAttr) bool { return a.AH == src.AH },
		AttrPathMTU:         func(a *QPAttr) bool { return a.PathMTU == src.PathMTU },
		AttrTimeout:         func(a *QPAttr) bool { return a.Timeout == src.Timeout },
		AttrRetryCnt:        func(a *QPAttr) bool { return a.RetryCnt == src.RetryCnt },
		AttrRNRRetry:        func(a *QPAttr) bool { return a.RNRRetry == src.RNRRetry },
		AttrRQPSN:           func(a *QPAttr) bool { return a.RQPSN == src.RQPSN },
		AttrMaxQPRdAtomic:   func(a *QPAttr) bool { return a.MaxRdAtomic == src.MaxRdAtomic },
		AttrMinRNRTimer:     func(a *QPAttr) bool { return a.MinRNRTimer == src.MinRNRTimer },
		AttrSQPSN:           func(a *QPAttr) bool { return a.SQPSN == src.SQPSN },
		AttrMaxDestRdAtomic: func(a *QPAttr) bool { return a.MaxDestRdAtomic == src.MaxDestRdAtomic },
		AttrDestQPN:         func(a *QPAttr) bool { return a.DestQPN == src.DestQPN },
	}
	for bit, copied := range fields {
		var a QPAttr
		a.Apply(&src, bit|AttrState|AttrCap)
		if !copied(&a) {
			t.Errorf("mask %#x: field not copied", uint32(bit))
		}
		if a.State != 0 || a.Cap != (QPCap{}) {
			t.Errorf("mask %#x: State or Cap copied", uint32(bit))
		}
		for other, c := range fields {
			if other != bit && c(&a) {
				t.Errorf("mask %#x also copied the field of %#x", uint32(bit), uint32(other))
			}
		}
	}
	var a QPAttr
	a.Apply(&src, 0)
	if a != (QPAttr{}) {
		t.Errorf("an empty mask copied %+v", a)
	}
}
