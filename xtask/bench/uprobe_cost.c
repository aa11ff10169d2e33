/* The cost of one call of a hooked OpenSSL function, printed as "NS_PER_CALL": calls of
 * SSL_do_handshake on an SSL object with no connection (it returns at once, an error),
 * timed in a loop. Run once with hstrace tracing this process (its uprobe and uretprobe
 * on SSL_do_handshake fire at every call) and once without: the difference is what the
 * two uprobe traps and their programs cost. It waits for a line on stdin before the
 * loop, so that hstrace can attach first. Usage: uprobe_cost CALLS */
#include <openssl/ssl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e9 + t.tv_nsec;
}

int main(int argc, char **argv)
{
	long calls = argc > 1 ? atol(argv[1]) : 100000;
	SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
	SSL *ssl = ctx ? SSL_new(ctx) : NULL;
	char line[16];
	double t0;

	if (!ssl)
		return 1;
	printf("ready\n");
	fflush(stdout);
	if (!fgets(line, sizeof(line), stdin))
		return 1;
	t0 = now_ns();
	for (long i = 0; i < calls; i++)
		SSL_do_handshake(ssl);
	printf("%.1f\n", (now_ns() - t0) / calls);
	return 0;
}
