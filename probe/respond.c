/* respond: the responder for one port address. It proves each sender before
 * any buffer is exposed (tag, time window, replay cache, rate limits), then
 * serves one connection at a time: one 8 KiB buffer, local write access only
 * (no remote read or write rights), every wait bounded. One JSON line per event. */
#include "probe.h"

#include <errno.h>
#include <infiniband/verbs.h>
#include <netdb.h>
#include <openssl/crypto.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
#include <stdio.h>
#include <string.h>

#define CONN_MS 3000
#define REPLAY_SLOTS 8192
#define SOURCES 256

struct bucket {
	char addr[INET6_ADDRSTRLEN];
	double tokens;
	uint64_t at_us;
};

static struct {
	uint8_t nonce[NONCE_LEN];
	uint64_t t;
} replay[REPLAY_SLOTS];
static unsigned replay_next;
static struct bucket total, sources[SOURCES];
static struct key key;
static const struct opts *opt;

static void event(const char *kind, const char *k1, const char *v1, const char *k2, const char *v2)
{
	char a[200], b[600];
	json_str(a, sizeof a, v1 ? v1 : "");
	json_str(b, sizeof b, v2 ? v2 : "");
	printf("{\"event\":\"%s\",\"unix\":%llu", kind, (unsigned long long)now_unix());
	if (k1)
		printf(",\"%s\":%s", k1, a);
	if (k2)
		printf(",\"%s\":%s", k2, b);
	printf("}\n");
	fflush(stdout);
}

static int take(struct bucket *b, double rate, double burst)
{
	uint64_t now = mono_us();
	if (b->at_us == 0)
		b->tokens = burst;
	else
		b->tokens += (double)(now - b->at_us) / 1e6 * rate;
	if (b->tokens > burst)
		b->tokens = burst;
	b->at_us = now;
	if (b->tokens < 1.0)
		return -1;
	b->tokens -= 1.0;
	return 0;
}

/* The sender's own bucket (a quarter of the total rate); the least recently
 * used one is reused when the table is full. */
static struct bucket *source_bucket(const char *from)
{
	struct bucket *lru = &sources[0];
	for (int i = 0; i < SOURCES; i++) {
		if (!strcmp(sources[i].addr, from))
			return &sources[i];
		if (sources[i].at_us < lru->at_us)
			lru = &sources[i];
	}
	memset(lru, 0, sizeof *lru);
	snprintf(lru->addr, sizeof lru->addr, "%s", from);
	return lru;
}

/* NULL when the hello is good, else the reason sent back in the reject. */
static const char *judge(const void *pd, size_t len, const char *from, const char *to, struct hello *h)
{
	if (!pd || len < sizeof *h)
		return "bad_key";
	memcpy(h, pd, sizeof *h);
	if (memcmp(h->magic, PROBE_MAGIC, 4) || h->version != PROBE_VERSION)
		return "bad_key";
	double rate = opt->rate, mine = rate / 4 < 1 ? 1 : rate / 4;
	if (take(&total, rate, 2 * rate) || take(source_bucket(from), mine, 2 * mine))
		return "rate_limited";
	uint8_t tag[TAG_LEN];
	hello_tag(&key, h, from, to, tag);
	if (CRYPTO_memcmp(tag, h->tag, TAG_LEN))
		return "bad_key";
	uint64_t t = 0, now = now_unix();
	for (int i = 0; i < 8; i++)
		t = t << 8 | h->time_be[i];
	if (t + TIME_WINDOW_S < now || t > now + TIME_WINDOW_S)
		return "stale";
	for (unsigned i = 0; i < REPLAY_SLOTS; i++)
		if (replay[i].t && !memcmp(replay[i].nonce, h->nonce, NONCE_LEN))
			return "replay";
	/* A slot still inside the window would forget a nonce that could be replayed. */
	if (replay[replay_next].t && replay[replay_next].t + 2 * TIME_WINDOW_S >= now)
		return "busy";
	memcpy(replay[replay_next].nonce, h->nonce, NONCE_LEN);
	replay[replay_next].t = now;
	replay_next = (replay_next + 1) % REPLAY_SLOTS;
	return NULL;
}

