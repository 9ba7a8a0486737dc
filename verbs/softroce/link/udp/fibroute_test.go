package udp

import (
	"encoding/binary"
	"errors"
	"syscall"
	"testing"
)

// nlMsg builds a netlink message of type typ and sequence seq around body.
func nlMsg(typ uint16, seq uint32, body []byte) []byte {
	ne := binary.NativeEndian
	b := make([]byte, nlmsgHdrLen, nlmsgHdrLen+len(body)+3)
	ne.PutUint32(b[0:], uint32(nlmsgHdrLen+len(body)))
	ne.PutUint16(b[4:], typ)
	ne.PutUint32(b[8:], seq)
	b = append(b, body...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

func rta(typ uint16, val []byte) []byte {
	ne := binary.NativeEndian
	b := make([]byte, rtaHdrLen, rtaHdrLen+len(val)+3)
	ne.PutUint16(b[0:], uint16(rtaHdrLen+len(val)))
	ne.PutUint16(b[2:], typ)
	b = append(b, val...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

func u32(v uint32) []byte { return binary.NativeEndian.AppendUint32(nil, v) }

func routeMsg(attrs ...[]byte) []byte {
	body := make([]byte, rtmsgLen)
	for _, a := range attrs {
		body = append(body, a...)
	}
	return body
}

func TestParseFIBReply(t *testing.T) {
	nh := func(ifindex uint32) []byte {
		b := make([]byte, rtnexthopLen)
		binary.NativeEndian.PutUint16(b[0:], rtnexthopLen)
		binary.NativeEndian.PutUint32(b[4:], ifindex)
		return b
	}
	errMsg := make([]byte, 4+nlmsgHdrLen)
	e := -int32(syscall.ENETUNREACH)
	binary.NativeEndian.PutUint32(errMsg, uint32(e))
	for _, c := range []struct {
		name    string
		b       []byte
		mtu     int
		oifs    []int
		wantErr error
	}{
		{"oif", nlMsg(rtmNewRoute, 7, routeMsg(rta(1, []byte{10, 0, 0, 1}), rta(rtaOIF, u32(3)))), 0, []int{3}, nil},
		{"oif and mtu", nlMsg(rtmNewRoute, 7, routeMsg(rta(rtaOIF, u32(2)), rta(rtaMetrics|1<<15, rta(rtaxMTU, u32(1400))))), 1400, []int{2}, nil},
		{"multipath", nlMsg(rtmNewRoute, 7, routeMsg(rta(rtaMultipath, append(nh(4), nh(5)...)))), 0, []int{4, 5}, nil},
		{"other seq first", append(nlMsg(rtmNewRoute, 6, routeMsg(rta(rtaOIF, u32(9)))), nlMsg(rtmNewRoute, 7, routeMsg(rta(rtaOIF, u32(3))))...), 0, []int{3}, nil},
		{"errno", nlMsg(nlmsgError, 7, errMsg), 0, nil, syscall.ENETUNREACH},
		{"no interface", nlMsg(rtmNewRoute, 7, routeMsg()), 0, nil, errors.New("")},
		{"short attribute", nlMsg(rtmNewRoute, 7, routeMsg([]byte{40, 0, rtaOIF, 0, 1, 0, 0, 0})), 0, nil, errors.New("")},
		{"truncated", nlMsg(rtmNewRoute, 7, routeMsg(rta(rtaOIF, u32(3))))[:20], 0, nil, errors.New("")},
		{"empty", nil, 0, nil, errNoRoute},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, err := parseFIBReply(c.b, 7)
			if c.wantErr != nil {
				if err == nil {
					t.Fatalf("got %+v, want an error", r)
				}
				if errors.Is(c.wantErr, syscall.ENETUNREACH) && !errors.Is(err, syscall.ENETUNREACH) {
					t.Fatalf("error %v does not wrap %v", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if r.mtu != c.mtu || r.n != len(c.oifs) {
				t.Fatalf("got mtu %d, %d interfaces; want %d, %v", r.mtu, r.n, c.mtu, c.oifs)
			}
			for i, o := range c.oifs {
				if r.oifs[i] != o {
					t.Fatalf("interface %d is %d, want %d", i, r.oifs[i], o)
				}
			}
		})
	}
}

func FuzzParseFIBReply(f *testing.F) {
	f.Add(nlMsg(rtmNewRoute, 7, routeMsg(rta(rtaOIF, u32(2)), rta(rtaMetrics, rta(rtaxMTU, u32(1400))))))
	f.Add(nlMsg(rtmNewRoute, 7, routeMsg(rta(rtaMultipath, []byte{8, 0, 0, 0, 4, 0, 0, 0}))))
	f.Add(nlMsg(nlmsgError, 7, make([]byte, 20)))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := parseFIBReply(b, 7)
		if err == nil && r.n == 0 && r.mtu == 0 {
			t.Fatal("a route without interface or MTU was accepted")
		}
		if r.n > maxNexthops {
			t.Fatalf("%d interfaces", r.n)
		}
	})
}
