// This file decodes the kernel's answer to a route lookup (rtnetlink
// RTM_GETROUTE with RTM_F_FIB_MATCH): the route's outgoing interfaces and
// its mtu attribute. It is platform independent so that it can be fuzzed
// and tested anywhere.

package udp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"syscall"
)

// maxNexthops bounds the outgoing interfaces taken from a multipath route.
const maxNexthops = 16

// fibRoute is what RouteMTU needs of a route: its mtu attribute (0 when it
// has none) and the indexes of its outgoing interfaces.
type fibRoute struct {
	mtu  int
	oifs [maxNexthops]int
	n    int
}

// Numbers of rtnetlink (linux/netlink.h, linux/rtnetlink.h), spelled out
// here so that the decoder builds on every platform.
const (
	nlmsgHdrLen   = 16
	nlmsgError    = 2
	nlmsgDone     = 3
	rtmNewRoute   = 24
	rtmsgLen      = 12
	rtaHdrLen     = 4
	rtaOIF        = 4
	rtaMetrics    = 8
	rtaMultipath  = 9
	rtaxMTU       = 2
	rtnexthopLen  = 8
	nlmsgAlignTo  = 4
	maxNetlinkLen = 1 << 16
)

var errNoRoute = errors.New("udp: the route lookup returned no route")

func align4(n int) int { return (n + nlmsgAlignTo - 1) &^ (nlmsgAlignTo - 1) }

// parseFIBReply decodes the messages in b, the answer to the request with
// sequence number seq: an RTM_NEWROUTE, or an NLMSG_ERROR with the errno.
// It never reads outside b and does not allocate.
func parseFIBReply(b []byte, seq uint32) (fibRoute, error) {
	var r fibRoute
	ne := binary.NativeEndian
	for len(b) >= nlmsgHdrLen {
		n := int(ne.Uint32(b[0:4]))
		typ := ne.Uint16(b[4:6])
		mseq := ne.Uint32(b[8:12])
		if n < nlmsgHdrLen || n > len(b) {
			return r, fmt.Errorf("udp: route lookup: a netlink message of %d bytes in %d", n, len(b))
		}
		body := b[nlmsgHdrLen:n]
		if next := align4(n); next < len(b) {
			b = b[next:]
		} else {
			b = nil
		}
		if mseq != seq {
			continue
		}
		switch typ {
		case nlmsgError:
			if len(body) < 4 {
				return r, errors.New("udp: route lookup: a short netlink error")
			}
			if e := int32(ne.Uint32(body[0:4])); e < 0 {
				return r, fmt.Errorf("udp: route lookup: %w", syscall.Errno(-e))
			}
			return r, errNoRoute // an acknowledgement without a route
		case nlmsgDone:
			return r, errNoRoute
		case rtmNewRoute:
			if len(body) < rtmsgLen {
				return r, errors.New("udp: route lookup: a short route message")
			}
			if err := r.attrs(body[rtmsgLen:]); err != nil {
				return r, err
			}
			if r.n == 0 && r.mtu == 0 {
				return r, errors.New("udp: route lookup: the route names no interface and no MTU")
			}
			return r, nil
		}
	}
	return r, errNoRoute
}

// attrs takes the route attributes in b.
func (r *fibRoute) attrs(b []byte) error {
	ne := binary.NativeEndian
	for len(b) >= rtaHdrLen {
		n := int(ne.Uint16(b[0:2]))
		typ := ne.Uint16(b[2:4]) &^ (1<<15 | 1<<14) // NLA_F_NESTED, NLA_F_NET_BYTEORDER
		if n < rtaHdrLen || n > len(b) {
			return fmt.Errorf("udp: route lookup: an attribute of %d bytes in %d", n, len(b))
		}
		val := b[rtaHdrLen:n]
		switch typ {
		case rtaOIF:
			if len(val) >= 4 {
				r.addOIF(int(int32(ne.Uint32(val))))
			}
		case rtaMetrics:
			if err := r.metrics(val); err != nil {
				return err
			}
		case rtaMultipath:
			if err := r.nexthops(val); err != nil {
				return err
			}
		}
		b = b[min(align4(n), len(b)):]
	}
	return nil
}

// metrics takes RTAX_MTU from the nested attributes in b.
func (r *fibRoute) metrics(b []byte) error {
	ne := binary.NativeEndian
	for len(b) >= rtaHdrLen {
		n := int(ne.Uint16(b[0:2]))
		typ := ne.Uint16(b[2:4]) &^ (1<<15 | 1<<14)
		if n < rtaHdrLen || n > len(b) {
			return fmt.Errorf("udp: route lookup: a metric of %d bytes in %d", n, len(b))
		}
		if val := b[rtaHdrLen:n]; typ == rtaxMTU && len(val) >= 4 {
			r.mtu = int(min(ne.Uint32(val), maxNetlinkLen))
		}
		b = b[min(align4(n), len(b)):]
	}
	return nil
}

// nexthops takes the interface of each struct rtnexthop in b.
func (r *fibRoute) nexthops(b []byte) error {
	ne := binary.NativeEndian
	for len(b) >= rtnexthopLen {
		n := int(ne.Uint16(b[0:2]))
		if n < rtnexthopLen || n > len(b) {
			return fmt.Errorf("udp: route lookup: a next hop of %d bytes in %d", n, len(b))
		}
		r.addOIF(int(int32(ne.Uint32(b[4:8]))))
		b = b[min(align4(n), len(b)):]
	}
	return nil
}

func (r *fibRoute) addOIF(i int) {
	if i > 0 && r.n < len(r.oifs) {
		r.oifs[r.n] = i
		r.n++
	}
}
