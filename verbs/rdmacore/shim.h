// C wrappers for package rdmacore: libibverbs' static-inline calls
// (ibv_post_send, ibv_post_recv, ibv_poll_cq, ibv_req_notify_cq,
// ibv_query_port, ibv_query_gid_table) and batch translation between flat
// structs that Go fills or reads and libibverbs' structs.
#ifndef RSOCK_RDMACORE_SHIM_H
#define RSOCK_RDMACORE_SHIM_H
#include <infiniband/verbs.h>
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>

// Flat work requests and completions: Go fills and reads these (no
// pointers, no unions), the wrappers below translate a whole batch per
// call.
struct rs_swr {
	uint64_t id, remote_addr, compare_add, swap;
	uint32_t opcode, flags, imm, rkey, nsge, sge_off;
};
struct rs_rwr {
	uint64_t id;
	uint32_t nsge, sge_off;
};
struct rs_wc {
	uint64_t id;
	uint32_t status, opcode, flags, byte_len, imm, qpn, vendor_err, pad;
};
struct rs_qpattr {
	uint8_t dgid[16];
	uint32_t flow_label, rq_psn, sq_psn, dest_qpn, access;
	uint32_t cap_send_wr, cap_recv_wr, cap_send_sge, cap_recv_sge, cap_inline;
	uint16_t pkey_index;
	uint8_t state, cur_state, path_mtu, port, sgid_index, hop_limit, tclass;
	uint8_t timeout, retry_cnt, rnr_retry, max_rd_atomic, min_rnr_timer, max_dest_rd_atomic;
};
struct rs_port {
	uint32_t state, max_mtu, active_mtu, gid_tbl_len, link_layer;
};

// rs_chunk bounds the work requests built on the C stack per
// ibv_post_send/ibv_post_recv; a larger batch takes several, still in one
// cgo call.
enum { rs_chunk = 32 };

static struct ibv_device **rs_devices(int *n) {
	errno = 0;
	return ibv_get_device_list(n);
}

static int rs_query_port(struct ibv_context *ctx, struct rs_port *out) {
	struct ibv_port_attr a;
	memset(&a, 0, sizeof a);
	int rc = ibv_query_port(ctx, 1, &a);
	if (rc) return rc;
	out->state = a.state; out->max_mtu = a.max_mtu; out->active_mtu = a.active_mtu;
	out->gid_tbl_len = a.gid_tbl_len; out->link_layer = a.link_layer;
	return 0;
}

static ssize_t rs_gid_table(struct ibv_context *ctx, struct ibv_gid_entry *e, size_t n) {
	return ibv_query_gid_table(ctx, e, n, 0);
}

static struct ibv_mr *rs_reg_mr(struct ibv_pd *pd, uintptr_t addr, size_t len, int access) {
	return ibv_reg_mr(pd, (void *)addr, len, access);
}

static struct ibv_qp *rs_create_qp(struct ibv_pd *pd, struct ibv_cq *scq, struct ibv_cq *rcq,
		uint32_t swr, uint32_t rwr, uint32_t ssge, uint32_t rsge, uint32_t inl, int sigall) {
	struct ibv_qp_init_attr ia;
	memset(&ia, 0, sizeof ia);
	ia.send_cq = scq; ia.recv_cq = rcq; ia.qp_type = IBV_QPT_RC; ia.sq_sig_all = sigall;
	ia.cap.max_send_wr = swr; ia.cap.max_recv_wr = rwr;
	ia.cap.max_send_sge = ssge; ia.cap.max_recv_sge = rsge; ia.cap.max_inline_data = inl;
	return ibv_create_qp(pd, &ia);
}

static int rs_modify_qp(struct ibv_qp *qp, const struct rs_qpattr *a, int mask) {
	struct ibv_qp_attr q;
	memset(&q, 0, sizeof q);
	q.qp_state = a->state; q.cur_qp_state = a->cur_state; q.path_mtu = a->path_mtu;
	q.qp_access_flags = a->access; q.pkey_index = a->pkey_index; q.port_num = a->port;
	memcpy(q.ah_attr.grh.dgid.raw, a->dgid, 16);
	q.ah_attr.grh.flow_label = a->flow_label; q.ah_attr.grh.sgid_index = a->sgid_index;
	q.ah_attr.grh.hop_limit = a->hop_limit; q.ah_attr.grh.traffic_class = a->tclass;
	q.ah_attr.is_global = 1; q.ah_attr.port_num = a->port ? a->port : 1;
	q.timeout = a->timeout; q.retry_cnt = a->retry_cnt; q.rnr_retry = a->rnr_retry;
	q.rq_psn = a->rq_psn; q.sq_psn = a->sq_psn; q.max_rd_atomic = a->max_rd_atomic;
	q.min_rnr_timer = a->min_rnr_timer; q.max_dest_rd_atomic = a->max_dest_rd_atomic;
	q.dest_qp_num = a->dest_qpn;
	q.cap.max_send_wr = a->cap_send_wr; q.cap.max_recv_wr = a->cap_recv_wr;
	q.cap.max_send_sge = a->cap_send_sge; q.cap.max_recv_sge = a->cap_recv_sge;
	q.cap.max_inline_data = a->cap_inline;
	return ibv_modify_qp(qp, &q, mask);
}

