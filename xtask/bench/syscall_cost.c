/* The cost of syscalls for a process hstrace does not trace, per call or pair, printed as
 * "FILE_PAIR_NS SOCKET_PAIR_NS GETPPID_NS":
 *   a 1-byte read() from /dev/zero + write() to /dev/null (file I/O: not hooked);
 *   a 1-byte send() + recv() over a loopback TCP connection of its own (socket I/O: the
 *   socket tracepoints fire, and leave at the port check);
 *   getppid() (not hooked). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static double now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e9 + t.tv_nsec;
}

/* A connected loopback TCP pair: *a sends, *b receives. */
static int tcp_pair(int *a, int *b)
{
	struct sockaddr_in addr = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(addr);
	int l = socket(AF_INET, SOCK_STREAM, 0);

	if (l < 0 || bind(l, (struct sockaddr *)&addr, len) || listen(l, 1) ||
	    getsockname(l, (struct sockaddr *)&addr, &len))
		return -1;
	*a = socket(AF_INET, SOCK_STREAM, 0);
	if (*a < 0 || connect(*a, (struct sockaddr *)&addr, len))
		return -1;
	*b = accept(l, NULL, NULL);
	close(l);
	return *b < 0 ? -1 : 0;
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 1000000;
	int zero = open("/dev/zero", O_RDONLY), null = open("/dev/null", O_WRONLY), a, b;
	double t0, t1, t2, t3;
	char c;

	if (zero < 0 || null < 0 || n <= 0 || tcp_pair(&a, &b))
		return 1;
	t0 = now_ns();
	for (long i = 0; i < n; i++)
		if (read(zero, &c, 1) != 1 || write(null, &c, 1) != 1)
			return 1;
	t1 = now_ns();
	for (long i = 0; i < n; i++)
		if (send(a, &c, 1, 0) != 1 || recv(b, &c, 1, 0) != 1)
			return 1;
	t2 = now_ns();
	for (long i = 0; i < n; i++)
		syscall(SYS_getppid);
	t3 = now_ns();
	printf("%.1f %.1f %.1f\n", (t1 - t0) / n, (t2 - t1) / n, (t3 - t2) / n);
	return 0;
}
