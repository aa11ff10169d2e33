/* SPDX-License-Identifier: GPL-2.0-only OR MIT */
/*
 * The current thread, read from its task rather than hooked: the syscall it is in and that
 * call's arguments (its saved user registers), and the socket behind one of its process's
 * fds. The socket-layer hooks find a read's or write's buffer this way (io.bpf.h), accept
 * the socket of the fd it returns, and a state change the server's own close() (tcp.bpf.h).
 */
#ifndef HSTRACE_TASK_BPF_H
#define HSTRACE_TASK_BPF_H

#define S_IFMT 00170000
#define S_IFSOCK 0140000

/* The syscall a thread is in, and its arguments, from its saved user registers
 * (bpf_task_pt_regs; BTF-typed, so plain loads, but in the HS_BASIC build). */
#if defined(__TARGET_ARCH_x86)
#define SYSCALL_NR(regs) HS_KREAD(regs, orig_ax)
#define SYSCALL_ARG1(regs) HS_KREAD(regs, di)
#define SYSCALL_ARG2(regs) HS_KREAD(regs, si)
#define SYSCALL_ARG3(regs) HS_KREAD(regs, dx)
#define NR_read 0
#define NR_write 1
#define NR_close 3
#define NR_readv 19
#define NR_writev 20
#define NR_sendto 44
#define NR_recvfrom 45
#define NR_sendmsg 46
#define NR_recvmsg 47
#elif defined(__TARGET_ARCH_arm64)
#define SYSCALL_NR(regs) HS_KREAD(regs, syscallno)
#define SYSCALL_ARG1(regs) HS_KREAD(regs, orig_x0)
#define SYSCALL_ARG2(regs) HS_KREAD(regs, regs[1])
#define SYSCALL_ARG3(regs) HS_KREAD(regs, regs[2])
#define NR_read 63
#define NR_write 64
#define NR_close 57
#define NR_readv 65
#define NR_writev 66
#define NR_sendto 206
#define NR_recvfrom 207
#define NR_sendmsg 211
#define NR_recvmsg 212
#else
#error "syscall numbers for this architecture"
#endif

#ifdef HS_BASIC
/* No bpf_task_pt_regs (before 5.15): the registers are saved at the top of the thread's
 * kernel stack (task_pt_regs; THREAD_SIZE is 16 KiB on x86-64 and arm64 without KASAN).
 * x86-64 kernels with FRED (6.9+) leave 16 bytes above them: where the user code segment
 * (__USER_CS) is not in place, they are looked for there. */
#define HS_THREAD_SIZE (16 * 1024)
static __always_inline struct pt_regs *user_regs(void)
{
	__u64 top = (__u64)BPF_CORE_READ(hs_task(), stack) + HS_THREAD_SIZE;
	struct pt_regs *regs = (struct pt_regs *)top - 1;

#if defined(__TARGET_ARCH_x86)
	if ((__u16)BPF_CORE_READ(regs, cs) != 0x33)
		regs = (struct pt_regs *)(top - 16) - 1;
#endif
	return regs;
}
#else
static __always_inline struct pt_regs *user_regs(void)
{
	return (struct pt_regs *)bpf_task_pt_regs(bpf_get_current_task_btf());
}
#endif

/* The struct sock behind fd `fd` of the current process, or NULL. `is_socket`: the fd is
 * known to be a socket (accept just returned it), so its file's mode is not checked. The
 * task's fields are BTF loads; the fd array and the file are read by helper calls. */
static __always_inline struct sock *sock_from_fd(__u32 fd, int is_socket)
{
	struct fdtable *fdt = HS_KREAD2(hs_task(), files, fdt);
	struct file **fdarr, *file = NULL;
	struct socket *sock = NULL;
	struct sock *sk = NULL;

	if (!fdt || fd >= HS_KREAD(fdt, max_fds))
		return NULL;
	fdarr = HS_KREAD(fdt, fd);
	if (bpf_probe_read_kernel(&file, sizeof(file), &fdarr[fd]) || !file)
		return NULL;
	if (!is_socket && (BPF_CORE_READ(file, f_inode, i_mode) & S_IFMT) != S_IFSOCK)
		return NULL;
	if (bpf_core_read(&sock, sizeof(sock), &file->private_data) || !sock)
		return NULL;
	bpf_core_read(&sk, sizeof(sk), &sock->sk);
	return sk;
}

/* The key of the `fds` map: tgid << 32 | fd. */
static __always_inline __u64 fd_key(__u32 tgid, __u32 fd)
{
	return ((__u64)tgid << 32) | fd;
}

#endif