static int rs_query_qp(struct ibv_qp *qp, struct rs_qpattr *a) {
	struct ibv_qp_attr q;
	struct ibv_qp_init_attr ia;
	memset(&q, 0, sizeof q);
	int rc = ibv_query_qp(qp, &q, IBV_QP_STATE | IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS |
		IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_TIMEOUT |
		IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_RQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC |
		IBV_QP_MIN_RNR_TIMER | IBV_QP_SQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_CAP |
		IBV_QP_DEST_QPN, &ia);
	if (rc) return rc;
	memcpy(a->dgid, q.ah_attr.grh.dgid.raw, 16);
	a->state = q.qp_state; a->cur_state = q.cur_qp_state; a->path_mtu = q.path_mtu;
	a->access = q.qp_access_flags; a->pkey_index = q.pkey_index; a->port = q.port_num;
	a->flow_label = q.ah_attr.grh.flow_label; a->sgid_index = q.ah_attr.grh.sgid_index;
	a->hop_limit = q.ah_attr.grh.hop_limit; a->tclass = q.ah_attr.grh.traffic_class;
	a->timeout = q.timeout; a->retry_cnt = q.retry_cnt; a->rnr_retry = q.rnr_retry;
	a->rq_psn = q.rq_psn; a->sq_psn = q.sq_psn; a->max_rd_atomic = q.max_rd_atomic;
	a->min_rnr_timer = q.min_rnr_timer; a->max_dest_rd_atomic = q.max_dest_rd_atomic;
	a->dest_qpn = q.dest_qp_num;
	a->cap_send_wr = q.cap.max_send_wr; a->cap_recv_wr = q.cap.max_recv_wr;
	a->cap_send_sge = q.cap.max_send_sge; a->cap_recv_sge = q.cap.max_recv_sge;
	a->cap_inline = q.cap.max_inline_data;
	return 0;
}

// rs_post_send posts n send work requests, whose scatter lists index
// sges, and sets *posted to how many the queue took. It returns 0 or the
// provider's error number.
static int rs_post_send(struct ibv_qp *qp, const struct rs_swr *w, int n, struct ibv_sge *sges, int *posted) {
	struct ibv_send_wr wrs[rs_chunk], *bad;
	*posted = 0;
	for (int base = 0; base < n; base += rs_chunk) {
		int m = n - base < rs_chunk ? n - base : rs_chunk;
		memset(wrs, 0, sizeof(wrs[0]) * m);
		for (int i = 0; i < m; i++) {
			const struct rs_swr *s = &w[base + i];
			struct ibv_send_wr *r = &wrs[i];
			r->wr_id = s->id;
			r->next = i + 1 < m ? &wrs[i + 1] : NULL;
			r->sg_list = s->nsge ? &sges[s->sge_off] : NULL;
			r->num_sge = s->nsge;
			r->opcode = s->opcode;
			r->send_flags = s->flags;
			r->imm_data = htonl(s->imm);
			switch (s->opcode) {
			case IBV_WR_RDMA_WRITE: case IBV_WR_RDMA_WRITE_WITH_IMM: case IBV_WR_RDMA_READ:
				r->wr.rdma.remote_addr = s->remote_addr; r->wr.rdma.rkey = s->rkey;
				break;
			case IBV_WR_ATOMIC_CMP_AND_SWP: case IBV_WR_ATOMIC_FETCH_AND_ADD:
				r->wr.atomic.remote_addr = s->remote_addr; r->wr.atomic.rkey = s->rkey;
				r->wr.atomic.compare_add = s->compare_add; r->wr.atomic.swap = s->swap;
				break;
			}
		}
		bad = NULL;
		int rc = ibv_post_send(qp, wrs, &bad);
		if (rc) {
			*posted += bad ? (int)(bad - wrs) : 0;
			return rc;
		}
		*posted += m;
	}
	return 0;
}