static int wait_comp(struct ibv_cq *cq, struct ibv_comp_channel *ch, uint64_t deadline, struct ibv_wc *wc)
{
	for (;;) {
		int n = ibv_poll_cq(cq, 1, wc);
		if (n)
			return n < 0 ? -1 : (wc->status == IBV_WC_SUCCESS ? 0 : -1);
		if (ibv_req_notify_cq(cq, 0))
			return -1;
		n = ibv_poll_cq(cq, 1, wc);
		if (n)
			return n < 0 ? -1 : (wc->status == IBV_WC_SUCCESS ? 0 : -1);
		uint64_t now = mono_us();
		if (now >= deadline)
			return -1;
		struct pollfd p = {.fd = ch->fd, .events = POLLIN};
		if (poll(&p, 1, (int)((deadline - now) / 1000) + 1) <= 0)
			return -1;
		struct ibv_cq *ev_cq;
		void *ctx;
		if (ibv_get_cq_event(ch, &ev_cq, &ctx))
			return -1;
		ibv_ack_cq_events(ev_cq, 1);
	}
}

static int wait_established(struct rdma_event_channel *ch, uint64_t deadline)
{
	struct pollfd p = {.fd = ch->fd, .events = POLLIN};
	uint64_t now = mono_us();
	if (now >= deadline || poll(&p, 1, (int)((deadline - now) / 1000) + 1) <= 0)
		return -1;
	struct rdma_cm_event *ev;
	if (rdma_get_cm_event(ch, &ev))
		return -1;
	int ok = ev->event == RDMA_CM_EVENT_ESTABLISHED;
	rdma_ack_cm_event(ev);
	return ok ? 0 : -1;
}

/* An accepted connection: echo the small message with our node and rail, then
 * echo the path-MTU-sized one. */
static void serve(struct rdma_cm_id *id, const char *from, const uint8_t nonce[NONCE_LEN])
{
	static uint8_t buf[BUF_LEN];
	uint8_t *in = buf, *out = buf + BUF_LEN / 2;
	struct ibv_qp_init_attr attr = {.qp_type = IBV_QPT_RC, .sq_sig_all = 1};
	attr.cap.max_send_wr = attr.cap.max_recv_wr = 2;
	attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct ibv_mr *mr = NULL;
	struct ibv_wc wc;
	uint64_t deadline = mono_us() + CONN_MS * 1000u;
	const char *what = "migrate the connection";
	char node[NODE_MAX + 1] = "";
	struct msg m;

	if (!ch || rdma_migrate_id(id, ch))
		goto fail;
	what = "create the queue pair";
	if (rdma_create_qp(id, NULL, &attr))
		goto fail;
	what = "register the buffer";
	if (!(mr = rdma_reg_msgs(id, buf, BUF_LEN)))
		goto fail;
	what = "accept";
	if (rdma_post_recv(id, NULL, in, SMALL_LEN, mr) || rdma_accept(id, NULL) || wait_established(ch, deadline))
		goto fail;
	what = "receive the small message";
	if (wait_comp(id->recv_cq, id->recv_cq_channel, deadline, &wc) || wc.byte_len != SMALL_LEN)
		goto fail;
	memcpy(&m, in, sizeof m);
	uint8_t tag[16];
	msg_tag(&key, nonce, &m, tag);
	what = "the small message is not a probe from a key holder";
	if (msg_node(&m, node, sizeof node) || CRYPTO_memcmp(tag, m.tag, 16))
		goto fail;
	msg_fill(&m, opt->node, opt->rail);
	memcpy(out, &m, sizeof m);
	what = "echo the small message";
	if (rdma_post_recv(id, NULL, in, BUF_LEN / 2, mr) || rdma_post_send(id, NULL, out, SMALL_LEN, mr, 0) ||
	    wait_comp(id->send_cq, id->send_cq_channel, deadline, &wc))
		goto fail;
	event("answered", "from", from, "node", node);
	/* The full-size message: its loss is the sender's finding (stage full), not an event here. */
	if (!wait_comp(id->recv_cq, id->recv_cq_channel, deadline, &wc) && wc.byte_len <= BUF_LEN / 2) {
		memcpy(out, in, wc.byte_len);
		if (!rdma_post_send(id, NULL, out, wc.byte_len, mr, 0))
			wait_comp(id->send_cq, id->send_cq_channel, deadline, &wc);
	}
	rdma_disconnect(id);
	goto out;
fail:
	if (!node[0]) {
		char err[300];
		snprintf(err, sizeof err, "%s: %s", what, errno ? strerror(errno) : "timed out");
		event("error", "from", from, "error", err);
	}
out:
	if (id->qp)
		rdma_destroy_qp(id);
	if (mr)
		rdma_dereg_mr(mr);
	rdma_destroy_id(id);
	if (ch)
		rdma_destroy_event_channel(ch);
}

