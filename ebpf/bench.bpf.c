// SPDX-License-Identifier: GPL-2.0-only OR MIT
/*
 * Bench-only programs, never in the object users load: `hstrace-bench` (tools/) attaches
 * them to measure what the kernel's hooks and its run-time counting cost before any of
 * hstrace's own work. Both do nothing.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "Dual MIT/GPL";

/* `hstrace-bench stats-floor`: its run time under kernel.bpf_stats_enabled is what the
 * counting itself adds to every program run, which the bench subtracts from the figures
 * of the real programs. Loaded for any BTF tracepoint by `hooks-alone`. */
SEC("tp_btf/sock_recv_length")
int BPF_PROG(stats_floor)
{
	return 0;
}

/* The same at a tracefs tracepoint: `hstrace-bench hooks-alone` puts one at each such
 * hook hstrace attaches. */
SEC("tracepoint/syscalls/sys_exit_accept4")
int stats_floor_tp(void *ctx)
{
	return 0;
}