// rs_post_recv posts n receive work requests, as rs_post_send.
static int rs_post_recv(struct ibv_qp *qp, const struct rs_rwr *w, int n, struct ibv_sge *sges, int *posted) {
	struct ibv_recv_wr wrs[rs_chunk], *bad;
	*posted = 0;
	for (int base = 0; base < n; base += rs_chunk) {
		int m = n - base < rs_chunk ? n - base : rs_chunk;
		for (int i = 0; i < m; i++) {
			const struct rs_rwr *s = &w[base + i];
			wrs[i].wr_id = s->id;
			wrs[i].next = i + 1 < m ? &wrs[i + 1] : NULL;
			wrs[i].sg_list = s->nsge ? &sges[s->sge_off] : NULL;
			wrs[i].num_sge = s->nsge;
		}
		bad = NULL;
		int rc = ibv_post_recv(qp, wrs, &bad);
		if (rc) {
			*posted += bad ? (int)(bad - wrs) : 0;
			return rc;
		}
		*posted += m;
	}
	return 0;
}

// rs_poll moves up to n completions into out. It returns how many, or a
// negative number when polling failed.
static int rs_poll(struct ibv_cq *cq, struct rs_wc *out, int n) {
	struct ibv_wc wc[rs_chunk];
	int got = 0;
	while (got < n) {
		int m = n - got < rs_chunk ? n - got : rs_chunk;
		int k = ibv_poll_cq(cq, m, wc);
		if (k < 0) return got ? got : k;
		for (int i = 0; i < k; i++) {
			struct rs_wc *o = &out[got + i];
			o->id = wc[i].wr_id; o->status = wc[i].status; o->opcode = wc[i].opcode;
			o->flags = wc[i].wc_flags; o->byte_len = wc[i].byte_len;
			o->imm = (wc[i].wc_flags & IBV_WC_WITH_IMM) ? ntohl(wc[i].imm_data) : 0;
			o->qpn = wc[i].qp_num; o->vendor_err = wc[i].vendor_err; o->pad = 0;
		}
		got += k;
		if (k < m) break;
	}
	return got;
}

static int rs_req_notify(struct ibv_cq *cq) { return ibv_req_notify_cq(cq, 0); }

// rs_get_event takes one event off a non-blocking completion channel and
// acknowledges it. It returns 0, or the error number (EAGAIN: none yet).
static int rs_get_event(struct ibv_comp_channel *ch) {
	struct ibv_cq *cq;
	void *ctx;
	if (ibv_get_cq_event(ch, &cq, &ctx)) return errno ? errno : EIO;
	ibv_ack_cq_events(cq, 1);
	return 0;
}

// rs_async is an async event with what names its object copied out:
// the QP's number, the CQ's address, or the port.
struct rs_async {
	int kind;
	uint32_t qpn;
	uintptr_t cq;
	int port;
};

// rs_get_async takes one event off the device's non-blocking async fd,
// copies it into out and acknowledges it at once (a QP or CQ cannot be
// destroyed while an event of it is unacknowledged). It returns 0, or
// the error number (EAGAIN: none yet).
static int rs_get_async(struct ibv_context *ctx, struct rs_async *out) {
	struct ibv_async_event ev;
	if (ibv_get_async_event(ctx, &ev)) return errno ? errno : EIO;
	memset(out, 0, sizeof *out);
	out->kind = ev.event_type;
	switch (ev.event_type) {
	case IBV_EVENT_QP_FATAL: case IBV_EVENT_QP_REQ_ERR: case IBV_EVENT_QP_ACCESS_ERR:
	case IBV_EVENT_COMM_EST: case IBV_EVENT_SQ_DRAINED: case IBV_EVENT_PATH_MIG:
	case IBV_EVENT_PATH_MIG_ERR: case IBV_EVENT_QP_LAST_WQE_REACHED:
		out->qpn = ev.element.qp->qp_num;
		break;
	case IBV_EVENT_CQ_ERR:
		out->cq = (uintptr_t)ev.element.cq;
		break;
	case IBV_EVENT_PORT_ACTIVE: case IBV_EVENT_PORT_ERR: case IBV_EVENT_LID_CHANGE:
	case IBV_EVENT_PKEY_CHANGE: case IBV_EVENT_SM_CHANGE: case IBV_EVENT_CLIENT_REREGISTER:
	case IBV_EVENT_GID_CHANGE:
		out->port = ev.element.port_num;
		break;
	default:
		break;
	}
	ibv_ack_async_event(&ev);
	return 0;
}

// rs_to_error moves a QP to the error state, which flushes its work
// requests as completions with IBV_WC_WR_FLUSH_ERR.
static int rs_to_error(struct ibv_qp *qp) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_ERR;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE);
}

static int rs_nonblock(int fd) {
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0) return errno;
	return fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0 ? errno : 0;
}
#endif
