//go:build dpdk

package rte

/*
#cgo pkg-config: libdpdk
#cgo LDFLAGS: -lrte_net_ring -lrte_bus_vdev -lrte_mempool_stack
#cgo noescape rs_rx
#cgo nocallback rs_rx
#cgo noescape rs_tx
#cgo nocallback rs_tx
#cgo noescape rs_alloc
#cgo nocallback rs_alloc
#cgo noescape rs_free
#cgo nocallback rs_free

#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sched.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>
#include <rte_ring.h>
#include <rte_eth_ring.h>
#include <rte_bus_vdev.h>

// rs_eal_init runs rte_eal_init and restores the calling thread's CPU
// affinity afterwards: EAL pins its main thread to the main lcore, and
// the Go runtime would pass that on to every thread it starts from it.
static int rs_eal_init(int argc, char **argv) {
	cpu_set_t set;
	int saved = pthread_getaffinity_np(pthread_self(), sizeof(set), &set) == 0;
	int ret = rte_eal_init(argc, argv);
	if (saved)
		pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
	return ret < 0 ? -rte_errno : ret;
}

static int rs_errno(void) { return rte_errno; }

static const char *rs_pool_ops(struct rte_mempool *mp) { return rte_mempool_get_ops(mp->ops_index)->name; }

// rs_configure configures one rx and one tx queue of nrxd and ntxd
// descriptors (adjusted to the driver's limits), with rx interrupts if
// intr, and starts the port.
static int rs_setup(uint16_t port, int intr, uint16_t mtu, uint16_t nrxd, uint16_t ntxd, struct rte_mempool *mp) {
	struct rte_eth_conf conf;
	memset(&conf, 0, sizeof(conf));
	conf.intr_conf.rxq = intr ? 1 : 0;
	conf.rxmode.mtu = mtu;
	int ret = rte_eth_dev_configure(port, 1, 1, &conf);
	if (ret < 0)
		return ret;
	ret = rte_eth_dev_adjust_nb_rx_tx_desc(port, &nrxd, &ntxd);
	if (ret < 0)
		return ret;
	int socket = rte_eth_dev_socket_id(port);
	if (socket < 0)
		socket = SOCKET_ID_ANY;
	ret = rte_eth_rx_queue_setup(port, 0, nrxd, socket, NULL, mp);
	if (ret < 0)
		return ret;
	ret = rte_eth_tx_queue_setup(port, 0, ntxd, socket, NULL);
	if (ret < 0)
		return ret;
	return rte_eth_dev_start(port);
}

// rs_rx frees the previous burst's mbufs (free of them) and receives up
// to n into m, with each one's data address and length; a chained mbuf
// gets length 0 (the caller drops it).
static uint16_t rs_rx(uint16_t port, uintptr_t *m, uint16_t nfree, uintptr_t *addr, uint16_t *len, uint16_t n) {
	if (nfree > 0)
		rte_pktmbuf_free_bulk((struct rte_mbuf **)m, nfree);
	uint16_t got = rte_eth_rx_burst(port, 0, (struct rte_mbuf **)m, n);
	for (uint16_t i = 0; i < got; i++) {
		struct rte_mbuf *b = (struct rte_mbuf *)m[i];
		addr[i] = (uintptr_t)rte_pktmbuf_mtod(b, void *);
		len[i] = b->nb_segs == 1 ? b->data_len : 0;
	}
	return got;
}

// rs_alloc allocates mbufs from mp into m[from:to], with each one's data
// address and room; it returns 0 or a negative errno (and allocates
// none).
static int rs_alloc(struct rte_mempool *mp, uintptr_t *m, uintptr_t *addr, uint16_t *room, uint16_t from, uint16_t to) {
	if (to <= from)
		return 0;
	int ret = rte_pktmbuf_alloc_bulk(mp, (struct rte_mbuf **)(m + from), to - from);
	if (ret != 0)
		return ret;
	for (uint16_t i = from; i < to; i++) {
		struct rte_mbuf *b = (struct rte_mbuf *)m[i];
		addr[i] = (uintptr_t)rte_pktmbuf_mtod(b, void *);
		room[i] = rte_pktmbuf_tailroom(b);
	}
	return 0;
}

// rs_tx sets the lengths of n filled mbufs and hands them to the driver;
// it returns how many it took (the caller retries or frees the rest).
// If mp is not NULL it then tops the spare mbufs sm[0:*sn] up to want,
// so that a sender needs one call per burst.
static uint16_t rs_tx(uint16_t port, uintptr_t *m, uint16_t *len, uint16_t n,
		struct rte_mempool *mp, uintptr_t *sm, uintptr_t *saddr, uint16_t *sroom, uint16_t *sn, uint16_t want) {
	for (uint16_t i = 0; i < n; i++) {
		struct rte_mbuf *b = (struct rte_mbuf *)m[i];
		b->data_len = len[i];
		b->pkt_len = len[i];
	}
	uint16_t sent = rte_eth_tx_burst(port, 0, (struct rte_mbuf **)m, n);
	if (mp != NULL && rs_alloc(mp, sm, saddr, sroom, *sn, want) == 0 && want > *sn)
		*sn = want;
	return sent;
}

static void rs_free(uintptr_t *m, uint16_t n) {
	rte_pktmbuf_free_bulk((struct rte_mbuf **)m, n);
}

static int rs_mac(uint16_t port, uint8_t *mac) {
	struct rte_ether_addr a;
	int ret = rte_eth_macaddr_get(port, &a);
	if (ret == 0)
		memcpy(mac, a.addr_bytes, 6);
	return ret;
}

static int rs_set_mac(uint16_t port, uint8_t *mac) {
	struct rte_ether_addr a;
	memcpy(a.addr_bytes, mac, 6);
	return rte_eth_dev_default_mac_addr_set(port, &a);
}

static int rs_link_up(uint16_t port) {
	struct rte_eth_link l;
	memset(&l, 0, sizeof(l));
	int ret = rte_eth_link_get_nowait(port, &l);
	if (ret < 0)
		return ret;
	return l.link_status == RTE_ETH_LINK_UP;
}

static int rs_driver(uint16_t port, char *buf, size_t n) {
	struct rte_eth_dev_info info;
	int ret = rte_eth_dev_info_get(port, &info);
	if (ret < 0)
		return ret;
	snprintf(buf, n, "%s", info.driver_name ? info.driver_name : "");
	return 0;
}

// rs_ring_pair makes two ports joined back to back by two rings.
static int rs_ring_pair(const char *a, const char *b, unsigned size, uint16_t *pa, uint16_t *pb, uintptr_t *ra, uintptr_t *rb) {
	char name[RTE_RING_NAMESIZE];
	snprintf(name, sizeof(name), "%s_r", a);
	struct rte_ring *r1 = rte_ring_create(name, size, SOCKET_ID_ANY, RING_F_SP_ENQ | RING_F_SC_DEQ);
	if (r1 == NULL)
		return -rte_errno;
	snprintf(name, sizeof(name), "%s_r", b);
	struct rte_ring *r2 = rte_ring_create(name, size, SOCKET_ID_ANY, RING_F_SP_ENQ | RING_F_SC_DEQ);
	if (r2 == NULL) {
		int e = rte_errno;
		rte_ring_free(r1);
		return -e;
	}
	// a receives on r1 and sends on r2; b the other way round.
	int p1 = rte_eth_from_rings(a, &r1, 1, &r2, 1, SOCKET_ID_ANY);
	if (p1 < 0) {
		int e = rte_errno;
		rte_ring_free(r1);
		rte_ring_free(r2);
		return -e;
	}
	int p2 = rte_eth_from_rings(b, &r2, 1, &r1, 1, SOCKET_ID_ANY);
	if (p2 < 0) {
		int e = rte_errno;
		rte_eth_dev_close(p1);
		rte_ring_free(r1);
		rte_ring_free(r2);
		return -e;
	}
	*pa = p1;
	*pb = p2;
	*ra = (uintptr_t)r1;
	*rb = (uintptr_t)r2;
	return 0;
}

static void rs_ring_free(uintptr_t r) { rte_ring_free((struct rte_ring *)r); }
*/
import "C"

