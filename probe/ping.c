/* ping: one probe to one responder, both ways on one RC QP: a small SEND and
 * its echo, then a path-MTU-sized one and its echo. Prints one JSON line. */
#include "probe.h"

#include <errno.h>
#include <infiniband/verbs.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

enum stage { S_SOURCE, S_RESOLVE, S_CONNECT, S_REJECTED, S_SMALL, S_FULL, S_HELPER, S_DONE, S_COUNT };
static const char *const stage_name[S_COUNT] = {"source", "resolve", "connect", "rejected",
						"small",  "full",    "helper",  "done"};

/* The stage a timeout interrupts, and its line, made before the clock runs:
 * the signal handler only write()s. */
static volatile sig_atomic_t current = S_RESOLVE;
static char timeout_line[S_COUNT][160];

static void on_alarm(int sig)
{
	(void)sig;
	const char *l = timeout_line[current];
	ssize_t r = write(STDOUT_FILENO, l, strlen(l));
	(void)r;
	_exit(0);
}

struct result {
	enum stage stage;
	char error[256];
	char reject_why[32];
	long rtt_us, path_mtu, gid_index;
	const char *gid_type;
	char answered_node[NODE_MAX + 1];
	int answered_rail;
	char device[64];
	int port_num;
};

static void print(const struct result *r)
{
	char err[600], why[80] = "null", node[100] = "null", dev[140] = "null", gt[40] = "null";
	char num[4][24];
	json_str(err, sizeof err, r->error);
	if (r->reject_why[0])
		json_str(why, sizeof why, r->reject_why);
	if (r->answered_node[0])
		json_str(node, sizeof node, r->answered_node);
	if (r->device[0])
		json_str(dev, sizeof dev, r->device);
	if (r->gid_type)
		json_str(gt, sizeof gt, r->gid_type);
	long v[4] = {r->rtt_us, r->path_mtu, r->gid_index, r->answered_rail};
	for (int i = 0; i < 4; i++)
		if (v[i] < 0)
			strcpy(num[i], "null");
		else
			snprintf(num[i], sizeof num[i], "%ld", v[i]);
	printf("{\"stage\":\"%s\",\"error\":%s,\"reject_why\":%s,\"rtt_us\":%s,\"path_mtu\":%s,"
	       "\"gid_index\":%s,\"gid_type\":%s,\"answered_node\":%s,\"answered_rail\":%s,"
	       "\"device\":%s,\"port_num\":%d}\n",
	       stage_name[r->stage], err, why, num[0], num[1], num[2], gt, node, num[3], dev, r->port_num);
	fflush(stdout);
}

static int fail(struct result *r, enum stage s, const char *what)
{
	r->stage = s;
	snprintf(r->error, sizeof r->error, "%s: %s", what, strerror(errno));
	return -1;
}

/* One completion from a CQ, waiting on its channel (the alarm bounds it). */
static int wait_comp(struct ibv_cq *cq, struct ibv_comp_channel *ch, struct ibv_wc *wc)
{
	for (;;) {
		int n = ibv_poll_cq(cq, 1, wc);
		if (n != 0)
			return n < 0 ? -1 : 0;
		if (ibv_req_notify_cq(cq, 0))
			return -1;
		n = ibv_poll_cq(cq, 1, wc);
		if (n != 0)
			return n < 0 ? -1 : 0;
		struct ibv_cq *ev_cq;
		void *ctx;
		if (ibv_get_cq_event(ch, &ev_cq, &ctx))
			return -1;
		ibv_ack_cq_events(ev_cq, 1);
	}
}

/* A SEND of len bytes and the responder's echo into the other half. */
static int exchange(struct rdma_cm_id *id, struct ibv_mr *mr, uint8_t *buf, size_t len, struct result *r,
		    enum stage s)
{
	struct ibv_wc wc;
	if (rdma_post_recv(id, NULL, buf + BUF_LEN / 2, len, mr))
		return fail(r, s, "post receive");
	if (rdma_post_send(id, NULL, buf, len, mr, 0))
		return fail(r, s, "post send");
	for (int i = 0; i < 2; i++) {
		struct ibv_cq *cq = i ? id->recv_cq : id->send_cq;
		struct ibv_comp_channel *ch = i ? id->recv_cq_channel : id->send_cq_channel;
		if (wait_comp(cq, ch, &wc))
			return fail(r, s, "completion");
		if (wc.status != IBV_WC_SUCCESS) {
			r->stage = s;
			snprintf(r->error, sizeof r->error, "%s completion: %s", i ? "receive" : "send",
				 ibv_wc_status_str(wc.status));
			return -1;
		}
		if (i && wc.byte_len != len) {
			r->stage = s;
			snprintf(r->error, sizeof r->error, "echo of %zu bytes came back with %u", len, wc.byte_len);
			return -1;
		}
	}
	return 0;
}

