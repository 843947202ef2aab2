/* rdma-node-agent-probe: the peer-probe helper (issue 35). Dynamically linked
 * because librdmacm/libibverbs dlopen their providers, which the static agent
 * cannot. See probe/README.md for the wire format. */
#ifndef RNA_PROBE_H
#define RNA_PROBE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#define PROBE_MAGIC "RNAP"
#define PROBE_VERSION 1
/* RDMA_PS_TCP connect private data: 92 bytes of IB CM REQ minus the 36 of
 * the rdma_cm header. */
#define PRIV_LEN 56
#define TAG_LEN 24
#define NONCE_LEN 16
#define SMALL_LEN 64
#define NODE_MAX 40
#define BUF_LEN 8192
#define KEY_MIN 16
#define KEY_MAX 4096
#define TIME_WINDOW_S 60
#define DEFAULT_PORT 18770
#define REJECT_PREFIX "RNAP-REJ:"

/* Connect private data: magic, version, rail (255: none), 2 reserved, unix
 * time (big endian), nonce, then the HMAC tag over all of that plus the
 * source and destination addresses. */
struct hello {
	uint8_t magic[4];
	uint8_t version;
	uint8_t rail;
	uint8_t reserved[2];
	uint8_t time_be[8];
	uint8_t nonce[NONCE_LEN];
	uint8_t tag[TAG_LEN];
};

/* The SEND both ways: magic, rail, node length, node, then (client to
 * responder) a tag binding the node name to the connection's nonce. */
struct msg {
	uint8_t magic[4];
	uint8_t rail;
	uint8_t node_len;
	uint8_t reserved[2];
	char node[NODE_MAX];
	uint8_t tag[16];
};

struct key {
	unsigned char bytes[KEY_MAX];
	size_t len;
};

struct opts {
	const char *src, *dst, *addr, *key_file, *node;
	int port, rail, timeout_ms, rate;
};

int read_key(const char *path, struct key *key, char *err, size_t errlen);
void hello_tag(const struct key *key, const struct hello *h, const char *src,
	       const char *dst, uint8_t out[TAG_LEN]);
void msg_tag(const struct key *key, const uint8_t nonce[NONCE_LEN],
	     const struct msg *m, uint8_t out[16]);
int addr_string(const struct sockaddr *sa, char *out, size_t len);
void json_str(char *out, size_t len, const char *s);
uint64_t now_unix(void);
uint64_t mono_us(void);
int msg_fill(struct msg *m, const char *node, int rail);
int msg_node(const struct msg *m, char *node, size_t len);

int cmd_ping(const struct opts *o);
int cmd_respond(const struct opts *o);

#endif