import (
	"errors"
	"sync"
	"syscall"
	"unsafe"
)

// Burst is the most packets one burst call moves.
const Burst = 64

// Error is a DPDK failure: the call and the errno it returned.
type Error struct {
	Op    string
	Errno syscall.Errno
}

func (e *Error) Error() string { return "dpdk: " + e.Op + ": " + e.Errno.Error() }

// Unwrap returns the errno.
func (e *Error) Unwrap() error { return e.Errno }

// errOf turns a negative return into an *Error.
func errOf(op string, ret C.int) error {
	if ret >= 0 {
		return nil
	}
	return &Error{Op: op, Errno: syscall.Errno(-ret)}
}

var eal struct {
	sync.Mutex
	done bool
	err  error
}

// Init initialises the EAL with args (without the program name), once per
// process: DPDK cannot initialise it again, even after Cleanup, so a
// second call returns the first one's result.
func Init(args []string) error {
	eal.Lock()
	defer eal.Unlock()
	if eal.done {
		return eal.err
	}
	eal.done = true
	argv := make([]*C.char, 0, len(args)+2)
	argv = append(argv, C.CString("rsock"))
	for _, a := range args {
		argv = append(argv, C.CString(a))
	}
	n := len(argv)
	argv = append(argv, nil)
	// rte_eal_init keeps pointers into argv: the strings stay allocated.
	cargv := (**C.char)(C.malloc(C.size_t(len(argv)) * C.size_t(unsafe.Sizeof(argv[0]))))
	copy(unsafe.Slice(cargv, len(argv)), argv)
	if ret := C.rs_eal_init(C.int(n), cargv); ret < 0 {
		eal.err = errOf("rte_eal_init", ret)
	}
	return eal.err
}