static void request(struct rdma_cm_event *ev, struct rdma_event_channel *ch)
{
	struct rdma_cm_id *id = ev->id;
	char from[INET6_ADDRSTRLEN] = "?", to[INET6_ADDRSTRLEN] = "?";
	struct hello h;
	addr_string(rdma_get_peer_addr(id), from, sizeof from);
	addr_string(rdma_get_local_addr(id), to, sizeof to);
	const char *why = judge(ev->param.conn.private_data, ev->param.conn.private_data_len, from, to, &h);
	rdma_ack_cm_event(ev);
	(void)ch;
	if (why) {
		char pd[32];
		int n = snprintf(pd, sizeof pd, "%s%s", REJECT_PREFIX, why);
		rdma_reject(id, pd, (uint8_t)(n + 1));
		rdma_destroy_id(id);
		event("refused", "from", from, "why", why);
		return;
	}
	errno = 0;
	serve(id, from, h.nonce);
}

int cmd_respond(const struct opts *o)
{
	char err[300];
	opt = o;
	if (read_key(o->key_file, &key, err, sizeof err)) {
		event("error", "error", err, NULL, NULL);
		return 1;
	}
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *listen = NULL;
	struct addrinfo hints = {.ai_flags = AI_NUMERICHOST}, *ai = NULL;
	char port[8];
	snprintf(port, sizeof port, "%d", o->port);
	const char *what = "create the event channel";
	if (!ch)
		goto fail;
	what = "create the listening id";
	if (rdma_create_id(ch, &listen, NULL, RDMA_PS_TCP))
		goto fail;
	what = "parse the address";
	if (getaddrinfo(o->addr, port, &hints, &ai)) {
		errno = EINVAL;
		goto fail;
	}
	what = "bind the address (is it on an RDMA port?)";
	if (rdma_bind_addr(listen, ai->ai_addr))
		goto fail;
	what = "listen";
	if (rdma_listen(listen, 8))
		goto fail;
	freeaddrinfo(ai);
	ai = NULL;
	event("ready", "addr", o->addr, "device",
	      listen->verbs ? ibv_get_device_name(listen->verbs->device) : "");
	for (;;) {
		struct rdma_cm_event *ev;
		what = "wait for connection requests";
		if (rdma_get_cm_event(ch, &ev))
			goto fail;
		if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
			request(ev, ch);
		} else if (ev->event == RDMA_CM_EVENT_DEVICE_REMOVAL || ev->event == RDMA_CM_EVENT_ADDR_CHANGE) {
			snprintf(err, sizeof err, "the port's device or address went away (%s)", rdma_event_str(ev->event));
			rdma_ack_cm_event(ev);
			event("error", "error", err, NULL, NULL);
			return 1;
		} else {
			rdma_ack_cm_event(ev);
		}
	}
fail:
	snprintf(err, sizeof err, "%s on %s port %d: %s", what, o->addr, o->port, strerror(errno));
	event("error", "error", err, NULL, NULL);
	if (ai)
		freeaddrinfo(ai);
	OPENSSL_cleanse(&key, sizeof key);
	return 1;
}