static const char *gid_type_name(struct ibv_context *ctx, uint8_t port, uint32_t idx)
{
	struct ibv_gid_entry e;
	if (ibv_query_gid_ex(ctx, port, idx, &e, 0))
		return NULL;
	switch (e.gid_type) {
	case IBV_GID_TYPE_ROCE_V2:
		return "RoCE v2";
	case IBV_GID_TYPE_ROCE_V1:
		return "IB/RoCE v1";
	default:
		return "IB/RoCE v1";
	}
}

static void rejected(struct rdma_cm_id *id, struct result *r)
{
	const struct rdma_cm_event *ev = id->event;
	const char *p = ev ? ev->param.conn.private_data : NULL;
	size_t n = ev ? ev->param.conn.private_data_len : 0, pl = strlen(REJECT_PREFIX);
	if (p && n > pl && !memcmp(p, REJECT_PREFIX, pl)) {
		/* A reason is lower case and '_'; anything else ends it. */
		size_t w = 0;
		for (size_t i = pl; i < n && w + 1 < sizeof r->reject_why && (p[i] == '_' || (p[i] >= 'a' && p[i] <= 'z')); i++)
			r->reject_why[w++] = p[i];
		r->reject_why[w] = 0;
		r->stage = S_REJECTED;
		snprintf(r->error, sizeof r->error, "the responder refused the probe: %s", r->reject_why);
	} else {
		r->stage = S_CONNECT;
		snprintf(r->error, sizeof r->error, "connection refused: no responder on the port");
	}
}

static int probe(const struct opts *o, const struct key *key, struct result *r)
{
	struct rdma_addrinfo hints = {0}, *src = NULL, *res = NULL;
	struct ibv_qp_init_attr attr = {0};
	struct rdma_cm_id *id = NULL;
	char port[8], lsrc[INET6_ADDRSTRLEN], ldst[INET6_ADDRSTRLEN];
	static uint8_t buf[BUF_LEN];
	struct ibv_mr *mr = NULL;
	int rc = -1;

	snprintf(port, sizeof port, "%d", o->port);
	hints.ai_flags = RAI_PASSIVE;
	hints.ai_port_space = RDMA_PS_TCP;
	if (rdma_getaddrinfo(o->src, NULL, &hints, &src)) {
		r->stage = S_SOURCE;
		snprintf(r->error, sizeof r->error, "source address %s: %s", o->src, strerror(errno));
		return -1;
	}
	hints.ai_flags = 0;
	hints.ai_src_addr = src->ai_src_addr;
	hints.ai_src_len = src->ai_src_len;
	if (rdma_getaddrinfo(o->dst, port, &hints, &res)) {
		fail(r, S_RESOLVE, "resolve the peer");
		goto out;
	}
	attr.cap.max_send_wr = attr.cap.max_recv_wr = 2;
	attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
	attr.qp_type = IBV_QPT_RC;
	attr.sq_sig_all = 1;
	if (rdma_create_ep(&id, res, NULL, &attr)) {
		fail(r, errno == EADDRNOTAVAIL || errno == ENODEV ? S_SOURCE : S_RESOLVE,
		     "resolve the address and route");
		goto out;
	}
	if (id->verbs) {
		snprintf(r->device, sizeof r->device, "%s", ibv_get_device_name(id->verbs->device));
		r->port_num = id->port_num;
	}
	mr = rdma_reg_msgs(id, buf, BUF_LEN);
	if (!mr) {
		fail(r, S_CONNECT, "register the buffer");
		goto out;
	}
	if (addr_string(rdma_get_local_addr(id), lsrc, sizeof lsrc) ||
	    addr_string(rdma_get_peer_addr(id), ldst, sizeof ldst)) {
		r->stage = S_RESOLVE;
		snprintf(r->error, sizeof r->error, "cannot format the resolved addresses");
		goto out;
	}
	struct hello h = {0};
	memcpy(h.magic, PROBE_MAGIC, 4);
	h.version = PROBE_VERSION;
	h.rail = o->rail < 0 ? 255 : (uint8_t)o->rail;
	uint64_t t = now_unix();
	for (int i = 0; i < 8; i++)
		h.time_be[i] = (uint8_t)(t >> (56 - 8 * i));
	if (RAND_bytes(h.nonce, NONCE_LEN) != 1) {
		r->stage = S_HELPER;
		snprintf(r->error, sizeof r->error, "no random nonce");
		goto out;
	}
	hello_tag(key, &h, lsrc, ldst, h.tag);
	struct rdma_conn_param cp = {.private_data = &h, .private_data_len = sizeof h,
				     .retry_count = 3, .rnr_retry_count = 3};
	current = S_CONNECT;
	if (rdma_connect(id, &cp)) {
		if (errno == ECONNREFUSED)
			rejected(id, r);
		else
			fail(r, S_CONNECT, "connect");
		goto out;
	}
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qi;
	if (!ibv_query_qp(id->qp, &qa, IBV_QP_PATH_MTU | IBV_QP_AV, &qi)) {
		r->path_mtu = 128L << qa.path_mtu;
		if (qa.ah_attr.is_global) {
			r->gid_index = qa.ah_attr.grh.sgid_index;
			r->gid_type = gid_type_name(id->verbs, id->port_num, qa.ah_attr.grh.sgid_index);
		}
	}
	struct msg m;
	msg_fill(&m, o->node, o->rail);
	msg_tag(key, h.nonce, &m, m.tag);
	memcpy(buf, &m, sizeof m);
	current = S_SMALL;
	uint64_t t0 = mono_us();
	if (exchange(id, mr, buf, SMALL_LEN, r, S_SMALL))
		goto out;
	r->rtt_us = (long)(mono_us() - t0);
	struct msg reply;
	memcpy(&reply, buf + BUF_LEN / 2, sizeof reply);
	if (msg_node(&reply, r->answered_node, sizeof r->answered_node)) {
		r->stage = S_SMALL;
		snprintf(r->error, sizeof r->error, "the reply is not a probe answer");
		goto out;
	}
	r->answered_rail = reply.rail == 255 ? -1 : reply.rail;
	size_t full = r->path_mtu > 0 && r->path_mtu <= BUF_LEN / 2 ? (size_t)r->path_mtu : BUF_LEN / 2;
	for (size_t i = 0; i < full; i++)
		buf[i] = (uint8_t)(i * 7 + 1);
	current = S_FULL;
	if (exchange(id, mr, buf, full, r, S_FULL))
		goto out;
	if (memcmp(buf, buf + BUF_LEN / 2, full)) {
		r->stage = S_FULL;
		snprintf(r->error, sizeof r->error, "the %zu-byte echo differs from what was sent", full);
		goto out;
	}
	r->stage = S_DONE;
	rc = 0;
	rdma_disconnect(id);
out:
	if (mr)
		rdma_dereg_mr(mr);
	if (id)
		rdma_destroy_ep(id);
	if (res)
		rdma_freeaddrinfo(res);
	if (src)
		rdma_freeaddrinfo(src);
	return rc;
}