// Cleanup releases the EAL's resources (rte_eal_cleanup).
func Cleanup() error {
	return errOf("rte_eal_cleanup", C.rte_eal_cleanup())
}

// RuntimeDir returns the EAL's runtime directory (under /var/run/dpdk).
func RuntimeDir() string { return C.GoString(C.rte_eal_get_runtime_dir()) }

// ProbeVdev creates a virtual device from a devargs string such as
// "net_memif0,role=server" and returns its name.
func ProbeVdev(devargs string) (string, error) {
	name, args, _ := cutComma(devargs)
	cn, ca := C.CString(name), C.CString(args)
	defer C.free(unsafe.Pointer(cn))
	defer C.free(unsafe.Pointer(ca))
	if err := errOf("rte_vdev_init "+name, C.rte_vdev_init(cn, ca)); err != nil {
		return "", err
	}
	return name, nil
}

// RemoveVdev removes a virtual device made by ProbeVdev.
func RemoveVdev(name string) error {
	cn := C.CString(name)
	defer C.free(unsafe.Pointer(cn))
	return errOf("rte_vdev_uninit "+name, C.rte_vdev_uninit(cn))
}

func cutComma(s string) (string, string, bool) {
	for i := range len(s) {
		if s[i] == ',' {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}

// PortByName returns the port id of a device name.
func PortByName(name string) (uint16, error) {
	cn := C.CString(name)
	defer C.free(unsafe.Pointer(cn))
	var id C.uint16_t
	if err := errOf("rte_eth_dev_get_port_by_name "+name, C.rte_eth_dev_get_port_by_name(cn, &id)); err != nil {
		return 0, err
	}
	return uint16(id), nil
}

// Ports returns the ids of the available ports.
func Ports() []uint16 {
	var ids []uint16
	for p := C.rte_eth_find_next(0); p < C.RTE_MAX_ETHPORTS; p = C.rte_eth_find_next(p + 1) {
		ids = append(ids, uint16(p))
	}
	return ids
}

// PortName returns a port's device name.
func PortName(port uint16) string {
	var buf [C.RTE_ETH_NAME_MAX_LEN]C.char
	if C.rte_eth_dev_get_name_by_port(C.uint16_t(port), &buf[0]) != 0 {
		return ""
	}
	return C.GoString(&buf[0])
}

// Pool is an mbuf pool.
type Pool struct{ p *C.struct_rte_mempool }

// NewPool creates a pool of n mbufs with dataRoom bytes of data room each
// (after the headroom).
//
// The pool is a stack (DPDK's "stack" mempool driver, linked in), not
// DPDK's default ring. The links call DPDK from Go threads, which are not
// EAL lcores and so get no per-lcore mempool cache: a ring pool then
// hands its mbufs out first in, first out, and a sender or a PMD filling
// them cycles through the whole pool (tens of MB), with a cache miss on
// every line it writes. A stack hands back the mbufs freed last, which
// are still in the cache.
func NewPool(name string, n int, dataRoom int) (*Pool, error) {
	cn := C.CString(name)
	defer C.free(unsafe.Pointer(cn))
	room := C.uint16_t(dataRoom + C.RTE_PKTMBUF_HEADROOM)
	cops := C.CString("stack")
	defer C.free(unsafe.Pointer(cops))
	p := C.rte_pktmbuf_pool_create_by_ops(cn, C.uint(n), 0, 0, room, C.SOCKET_ID_ANY, cops)
	if p == nil {
		return nil, &Error{Op: "rte_pktmbuf_pool_create_by_ops(stack)", Errno: syscall.Errno(C.rs_errno())}
	}
	return &Pool{p}, nil
}

// Ops returns the name of the pool's mempool driver, e.g. "stack".
func (p *Pool) Ops() string { return C.GoString(C.rs_pool_ops(p.p)) }

// Free releases the pool; its mbufs must all have been returned.
func (p *Pool) Free() { C.rte_mempool_free(p.p) }

// Setup configures a port with one rx and one tx queue and starts it;
// mtu 0 means 1500.
func Setup(port uint16, rxIntr bool, mtu, nrxd, ntxd int, pool *Pool) error {
	intr := C.int(0)
	if rxIntr {
		intr = 1
	}
	return errOf("port setup", C.rs_setup(C.uint16_t(port), intr, C.uint16_t(mtu), C.uint16_t(nrxd), C.uint16_t(ntxd), pool.p))
}

// Stop stops a port.
func Stop(port uint16) error { return errOf("rte_eth_dev_stop", C.rte_eth_dev_stop(C.uint16_t(port))) }

// Close closes a port.
func Close(port uint16) error {
	return errOf("rte_eth_dev_close", C.rte_eth_dev_close(C.uint16_t(port)))
}

// MAC returns a port's Ethernet address.
func MAC(port uint16) ([6]byte, error) {
	var m [6]byte
	err := errOf("rte_eth_macaddr_get", C.rs_mac(C.uint16_t(port), (*C.uint8_t)(&m[0])))
	return m, err
}

// SetMAC sets a port's Ethernet address.
func SetMAC(port uint16, mac [6]byte) error {
	return errOf("rte_eth_dev_default_mac_addr_set", C.rs_set_mac(C.uint16_t(port), (*C.uint8_t)(&mac[0])))
}

// MTU returns a port's MTU.
func MTU(port uint16) (int, error) {
	var m C.uint16_t
	err := errOf("rte_eth_dev_get_mtu", C.rte_eth_dev_get_mtu(C.uint16_t(port), &m))
	return int(m), err
}

// SetMTU sets a port's MTU.
func SetMTU(port uint16, mtu int) error {
	return errOf("rte_eth_dev_set_mtu", C.rte_eth_dev_set_mtu(C.uint16_t(port), C.uint16_t(mtu)))
}

// LinkUp reports whether a port's link is up.
func LinkUp(port uint16) (bool, error) {
	r := C.rs_link_up(C.uint16_t(port))
	return r == 1, errOf("rte_eth_link_get_nowait", r)
}

// Driver returns the name of a port's driver, e.g. "net_memif".
func Driver(port uint16) (string, error) {
	var buf [64]C.char
	if err := errOf("rte_eth_dev_info_get", C.rs_driver(C.uint16_t(port), &buf[0], C.size_t(len(buf)))); err != nil {
		return "", err
	}
	return C.GoString(&buf[0]), nil
}

// Promiscuous turns promiscuous mode on.
func Promiscuous(port uint16) error {
	return errOf("rte_eth_promiscuous_enable", C.rte_eth_promiscuous_enable(C.uint16_t(port)))
}

// RxIntrEnable arms the rx queue's interrupt; RxIntrDisable disarms it.
func RxIntrEnable(port uint16) error {
	return errOf("rte_eth_dev_rx_intr_enable", C.rte_eth_dev_rx_intr_enable(C.uint16_t(port), 0))
}

// RxIntrDisable disarms the rx queue's interrupt.
func RxIntrDisable(port uint16) error {
	return errOf("rte_eth_dev_rx_intr_disable", C.rte_eth_dev_rx_intr_disable(C.uint16_t(port), 0))
}

// RxIntrFD returns the file descriptor the rx queue's interrupt signals
// (owned by DPDK).
func RxIntrFD(port uint16) (int, error) {
	fd := C.rte_eth_dev_rx_intr_ctl_q_get_fd(C.uint16_t(port), 0)
	if fd < 0 {
		return -1, errOf("rte_eth_dev_rx_intr_ctl_q_get_fd", C.int(-C.rs_errno()))
	}
	return int(fd), nil
}

// Mbufs is a burst of mbufs with their data addresses and lengths (or
// room, for allocated ones). It holds no Go pointers, so cgo calls may
// take its arrays.
type Mbufs struct {
	M    [Burst]uintptr
	Addr [Burst]*byte // DPDK memory, outside the Go heap
	Len  [Burst]uint16
	N    int
}

// Data returns mbuf i's data: its length bytes (Len[i]) from Addr[i],
// with capacity c.
func (b *Mbufs) Data(i, c int) []byte {
	return unsafe.Slice(b.Addr[i], c)[:b.Len[i]]
}

// Rx frees the mbufs of the previous burst in b and receives a new one
// from port's queue 0, up to max mbufs (at most Burst).
func Rx(port uint16, b *Mbufs, max int) int {
	n := C.rs_rx(C.uint16_t(port), (*C.uintptr_t)(unsafe.Pointer(&b.M[0])), C.uint16_t(b.N),
		(*C.uintptr_t)(unsafe.Pointer(&b.Addr[0])), (*C.uint16_t)(unsafe.Pointer(&b.Len[0])), C.uint16_t(max))
	b.N = int(n)
	return b.N
}

// ReleaseRx frees the mbufs of the last burst received into b.
func ReleaseRx(b *Mbufs) {
	if b.N > 0 {
		C.rs_free((*C.uintptr_t)(unsafe.Pointer(&b.M[0])), C.uint16_t(b.N))
		b.N = 0
	}
}

// ErrNoMbufs reports an empty pool.
var ErrNoMbufs = errors.New("dpdk: no free mbufs")

// Alloc tops b up to n mbufs from pool (at most Burst; Len holds each new
// one's room), allocating all or none.
func (p *Pool) Alloc(b *Mbufs, n int) error {
	if n > Burst {
		return errors.New("dpdk: more mbufs than a burst")
	}
	if ret := C.rs_alloc(p.p, (*C.uintptr_t)(unsafe.Pointer(&b.M[0])), (*C.uintptr_t)(unsafe.Pointer(&b.Addr[0])),
		(*C.uint16_t)(unsafe.Pointer(&b.Len[0])), C.uint16_t(b.N), C.uint16_t(n)); ret != 0 {
		return ErrNoMbufs
	}
	b.N = max(b.N, n)
	return nil
}

// Take moves the last n of spare's mbufs into b, which must be empty
// (with their room in Len).
func (b *Mbufs) Take(spare *Mbufs, n int) {
	from := spare.N - n
	copy(b.M[:n], spare.M[from:spare.N])
	copy(b.Addr[:n], spare.Addr[from:spare.N])
	copy(b.Len[:n], spare.Len[from:spare.N])
	b.N, spare.N = n, from
}

// Tx sends mbufs b.M[from:b.N] with lengths b.Len on port's queue 0 and
// returns how many the driver took; the caller owns the rest.
func Tx(port uint16, b *Mbufs, from int) int {
	return TxRefill(port, b, from, nil, nil, 0)
}

// TxRefill is Tx followed, in the same cgo call, by topping spare up to
// want mbufs from pool (if pool is not nil and it has enough).
func TxRefill(port uint16, b *Mbufs, from int, pool *Pool, spare *Mbufs, want int) int {
	if from >= b.N {
		return 0
	}
	var mp *C.struct_rte_mempool
	var sm, saddr *C.uintptr_t
	var sroom *C.uint16_t
	var sn C.uint16_t
	if pool != nil {
		mp, sn = pool.p, C.uint16_t(spare.N)
		sm, saddr = (*C.uintptr_t)(unsafe.Pointer(&spare.M[0])), (*C.uintptr_t)(unsafe.Pointer(&spare.Addr[0]))
		sroom = (*C.uint16_t)(unsafe.Pointer(&spare.Len[0]))
		want = min(want, Burst)
	}
	n := C.rs_tx(C.uint16_t(port), (*C.uintptr_t)(unsafe.Pointer(&b.M[from])), (*C.uint16_t)(unsafe.Pointer(&b.Len[from])), C.uint16_t(b.N-from),
		mp, sm, saddr, sroom, &sn, C.uint16_t(want))
	if pool != nil {
		spare.N = int(sn)
	}
	return int(n)
}

// FreeTx frees mbufs b.M[from:b.N] (not taken by the driver).
func FreeTx(b *Mbufs, from int) {
	if from < b.N {
		C.rs_free((*C.uintptr_t)(unsafe.Pointer(&b.M[from])), C.uint16_t(b.N-from))
	}
	b.N = 0
}

// RingPair is two ports joined back to back by a pair of rte_rings: what
// one sends, the other receives.
type RingPair struct {
	A, B   uint16
	r1, r2 C.uintptr_t
}

// NewRingPair makes a ring pair of ports named a and b with rings of size
// slots (a power of two).
func NewRingPair(a, b string, size int) (*RingPair, error) {
	ca, cb := C.CString(a), C.CString(b)
	defer C.free(unsafe.Pointer(ca))
	defer C.free(unsafe.Pointer(cb))
	var rp RingPair
	var pa, pb C.uint16_t
	if err := errOf("net_ring pair", C.rs_ring_pair(ca, cb, C.uint(size), &pa, &pb, &rp.r1, &rp.r2)); err != nil {
		return nil, err
	}
	rp.A, rp.B = uint16(pa), uint16(pb)
	return &rp, nil
}

// FreeRings frees the rings once both ports are closed.
func (rp *RingPair) FreeRings() {
	C.rs_ring_free(rp.r1)
	C.rs_ring_free(rp.r2)
}
