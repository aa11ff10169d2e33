// SPDX-License-Identifier: GPL-2.0-only OR MIT
/*
 * Feature probes: one tiny program for each BPF feature the default build of hstrace's
 * programs needs (see HS_BASIC in conn.bpf.h). Userspace loads each (never attaches it):
 * the kernel's verifier accepting it is the answer (userspace/src/features.rs). This is
 * how the build to load is chosen, never by the kernel's version: distributions backport.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} feature_value SEC(".maps");

static long one_step(__u32 i, void *ctx)
{
	return 1;
}

/* bpf_loop (5.17) */
SEC("tracepoint/syscalls/sys_enter_getpid")
int has_bpf_loop(void *ctx)
{
	bpf_loop(1, one_step, NULL, 0);
	return 0;
}

/* atomics that fetch, exchange and compare-and-swap (5.12) */
SEC("tracepoint/syscalls/sys_enter_getpid")
int has_atomic_fetch(void *ctx)
{
	__u32 zero = 0;
	__u64 *v = bpf_map_lookup_elem(&feature_value, &zero);

	if (!v)
		return 0;
	__sync_val_compare_and_swap(v, 0, 1);
	__sync_lock_test_and_set(v, 2);
	__sync_fetch_and_or(v, 4);
	return __sync_fetch_and_add(v, 1) & 1;
}

/* the BTF-typed current task (5.11) */
SEC("tracepoint/syscalls/sys_enter_getpid")
int has_task_btf(void *ctx)
{
	return bpf_get_current_task_btf()->pid & 1;
}

/* a task's saved user registers (5.15) */
SEC("tracepoint/syscalls/sys_enter_getpid")
int has_task_pt_regs(void *ctx)
{
	return bpf_task_pt_regs(bpf_get_current_task_btf()) != 0;
}

/* a global function (verified once) taking a pointer to memory (5.12) */
__noinline int global_reads(__u64 *v)
{
	if (!v)
		return 0;
	return *v & 1;
}

SEC("tracepoint/syscalls/sys_enter_getpid")
int has_global_pointer_args(void *ctx)
{
	__u32 zero = 0;
	__u64 *v = bpf_map_lookup_elem(&feature_value, &zero);

	return v ? global_reads(v) : 0;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