/* Milliseconds since this process was forked (its /proc/self/stat start time
 * against CLOCK_BOOTTIME), or 0 when unreadable. The daemon's kill deadline
 * runs from the spawn, so the time the loader and the verbs providers took to
 * start under load comes off this probe's timeout: otherwise a slow start plus
 * a full timeout outran the daemon's grace and the probe said nothing. */
static long started_ms_ago(void)
{
	char stat[1024];
	FILE *f = fopen("/proc/self/stat", "r");
	if (!f)
		return 0;
	size_t n = fread(stat, 1, sizeof stat - 1, f);
	fclose(f);
	stat[n] = 0;
	/* Field 2 (comm) may hold spaces and parentheses: count from its end. */
	char *p = strrchr(stat, ')');
	unsigned long long start = 0;
	if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu",
			 &start) != 1)
		return 0;
	long hz = sysconf(_SC_CLK_TCK);
	struct timespec now;
	if (hz <= 0 || clock_gettime(CLOCK_BOOTTIME, &now))
		return 0;
	long long ago = (long long)now.tv_sec * 1000 + now.tv_nsec / 1000000 - (long long)(start * 1000 / (unsigned long long)hz);
	return ago > 0 ? (long)ago : 0;
}

int cmd_ping(const struct opts *o)
{
	struct result r = {.rtt_us = -1, .path_mtu = -1, .gid_index = -1, .answered_rail = -1};
	static struct key key;
	if (read_key(o->key_file, &key, r.error, sizeof r.error)) {
		r.stage = S_HELPER;
		print(&r);
		return 0;
	}
	for (int s = 0; s < S_COUNT; s++)
		snprintf(timeout_line[s], sizeof timeout_line[s],
			 "{\"stage\":\"%s\",\"error\":\"timed out after %d ms\",\"reject_why\":null}\n",
			 stage_name[s], o->timeout_ms);
	long left = o->timeout_ms - started_ms_ago();
	if (left <= 0) {
		r.stage = S_HELPER;
		snprintf(r.error, sizeof r.error, "the helper took longer than the %d ms timeout to start (a loaded node)",
			 o->timeout_ms);
		print(&r);
		return 0;
	}
	struct sigaction sa = {.sa_handler = on_alarm};
	sigaction(SIGALRM, &sa, NULL);
	struct itimerval it = {.it_value = {.tv_sec = left / 1000, .tv_usec = (left % 1000) * 1000}};
	setitimer(ITIMER_REAL, &it, NULL);
	probe(o, &key, &r);
	OPENSSL_cleanse(&key, sizeof key);
	print(&r);
	return 0;
}
