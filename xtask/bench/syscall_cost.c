/* The cost of a syscall for a process hstrace does not trace: a loop of 1-byte
 * read()+write() pairs (/dev/zero to /dev/null: syscalls hstrace hooks) and of
 * getppid() (one it does not). Prints "READ_WRITE_NS GETPPID_NS", per call. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static double now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e9 + t.tv_nsec;
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 1000000;
	int zero = open("/dev/zero", O_RDONLY), null = open("/dev/null", O_WRONLY);
	double t0, t1, t2;
	char b;

	if (zero < 0 || null < 0 || n <= 0)
		return 1;
	t0 = now_ns();
	for (long i = 0; i < n; i++)
		if (read(zero, &b, 1) != 1 || write(null, &b, 1) != 1)
			return 1;
	t1 = now_ns();
	for (long i = 0; i < n; i++)
		syscall(SYS_getppid);
	t2 = now_ns();
	printf("%.1f %.1f\n", (t1 - t0) / n, (t2 - t1) / n);
	return 0;
}
