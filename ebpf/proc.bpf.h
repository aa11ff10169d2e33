/* SPDX-License-Identifier: GPL-2.0-only OR MIT */
/*
 * Processes: a traced server's new workers, and a server started under a --comm name, are
 * traced from birth, not from userspace's next once-a-second /proc scan.
 *
 *   sched_process_fork (tp_btf): a traced process's child is traced; userspace is woken
 *                                (HS_REC_FORK): the child shares its parent's libssl, which
 *                                then gets uprobes for every process that maps it, so a
 *                                child serving at once is covered from birth
 *   sched_process_exec (tp_btf): a process exec'ing the --comm name is traced
 */
#ifndef HSTRACE_PROC_BPF_H
#define HSTRACE_PROC_BPF_H

#include "conn.bpf.h"

SEC("tp_btf/sched_process_fork")
int BPF_PROG(process_fork, struct task_struct *parent, struct task_struct *child)
{
	__u32 ptgid = parent->tgid, ctgid = child->tgid;
	struct hs_fork f = { .rec = HS_REC_FORK, .tgid = ctgid, .parent = ptgid };
	__u8 one = 1;

	/* a traced master's new worker is traced from its first accept */
	if (ctgid != ptgid && tgid_traced(ptgid)) {
		bpf_map_update_elem(&traced_tgids, &ctgid, &one, BPF_ANY);
		bpf_ringbuf_output(&events, &f, sizeof(f), BPF_RB_FORCE_WAKEUP);
	}
	return 0;
}

/* A process selected by name (--comm) is traced from its exec, not from the next /proc
 * scan: a server started again accepts its first connections within that second. */
SEC("tp_btf/sched_process_exec")
int BPF_PROG(process_exec, struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
{
	char comm[16];
	__u32 tgid = p->tgid;
	__u8 one = 1;

	if (!targ_comm[0])
		return 0;
	/* the new program's name is already set */
	bpf_get_current_comm(comm, sizeof(comm));
	for (int i = 0; i < sizeof(comm); i++) {
		if (comm[i] != targ_comm[i])
			return 0;
		if (!comm[i])
			break;
	}
	bpf_map_update_elem(&traced_tgids, &tgid, &one, BPF_ANY);
	return 0;
}

#endif
