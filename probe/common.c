/* What ping and respond share: the key file, the tags, JSON strings. */
#include "probe.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The fleet key: a regular file, not a link, owned by us, no rights for
 * others (a world- or group-readable key is refused: anyone who reads it can
 * forge probes), 16..4096 bytes; a trailing newline is not part of it. */
int read_key(const char *path, struct key *key, char *err, size_t errlen)
{
	struct stat st;
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		snprintf(err, errlen, "cannot open key file %s: %s", path, strerror(errno));
		return -1;
	}
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		snprintf(err, errlen, "key file %s is not a regular file", path);
		goto fail;
	}
	if (st.st_mode & 077) {
		snprintf(err, errlen, "key file %s has mode %03o: it must be readable by its owner only (chmod 0600)",
			 path, (unsigned)(st.st_mode & 0777));
		goto fail;
	}
	if (st.st_uid != geteuid()) {
		snprintf(err, errlen, "key file %s is owned by uid %u, not by the prober (uid %u)", path,
			 (unsigned)st.st_uid, (unsigned)geteuid());
		goto fail;
	}
	if (st.st_size < KEY_MIN || st.st_size > KEY_MAX) {
		snprintf(err, errlen, "key file %s holds %lld bytes: a key has %d to %d", path,
			 (long long)st.st_size, KEY_MIN, KEY_MAX);
		goto fail;
	}
	ssize_t n = read(fd, key->bytes, sizeof key->bytes);
	close(fd);
	if (n < 0) {
		snprintf(err, errlen, "cannot read key file %s: %s", path, strerror(errno));
		return -1;
	}
	while (n > 0 && (key->bytes[n - 1] == '\n' || key->bytes[n - 1] == '\r'))
		n--;
	if (n < KEY_MIN) {
		snprintf(err, errlen, "key file %s holds fewer than %d bytes of key", path, KEY_MIN);
		return -1;
	}
	key->len = (size_t)n;
	return 0;
fail:
	close(fd);
	return -1;
}

static void hmac(const struct key *key, const unsigned char *data, size_t len, uint8_t *out, size_t outlen)
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	HMAC(EVP_sha256(), key->bytes, (int)key->len, data, len, md, &mdlen);
	memcpy(out, md, outlen);
}

void hello_tag(const struct key *key, const struct hello *h, const char *src, const char *dst,
	       uint8_t out[TAG_LEN])
{
	unsigned char data[offsetof(struct hello, tag) + 2 * (INET6_ADDRSTRLEN + 1)];
	size_t n = offsetof(struct hello, tag);
	memcpy(data, h, n);
	size_t ls = strnlen(src, INET6_ADDRSTRLEN), ld = strnlen(dst, INET6_ADDRSTRLEN);
	memcpy(data + n, src, ls);
	n += ls;
	data[n++] = '>';
	memcpy(data + n, dst, ld);
	n += ld;
	hmac(key, data, n, out, TAG_LEN);
}

void msg_tag(const struct key *key, const uint8_t nonce[NONCE_LEN], const struct msg *m, uint8_t out[16])
{
	unsigned char data[NONCE_LEN + offsetof(struct msg, tag)];
	memcpy(data, nonce, NONCE_LEN);
	memcpy(data + NONCE_LEN, m, offsetof(struct msg, tag));
	hmac(key, data, sizeof data, out, 16);
}

int addr_string(const struct sockaddr *sa, char *out, size_t len)
{
	socklen_t sl = sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
	return getnameinfo(sa, sl, out, (socklen_t)len, NULL, 0, NI_NUMERICHOST) == 0 ? 0 : -1;
}

/* A JSON string literal (quotes included); control characters escaped. */
void json_str(char *out, size_t len, const char *s)
{
	size_t o = 0;
	if (len < 3)
		return;
	out[o++] = '"';
	for (; *s && o + 8 < len; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\') {
			out[o++] = '\\';
			out[o++] = (char)c;
		} else if (c < 0x20 || c == 0x7f) {
			o += (size_t)snprintf(out + o, len - o, "\\u%04x", c);
		} else {
			out[o++] = (char)c;
		}
	}
	out[o++] = '"';
	out[o] = 0;
}

uint64_t now_unix(void)
{
	return (uint64_t)time(NULL);
}

uint64_t mono_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

int msg_fill(struct msg *m, const char *node, int rail)
{
	size_t n = strlen(node);
	if (n == 0 || n > NODE_MAX)
		return -1;
	memset(m, 0, sizeof *m);
	memcpy(m->magic, PROBE_MAGIC, 4);
	m->rail = rail < 0 ? 255 : (uint8_t)rail;
	m->node_len = (uint8_t)n;
	memcpy(m->node, node, n);
	return 0;
}

/* The node name a message carries: printable ASCII only. */
int msg_node(const struct msg *m, char *node, size_t len)
{
	if (memcmp(m->magic, PROBE_MAGIC, 4) != 0 || m->node_len == 0 || m->node_len > NODE_MAX ||
	    m->node_len >= len)
		return -1;
	for (size_t i = 0; i < m->node_len; i++)
		if (m->node[i] < 0x21 || m->node[i] > 0x7e)
			return -1;
	memcpy(node, m->node, m->node_len);
	node[m->node_len] = 0;
	return 0;
}
