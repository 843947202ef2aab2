/* rdma-node-agent-probe ping|respond ...: argument parsing, with bounds. */
#include "probe.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(void)
{
	fputs("usage: rdma-node-agent-probe ping --src ADDR --dst ADDR --port P --key-file F --node NAME\n"
	      "                                    --rail N --timeout-ms T\n"
	      "       rdma-node-agent-probe respond --addr ADDR --port P --key-file F --node NAME --rail N\n"
	      "                                    [--rate R]\n",
	      stderr);
}

static int number(const char *flag, const char *s, long lo, long hi, int *out)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno || *s == 0 || *end != 0 || v < lo || v > hi) {
		fprintf(stderr, "rdma-node-agent-probe: %s %s: not a number in %ld..%ld\n", flag, s, lo, hi);
		return -1;
	}
	*out = (int)v;
	return 0;
}

static int text(const char *flag, const char *s, size_t max, const char **out)
{
	size_t n = strlen(s);
	if (n == 0 || n > max) {
		fprintf(stderr, "rdma-node-agent-probe: %s: empty or longer than %zu bytes\n", flag, max);
		return -1;
	}
	for (size_t i = 0; i < n; i++)
		if (s[i] < 0x21 || s[i] > 0x7e) {
			fprintf(stderr, "rdma-node-agent-probe: %s: only printable ASCII\n", flag);
			return -1;
		}
	*out = s;
	return 0;
}

int main(int argc, char **argv)
{
	struct opts o = {.port = DEFAULT_PORT, .rail = -1, .timeout_ms = 3000, .rate = 20};
	if (argc < 2) {
		usage();
		return 2;
	}
	const char *cmd = argv[1];
	for (int i = 2; i < argc; i += 2) {
		const char *f = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		int rc;
		if (!v) {
			fprintf(stderr, "rdma-node-agent-probe: %s needs a value\n", f);
			return 2;
		}
		if (!strcmp(f, "--src"))
			rc = text(f, v, 63, &o.src);
		else if (!strcmp(f, "--dst"))
			rc = text(f, v, 63, &o.dst);
		else if (!strcmp(f, "--addr"))
			rc = text(f, v, 63, &o.addr);
		else if (!strcmp(f, "--key-file"))
			rc = text(f, v, 4095, &o.key_file);
		else if (!strcmp(f, "--node"))
			rc = text(f, v, NODE_MAX, &o.node);
		else if (!strcmp(f, "--port"))
			rc = number(f, v, 1, 65535, &o.port);
		else if (!strcmp(f, "--rail"))
			rc = number(f, v, -1, 254, &o.rail);
		else if (!strcmp(f, "--timeout-ms"))
			rc = number(f, v, 10, 60000, &o.timeout_ms);
		else if (!strcmp(f, "--rate"))
			rc = number(f, v, 1, 1000, &o.rate);
		else {
			fprintf(stderr, "rdma-node-agent-probe: unknown option %s\n", f);
			rc = -1;
		}
		if (rc)
			return 2;
	}
	if (!o.key_file || !o.node) {
		fputs("rdma-node-agent-probe: --key-file and --node are required\n", stderr);
		return 2;
	}
	if (!strcmp(cmd, "ping")) {
		if (!o.src || !o.dst) {
			fputs("rdma-node-agent-probe: ping needs --src and --dst\n", stderr);
			return 2;
		}
		return cmd_ping(&o);
	}
	if (!strcmp(cmd, "respond")) {
		if (!o.addr) {
			fputs("rdma-node-agent-probe: respond needs --addr\n", stderr);
			return 2;
		}
		return cmd_respond(&o);
	}
	usage();
	return 2;
}
