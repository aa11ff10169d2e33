// SPDX-License-Identifier: GPL-2.0-only OR MIT
/*
 * hstrace's BPF programs, one object. Every hook is listed, with its alternatives,
 * in userspace/src/probes.rs; the hooks here only feed the per-connection state of
 * conn.bpf.h and the record-stream parser of wire.bpf.h.
 *
 *   TCP:      inet_sock_set_state (ESTABLISHED; FIN_WAIT1, LAST_ACK, CLOSE: the end),
 *             tcp_destroy_sock (the end, if no state change told it), sk_data_ready (arrival)
 *   accept:   syscalls:sys_exit_accept4/accept | fexit or kretprobe inet_csk_accept
 *   I/O:      sock:sock_recv_length (in), sock:sock_send_length (out), buffers from the
 *             syscall's arguments | syscalls read/readv/recvfrom/recvmsg (in),
 *             write/writev/sendto/sendmsg (out) | fentry or kprobe tcp_sendmsg (out)
 *   process:  tp_btf sched_process_fork (a traced master's new workers)
 *   OpenSSL:  uprobe + uretprobe SSL_do_handshake
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>

#include "conn.bpf.h"
#include "wire.bpf.h"

/* GPL-compatible for the kernel (the GPL-only helpers); see ebpf/LICENSE */
char LICENSE[] SEC("license") = "Dual MIT/GPL";

#define S_IFMT 00170000
#define S_IFSOCK 0140000

/* The syscall a thread is in, and its arguments, from its saved user registers
 * (bpf_task_pt_regs; BTF-typed, so plain loads). */
#if defined(__TARGET_ARCH_x86)
#define SYSCALL_NR(regs) ((regs)->orig_ax)
#define SYSCALL_ARG1(regs) ((regs)->di)
#define SYSCALL_ARG2(regs) ((regs)->si)
#define SYSCALL_ARG3(regs) ((regs)->dx)
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
#define SYSCALL_NR(regs) ((regs)->syscallno)
#define SYSCALL_ARG1(regs) ((regs)->orig_x0)
#define SYSCALL_ARG2(regs) ((regs)->regs[1])
#define SYSCALL_ARG3(regs) ((regs)->regs[2])
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

static __always_inline struct pt_regs *user_regs(void)
{
	return (struct pt_regs *)bpf_task_pt_regs(bpf_get_current_task_btf());
}

/* ---- sockets and accept ---------------------------------------------------------- */

/* The struct sock behind fd `fd` of the current process, or NULL. `is_socket`: the fd is
 * known to be a socket (accept just returned it), so its file's mode is not checked. The
 * task's fields are BTF loads; the fd array and the file are read by helper calls. */
static __always_inline struct sock *sock_from_fd(__u32 fd, int is_socket)
{
	struct fdtable *fdt = bpf_get_current_task_btf()->files->fdt;
	struct file **fdarr, *file = NULL;
	struct socket *sock = NULL;
	struct sock *sk = NULL;

	if (!fdt || fd >= fdt->max_fds)
		return NULL;
	fdarr = fdt->fd;
	if (bpf_probe_read_kernel(&file, sizeof(file), &fdarr[fd]) || !file)
		return NULL;
	if (!is_socket && (BPF_CORE_READ(file, f_inode, i_mode) & S_IFMT) != S_IFSOCK)
		return NULL;
	if (bpf_core_read(&sock, sizeof(sock), &file->private_data) || !sock)
		return NULL;
	bpf_core_read(&sk, sizeof(sk), &sock->sk);
	return sk;
}

static __always_inline __u64 fd_key(__u32 tgid, __u32 fd)
{
	return ((__u64)tgid << 32) | fd;
}

/* Does this accept belong to a traced process? (With no selector, every process that
 * accepts is.) */
static __always_inline int accept_traced(__u32 tgid)
{
	return targ_all || tgid_traced(tgid);
}

/* A socket's local port as inet_sport keeps it, past struct sock (a helper call): where
 * a close, or a reset, has cleared skc_num (inet_put_port). */
static __always_inline __u16 released_port(const struct sock *sk)
{
	return bpf_ntohs(BPF_CORE_READ((struct inet_sock *)sk, inet_sport));
}

/* A socket's local port: skc_num (a plain load) until a close clears it (by the time the
 * tracepoints fire for TCP_CLOSE and the socket's destruction); then released_port. */
static __always_inline __u16 local_port(const struct sock *sk)
{
	__u16 port = sk->__sk_common.skc_num;

	return port ? port : released_port(sk);
}

/* A connection's entry as the handshake's last ACK left it (in the accept queue, no
 * process yet); or, for a socket whose handshake was not seen (established before hstrace
 * attached, or the table was full then), one built now from the socket. NULL: not a
 * connection to trace. */
static __always_inline struct hs_conn_state *queued_conn(struct sock *sk, __u64 skey)
{
	struct hs_conn_state *c = bpf_map_lookup_elem(&conns, &skey);
	struct conn_addrs a = {};

	/* (an accepted connection's entry on this socket is one whose end was missed: the
	 * socket's memory is a new connection's now) */
	if (c && !c->r.t_accept)
		return c;
	/* (by helper reads: this socket pointer is not BTF-typed; a socket reset in the
	 * accept queue has released its port) */
	a.sport = BPF_CORE_READ(sk, __sk_common.skc_num);
	if (!a.sport)
		a.sport = released_port(sk);
	/* --port with no --pid follows every process's accepts: another port's leave here,
	 * before anything is built */
	if (targ_port && a.sport != targ_port)
		return NULL;
	a.family = BPF_CORE_READ(sk, __sk_common.skc_family);
	if (a.family != AF_INET && a.family != AF_INET6)
		return NULL;
	if (BPF_CORE_READ(sk, sk_protocol) != IPPROTO_TCP)
		return NULL;
	a.dport = bpf_ntohs(BPF_CORE_READ(sk, __sk_common.skc_dport));
	if (a.family == AF_INET) {
		bpf_core_read(a.saddr, 4, &sk->__sk_common.skc_rcv_saddr);
		bpf_core_read(a.daddr, 4, &sk->__sk_common.skc_daddr);
	} else {
		bpf_core_read(a.saddr, 16, &sk->__sk_common.skc_v6_rcv_saddr);
		bpf_core_read(a.daddr, 16, &sk->__sk_common.skc_v6_daddr);
	}
	/* (its port marked: for a connection established before hstrace attached too) */
	c = new_conn(HS_SCRATCH_ACCEPT, &a);
	if (!c)
		return NULL;
	/* a full table (userspace's sweep keeps room by evicting idle connections): counted,
	 * not tracked */
	if (bpf_map_update_elem(&conns, &skey, c, BPF_ANY)) {
		count(HS_C_ACCEPTED);
		count(HS_C_TABLE_FULL);
		return NULL;
	}
	return bpf_map_lookup_elem(&conns, &skey);
}

/* Traced process `tgid` accepted `sk` (as `fd`, or -1 when accept is hooked in the
 * kernel): the entry its handshake's last ACK made gets its process. */
static __always_inline void on_accept(struct sock *sk, int fd, __u32 tgid)
{
	__u64 skey = (__u64)sk, fkey;
	struct hs_conn_state *c;

	if (!sk) {
		count(HS_C_ACCEPTED);
		count(HS_C_NO_SOCK);
		return;
	}
	c = queued_conn(sk, skey);
	if (!c)
		return;
	count(HS_C_ACCEPTED);
	c->r.conn_id = __sync_fetch_and_add(&next_conn_id, 1) + 1;
	c->r.tgid = tgid;
	bpf_get_current_comm(c->r.comm, sizeof(c->r.comm));
	/* the fd, only while some hook reads the fds table: a connection has an fds entry
	 * exactly when its fkey is set */
	if (fd >= 0 && fds_used()) {
		fkey = fd_key(tgid, fd);
		c->fkey = fkey;
		bpf_map_update_elem(&fds, &fkey, &skey, BPF_ANY);
	}
	/* last: from here on the entry is an accepted connection's */
	c->r.t_accept = bpf_ktime_get_ns();
	if (targ_all && !tgid_traced(tgid)) {
		__u8 one = 1;
		bpf_map_update_elem(&traced_tgids, &tgid, &one, BPF_ANY);
	}
	count(HS_C_CONNS);
}

/* Socket `skey` left the accept queue to a process hstrace does not trace, or closed in
 * it: forget its entry. */
static __always_inline void forget_queued(__u64 skey)
{
	struct hs_conn_state *c = skey ? bpf_map_lookup_elem(&conns, &skey) : NULL;

	if (c && !c->r.t_accept)
		bpf_map_delete_elem(&conns, &skey);
}

/* accept() returned `ret`: the new fd, or an error. Under --pid or --comm another
 * process may accept on a selected port (a worker left out, a server in another network
 * namespace on the same port number): its socket's est entry goes too, or it would stay
 * until the connection closes. (With no selector, or --port alone, every process that
 * accepts is traced.) */
static __always_inline int on_accept_fd(long ret)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;

	if (ret < 0)
		return 0;
	if (accept_traced(tgid))
		on_accept(sock_from_fd(ret, 1), ret, tgid);
	else
		forget_queued((__u64)sock_from_fd(ret, 1));
	return 0;
}

/* accept() returned socket `newsk` (hooked in the kernel: its fd is learned later). */
static __always_inline int on_accept_sock(struct sock *newsk)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;

	if (accept_traced(tgid))
		on_accept(newsk, -1, tgid);
	else
		forget_queued((__u64)newsk);
	return 0;
}

SEC("tracepoint/syscalls/sys_exit_accept4")
int accept4_exit(struct trace_event_raw_sys_exit *ctx) { return on_accept_fd(ctx->ret); }
SEC("tracepoint/syscalls/sys_exit_accept")
int accept_exit(struct trace_event_raw_sys_exit *ctx) { return on_accept_fd(ctx->ret); }

SEC("fexit/inet_csk_accept")
int BPF_PROG(accept_fexit, struct sock *sk, struct proto_accept_arg *arg, struct sock *newsk)
{
	return on_accept_sock(newsk);
}

SEC("kretprobe/inet_csk_accept")
int BPF_KRETPROBE(accept_kretprobe, struct sock *newsk)
{
	return on_accept_sock(newsk);
}

/* ---- TCP state and arrival ------------------------------------------------------- */

/* The thread is in close() of the process that accepted connection `c`: a state change
 * now is the server letting go of it (its FIN, or its reset over unread bytes). */
static __always_inline int server_closing(struct hs_conn_state *c)
{
	return (bpf_get_current_pid_tgid() >> 32) == c->r.tgid && SYSCALL_NR(user_regs()) == NR_close;
}

/* A server's child socket `sk` finished the three-way handshake (`fresh` holds its
 * addresses): it waits in the accept queue from now, its connection's entry made (no
 * process yet: t_accept 0) so that accept, its arrivals and its state changes all find
 * the one entry. `btf`: `sk` is BTF-typed (its fields are plain loads). */
static __always_inline void on_established(const struct sock *sk, struct conn_addrs *fresh, int btf)
{
	__u64 skey = (__u64)sk;
	struct hs_conn_state *c;

	/* other servers' connections are not waited for */
	if (!port_selected(fresh->sport))
		return;
	/* a TCP Fast Open child can be accepted before the handshake's last ACK: then accept
	 * has built its connection already, and an entry now would outlive it */
	if (btf ? sk->sk_socket != NULL : BPF_CORE_READ(sk, sk_socket) != NULL)
		return;
	c = new_conn(HS_SCRATCH_ESTABLISHED, fresh);
	if (!c)
		return;
	c->r.flags = HS_F_EST_SEEN;
	c->r.t_est = bpf_ktime_get_ns();
	/* a full table: accept builds the entry, without t_est, if there is room then */
	if (bpf_map_update_elem(&conns, &skey, c, BPF_ANY))
		count(HS_C_EST_FULL);
}

static __always_inline int is_established(int oldstate, int newstate)
{
	return newstate == TCP_ESTABLISHED && oldstate == TCP_SYN_RECV;
}

static __always_inline void on_set_state(struct sock *sk, int oldstate, int newstate, __u16 sport)
{
	__u64 skey = (__u64)sk;
	struct hs_conn_state *c;

	/* a new server (or one started again): userspace's next scan finds its process */
	if (newstate == TCP_LISTEN) {
		count(HS_C_LISTENS);
		return;
	}
	/* clients' sockets (and every other one on the host) leave here */
	if (!is_server_port(sport))
		return;
	if (newstate == TCP_CLOSE_WAIT) {
		c = bpf_map_lookup_elem(&conns, &skey);
		if (c)
			c->r.flags |= HS_F_PEER_FIN;
		return;
	}
	if (newstate != TCP_FIN_WAIT1 && newstate != TCP_LAST_ACK && newstate != TCP_CLOSE)
		return;
	c = bpf_map_lookup_elem(&conns, &skey);
	if (!c)
		return;
	if (!c->r.t_accept) {
		/* Closed in the accept queue: nothing accepted it, nothing to report (accept
		 * may still return the socket: it then builds the entry anew). Accept grafts
		 * the socket to its fd under the socket's lock, which this runs under: once
		 * grafted, the entry is accept's to fill, and the connection ends like any
		 * accepted one. */
		if (newstate != TCP_CLOSE)
			return;
		if (!BPF_CORE_READ(sk, sk_socket))
			bpf_map_delete_elem(&conns, &skey);
		else if (oldstate == TCP_ESTABLISHED)
			c->r.flags |= HS_F_PEER_RESET;
		return;
	}
	/* the server's close() ends the connection */
	if (server_closing(c)) {
		end_conn(c, skey);
		return;
	}
	if (newstate != TCP_CLOSE)
		return; /* shutdown(): the server may still read */
	/* straight from ESTABLISHED: a reset, no FIN came first */
	if (oldstate == TCP_ESTABLISHED)
		c->r.flags |= HS_F_PEER_RESET;
	/* While the server holds the fd it may still read what was queued, and on loopback
	 * a reset can land inside the server's own write: its close() (the socket's
	 * destruction, below) ends the connection. Only a socket the server already let go
	 * of ends here. */
	if (BPF_CORE_READ(sk, sk_socket))
		return;
	end_conn(c, skey);
}

SEC("tp_btf/inet_sock_set_state")
int BPF_PROG(set_state_btf, const struct sock *sk, const int oldstate, const int newstate)
{
	const struct sock_common *skc = &sk->__sk_common;

	if (sk->sk_protocol != IPPROTO_TCP)
		return 0;
	if (is_established(oldstate, newstate)) {
		struct conn_addrs fresh = { .family = skc->skc_family, .sport = skc->skc_num,
				     .dport = bpf_ntohs(skc->skc_dport) };
		__u32 *s = (__u32 *)fresh.saddr, *d = (__u32 *)fresh.daddr;

		if (fresh.family == AF_INET) {
			s[0] = skc->skc_rcv_saddr;
			d[0] = skc->skc_daddr;
		} else {
			for (int i = 0; i < 4; i++) {
				s[i] = skc->skc_v6_rcv_saddr.in6_u.u6_addr32[i];
				d[i] = skc->skc_v6_daddr.in6_u.u6_addr32[i];
			}
		}
		on_established(sk, &fresh, 1);
		return 0;
	}
	on_set_state((struct sock *)sk, oldstate, newstate, local_port(sk));
	return 0;
}

SEC("tracepoint/sock/inet_sock_set_state")
int sock_set_state(struct trace_event_raw_inet_sock_set_state *ctx)
{
	if (ctx->protocol != IPPROTO_TCP)
		return 0;
	if (is_established(ctx->oldstate, ctx->newstate)) {
		struct conn_addrs fresh = { .family = ctx->family, .sport = ctx->sport, .dport = ctx->dport };

		__u32 *s = (__u32 *)fresh.saddr, *d = (__u32 *)fresh.daddr;

		/* one load per word at a constant offset: the verifier refuses a load through
		 * a ctx pointer moved first (which a memcpy compiles to) */
		if (fresh.family == AF_INET) {
			s[0] = *(__u32 *)ctx->saddr;
			d[0] = *(__u32 *)ctx->daddr;
		} else {
			s[0] = *(__u32 *)&ctx->saddr_v6[0];
			s[1] = *(__u32 *)&ctx->saddr_v6[4];
			s[2] = *(__u32 *)&ctx->saddr_v6[8];
			s[3] = *(__u32 *)&ctx->saddr_v6[12];
			d[0] = *(__u32 *)&ctx->daddr_v6[0];
			d[1] = *(__u32 *)&ctx->daddr_v6[4];
			d[2] = *(__u32 *)&ctx->daddr_v6[8];
			d[3] = *(__u32 *)&ctx->daddr_v6[12];
		}
		/* the copy above stays a copy: later reads of `fresh` are of the stack, not
		 * through a ctx pointer the compiler moved */
		asm volatile("" : : "r"(&fresh) : "memory");
		on_established((const struct sock *)ctx->skaddr, &fresh, 0);
		return 0;
	}
	on_set_state((struct sock *)ctx->skaddr, ctx->oldstate, ctx->newstate, ctx->sport);
	return 0;
}

/* The socket is destroyed: the last moment a connection ends (the server closed a socket
 * a reset had already closed, or let go of it without a state change seen above). */
static __always_inline void on_destroy(__u64 skey)
{
	struct hs_conn_state *c = bpf_map_lookup_elem(&conns, &skey);

	if (!c)
		return;
	/* (destroyed in the accept queue: nothing accepted it, nothing to report) */
	if (!c->r.t_accept) {
		bpf_map_delete_elem(&conns, &skey);
		return;
	}
	end_conn(c, skey);
}

/* (clients' sockets, and every other one on the host, leave at the port: skc_num, or
 * inet_sport once a close has cleared it) */
SEC("tp_btf/tcp_destroy_sock")
int BPF_PROG(destroy_btf, struct sock *sk)
{
	if (is_server_port(local_port(sk)))
		on_destroy((__u64)sk);
	return 0;
}

SEC("tracepoint/tcp/tcp_destroy_sock")
int tcp_destroy(struct trace_event_raw_tcp_event_sk *ctx)
{
	if (is_server_port(ctx->sport))
		on_destroy((__u64)ctx->skaddr);
	return 0;
}

/* Arrival `t` was just stored in `c->arrive_pending`: if the server has meanwhile begun
 * reading the handshake's client flight those bytes belong to (it found no arrival:
 * `arrival_missed`), take it back, or it would stand for the next flight's. The read's own
 * time stands for this arrival (see on_transfer). Once the handshake is done, an arrival
 * is the request's, whatever the last flight's read found. */
static __always_inline void arrival_raced_read(struct hs_conn_state *c, __u64 t)
{
	__s8 f = c->flight;

	if (f >= 0 && flight_dir(f) == HS_DIR_IN && c->arrival_missed &&
	    c->r.phase == HS_PH_HANDSHAKE)
		__sync_val_compare_and_swap(&c->arrive_pending, t, 0);
}

/* Bytes were queued on socket `skey` (local port `port`): the first since the server last
 * read is when they arrived. Runs in the sender's context on loopback: match the socket,
 * not the process. (A listening socket's readiness is a new connection in its accept
 * queue, once a connection: it leaves before the two lookups that would miss.) */
static __always_inline void on_data_ready(__u64 skey, __u16 port, int listening)
{
	struct hs_conn_state *c;
	__u64 now;

	if (!arrivals_hooked)
		arrivals_hooked = 1;
	if (listening || !is_server_port(port))
		return;
	/* (a socket still in the accept queue has its entry too: its first bytes' arrival
	 * waits there for the first read) */
	c = bpf_map_lookup_elem(&conns, &skey);
	if (!c || c->arrive_pending || c->r.phase == HS_PH_DONE)
		return;
	now = bpf_ktime_get_ns();
	if (!__sync_val_compare_and_swap(&c->arrive_pending, 0, now))
		arrival_raced_read(c, now);
}

/* BTF-typed: the socket's fields are plain loads, not helper calls */
SEC("tp_btf/sk_data_ready")
int BPF_PROG(data_ready_btf, const struct sock *sk)
{
	__u16 port = sk->__sk_common.skc_num;

	/* the port before sk_protocol, which is on a cache line of its own: any other
	 * socket's arrival only tells on_data_ready that the hook runs */
	if (!is_server_port(port) || sk->sk_protocol == IPPROTO_TCP)
		on_data_ready((__u64)sk, port, sk->__sk_common.skc_state == TCP_LISTEN);
	return 0;
}

SEC("tracepoint/sock/sk_data_ready")
int sock_data_ready(struct trace_event_raw_sk_data_ready *ctx)
{
	const struct sock *sk = (const struct sock *)ctx->skaddr;
	__u16 port;

	if (ctx->protocol != IPPROTO_TCP)
		return 0;
	/* (the state by a helper call too: only for a server's port) */
	port = BPF_CORE_READ(sk, __sk_common.skc_num);
	on_data_ready((__u64)sk, port,
		      is_server_port(port) && BPF_CORE_READ(sk, __sk_common.skc_state) == TCP_LISTEN);
	return 0;
}

/* (tcp_data_ready queues bytes: never a listener's) */
SEC("fentry/tcp_data_ready")
int BPF_PROG(data_ready_fentry, struct sock *sk)
{
	on_data_ready((__u64)sk, sk->__sk_common.skc_num, 0);
	return 0;
}

SEC("kprobe/tcp_data_ready")
int BPF_KPROBE(data_ready_kprobe, struct sock *sk)
{
	on_data_ready((__u64)sk, BPF_CORE_READ(sk, __sk_common.skc_num), 0);
	return 0;
}

/* ---- bytes on a connection ------------------------------------------------------ */

/* The call's buffer was not looked up: the bytes lie inside a record body the parser
 * passes over (wants_bytes). */
#define HS_PTR_UNREAD (~0ULL)

/* Bytes moved on traced connection `c` (socket `skey`), `ptr` the call's buffer (an iovec
 * array if `iovcnt`; 0: a call whose buffer is not known; HS_PTR_UNREAD: not needed):
 * parse them. */
static __always_inline void on_conn_io(struct hs_conn_state *c, __u64 skey, __u32 dir, long ret, __u64 ptr,
				       __u32 iovcnt, __u32 peek, __u64 now)
{
	struct ssl_call *sc;
	int new_flight;
	__u32 tid, slot;

	/* inside SSL_do_handshake: that call belongs to this connection (once an SSL object
	 * is tied to it, its calls are found by the object) */
	if (targ_uprobes && c->r.phase == HS_PH_HANDSHAKE && !c->ssl) {
		tid = (__u32)bpf_get_current_pid_tgid();
		slot = tid % HS_IO_SLOTS;
		sc = bpf_map_lookup_elem(&ssl_in_flight, &slot);
		if (sc && sc->tid == tid) {
			sc->sk = skey;
			c->r.flags |= HS_F_UPROBE;
		}
	}
	if (dir == HS_DIR_IN && !peek)
		on_read_attempt(c, now);
	if (ret <= 0 || peek) {
		if (dir == HS_DIR_IN && ret == 0)
			c->r.flags |= HS_F_READ_EOF;
		if (ret == -ECONNRESET || ret == -EPIPE)
			c->r.flags |= HS_F_READ_RESET;
		return;
	}
	if (dir == HS_DIR_OUT && answers_early_request(c))
		wire_done(c, c->r.t_last[HS_FL_S1]);
	new_flight = on_transfer(c, dir, ret, now);
	/* once the handshake is done and the first request read, only bytes and exchanges
	 * are counted: the records have nothing more to say */
	if (c->r.phase != HS_PH_DONE && !(c->wire_done && c->r.t_req_read) && !c->st[dir & 1].desync) {
		if (ptr == HS_PTR_UNREAD)
			pass_over(c, dir, ret, now);
		else if (!ptr)
			desync(c, dir); /* bytes hstrace cannot see (sendfile, io_uring) */
		else if (iovcnt)
			parse_iov(c, dir, (const struct iovec *)ptr, iovcnt, ret, now);
		else
			parse_bytes(c, dir, ptr, ret, now);
	}
	on_exchange(c, dir, new_flight, ptr, iovcnt, now);
}

/* The same, for socket `skey` (its state may be gone: the connection ended). */
static __always_inline void on_io(__u64 skey, __u32 dir, long ret, __u64 ptr, __u32 iovcnt,
				  __u32 peek, __u64 now)
{
	struct hs_conn_state *c = bpf_map_lookup_elem(&conns, &skey);

	if (c)
		on_conn_io(c, skey, dir, ret, ptr, iovcnt, peek, now);
}

/* ---- reads and writes at the socket layer ---------------------------------------- */

/* A MSG_PEEK leaves the bytes in the socket for the real read (nginx peeks at the first
 * byte to tell TLS from plain HTTP): not a read of the stream, but it can see its end. */
#define MSG_PEEK 2

/* The buffer of the read- or write-family syscall the thread is in (`*iovcnt` set when it
 * is an iovec array); 0 for any other call: sendfile, splice, io_uring. */
static __always_inline __u64 call_buffer(struct pt_regs *regs, __u32 *iovcnt)
{
	struct user_msghdr m;

	switch (SYSCALL_NR(regs)) {
	case NR_read:
	case NR_write:
	case NR_recvfrom:
	case NR_sendto:
		return SYSCALL_ARG2(regs);
	case NR_readv:
	case NR_writev:
		*iovcnt = SYSCALL_ARG3(regs);
		return SYSCALL_ARG2(regs);
	case NR_recvmsg:
	case NR_sendmsg:
		if (bpf_probe_read_user(&m, sizeof(m), (const void *)SYSCALL_ARG2(regs)))
			return 0;
		*iovcnt = m.msg_iovlen ? m.msg_iovlen : 1;
		return (__u64)m.msg_iov;
	default:
		return 0;
	}
}

/* The time of a call, or 0 for one that keeps none: a peek, or a call that moved nothing
 * (nginx makes four a handshake: a MSG_PEEK and three EAGAIN reads). A read attempt that
 * ends a response reads the clock itself (on_read_attempt). */
static __always_inline __u64 call_time(int ret, __u32 peek)
{
	return peek || ret <= 0 ? 0 : bpf_ktime_get_ns();
}

/* sock:sock_recv_length and sock:sock_send_length fire inside every socket read and write
 * with the socket, the result and the flags; the buffer is found in the arguments of the
 * syscall the thread is in (its saved user registers). Tracepoints outside the syscall
 * path cost other processes nothing, where a syscall tracepoint is paid by every read and
 * write on the host. */
static __always_inline void on_sock_call(struct sock *sk, __u32 dir, int ret, int flags)
{
	__u16 family = sk->__sk_common.skc_family, port = sk->__sk_common.skc_num;
	__u64 skey = (__u64)sk, ptr = 0, now = 0;
	__u32 iovcnt = 0, peek;
	struct pt_regs *regs;
	struct hs_conn_state *c;

	/* TCP sockets on ports that never accepted a connection leave before any lookup
	 * (port 0: a reset already released the port, and the server still reads what came
	 * before it) */
	if ((family != AF_INET && family != AF_INET6) || (port && !is_server_port(port)) ||
	    sk->sk_protocol != IPPROTO_TCP)
		return;
	c = bpf_map_lookup_elem(&conns, &skey);
	if (!c)
		return;
	peek = dir == HS_DIR_IN && (flags & MSG_PEEK);
	/* after the record is sent only bytes and exchanges are counted: no clock, and the
	 * buffer only for the read that opens a TLS client flight (its first record header;
	 * plain text has none: every client flight is a request) */
	if (c->r.phase == HS_PH_DONE) {
		if (dir == HS_DIR_IN && ret > 0 && !peek && !c->not_tls &&
		    flight_dir(c->flight) != HS_DIR_IN)
			ptr = call_buffer(user_regs(), &iovcnt);
	} else if (!targ_lazy_fd && !wants_bytes(c, dir, ret, peek)) {
		/* the syscall's buffer only when the parser reads these bytes (or the fd is
		 * wanted): not for a failed or peeking read, nor for bytes inside a record body
		 * it passes over */
		ptr = HS_PTR_UNREAD;
		now = call_time(ret, peek);
	} else {
		regs = user_regs();
		ptr = call_buffer(regs, &iovcnt);
		/* accept was hooked in the kernel: the connection's fd is the one this call
		 * names */
		if (targ_lazy_fd && ptr && !c->fkey && fds_used()) {
			__u64 fkey = fd_key(bpf_get_current_pid_tgid() >> 32, SYSCALL_ARG1(regs));

			c->fkey = fkey;
			bpf_map_update_elem(&fds, &fkey, &skey, BPF_ANY);
		}
		now = call_time(ret, peek);
	}
	/* (one call site: the connection's logic is in the program once) */
	on_conn_io(c, skey, dir, ret, ptr, iovcnt, peek, now);
}

SEC("tp_btf/sock_recv_length")
int BPF_PROG(sock_recv, struct sock *sk, int ret, int flags)
{
	on_sock_call(sk, HS_DIR_IN, ret, flags);
	return 0;
}

SEC("tp_btf/sock_send_length")
int BPF_PROG(sock_send, struct sock *sk, int ret, int flags)
{
	on_sock_call(sk, HS_DIR_OUT, ret, flags);
	return 0;
}

/* ---- reads and writes at the syscall (kernels without the socket tracepoints) ------- */


/* The traced connection on fd `fd` of process `tgid`, or 0. */
static __always_inline __u64 conn_sock(__u32 tgid, __u32 fd)
{
	__u64 fkey = fd_key(tgid, fd), skey;
	__u64 *sk = bpf_map_lookup_elem(&fds, &fkey);
	struct hs_conn_state *c;

	if (sk)
		return *sk;
	if (!targ_lazy_fd)
		return 0;
	/* accept was hooked in the kernel: learn which socket this fd is, once */
	skey = (__u64)sock_from_fd(fd, 0);
	c = skey ? bpf_map_lookup_elem(&conns, &skey) : NULL;
	if (c)
		c->fkey = fkey;
	else
		skey = 0;
	bpf_map_update_elem(&fds, &fkey, &skey, BPF_ANY);
	return skey;
}

static __always_inline int io_enter_peek(__u32 fd, __u64 ptr, __u32 iovcnt, __u32 peek)
{
	__u64 id = bpf_get_current_pid_tgid(), skey;
	__u32 tgid = id >> 32, tid = id, slot = tid % HS_IO_SLOTS;
	struct io_args *a;

	/* leave early for processes and fds that are not traced */
	if (!tgid_traced(tgid) || !(skey = conn_sock(tgid, fd)))
		return 0;
	a = bpf_map_lookup_elem(&io_in_flight, &slot);
	if (!a)
		return 0;
	take_slot(a->tid, tid);
	a->skey = skey;
	a->ptr = ptr;
	a->iovcnt = iovcnt;
	a->peek = peek;
	a->tid = tid;
	return 0;
}

static __always_inline int io_enter(__u32 fd, __u64 ptr, __u32 iovcnt)
{
	return io_enter_peek(fd, ptr, iovcnt, 0);
}

static __always_inline int io_exit(__u32 dir, long ret)
{
	__u32 tid = bpf_get_current_pid_tgid(), slot = tid % HS_IO_SLOTS;
	struct io_args *ap, a;

	ap = bpf_map_lookup_elem(&io_in_flight, &slot);
	if (!ap || ap->tid != tid)
		return 0;
	a = *ap;
	ap->tid = 0;
	on_io(a.skey, dir, ret, a.ptr, a.iovcnt, a.peek, bpf_ktime_get_ns());
	return 0;
}

/* msghdr-based calls: the iovec array is in the user's msghdr */
static __always_inline int io_enter_msg(__u32 fd, const struct user_msghdr *msg, __u32 peek)
{
	struct user_msghdr m;

	if (!tgid_traced(bpf_get_current_pid_tgid() >> 32))
		return 0;
	if (bpf_probe_read_user(&m, sizeof(m), msg))
		return 0;
	return io_enter_peek(fd, (__u64)m.msg_iov, m.msg_iovlen ? m.msg_iovlen : 1, peek);
}

#define ARG(n) (ctx->args[n])

SEC("tracepoint/syscalls/sys_enter_read")
int read_enter(struct trace_event_raw_sys_enter *ctx) { return io_enter(ARG(0), ARG(1), 0); }
SEC("tracepoint/syscalls/sys_exit_read")
int read_exit(struct trace_event_raw_sys_exit *ctx) { return io_exit(HS_DIR_IN, ctx->ret); }
SEC("tracepoint/syscalls/sys_enter_readv")
int readv_enter(struct trace_event_raw_sys_enter *ctx) { return io_enter(ARG(0), ARG(1), ARG(2)); }
SEC("tracepoint/syscalls/sys_exit_readv")
int readv_exit(struct trace_event_raw_sys_exit *ctx) { return io_exit(HS_DIR_IN, ctx->ret); }
SEC("tracepoint/syscalls/sys_enter_recvfrom")
int recvfrom_enter(struct trace_event_raw_sys_enter *ctx)
{
	return io_enter_peek(ARG(0), ARG(1), 0, ARG(3) & MSG_PEEK);
}
SEC("tracepoint/syscalls/sys_exit_recvfrom")
int recvfrom_exit(struct trace_event_raw_sys_exit *ctx) { return io_exit(HS_DIR_IN, ctx->ret); }
SEC("tracepoint/syscalls/sys_enter_recvmsg")
int recvmsg_enter(struct trace_event_raw_sys_enter *ctx)
{
	return io_enter_msg(ARG(0), (const struct user_msghdr *)ARG(1), ARG(2) & MSG_PEEK);
}
SEC("tracepoint/syscalls/sys_exit_recvmsg")
int recvmsg_exit(struct trace_event_raw_sys_exit *ctx) { return io_exit(HS_DIR_IN, ctx->ret); }

SEC("tracepoint/syscalls/sys_enter_write")
int write_enter(struct trace_event_raw_sys_enter *ctx) { return io_enter(ARG(0), ARG(1), 0); }
SEC("tracepoint/syscalls/sys_exit_write")
int write_exit(struct trace_event_raw_sys_exit *ctx) { return io_exit(HS_DIR_OUT, ctx->ret); }
SEC("tracepoint/syscalls/sys_enter_writev")
int writev_enter(struct trace_event_raw_sys_enter *ctx) { return io_enter(ARG(0), ARG(1), ARG(2)); }
SEC("tracepoint/syscalls/sys_exit_writev")
int writev_exit(struct trace_event_raw_sys_exit *ctx) { return io_exit(HS_DIR_OUT, ctx->ret); }
SEC("tracepoint/syscalls/sys_enter_sendto")
int sendto_enter(struct trace_event_raw_sys_enter *ctx) { return io_enter(ARG(0), ARG(1), 0); }
SEC("tracepoint/syscalls/sys_exit_sendto")
int sendto_exit(struct trace_event_raw_sys_exit *ctx) { return io_exit(HS_DIR_OUT, ctx->ret); }
SEC("tracepoint/syscalls/sys_enter_sendmsg")
int sendmsg_enter(struct trace_event_raw_sys_enter *ctx)
{
	return io_enter_msg(ARG(0), (const struct user_msghdr *)ARG(1), 0);
}
SEC("tracepoint/syscalls/sys_exit_sendmsg")
int sendmsg_exit(struct trace_event_raw_sys_exit *ctx) { return io_exit(HS_DIR_OUT, ctx->ret); }

SEC("tracepoint/syscalls/sys_enter_close")
int close_enter(struct trace_event_raw_sys_enter *ctx)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	__u64 fkey = fd_key(tgid, ARG(0)), skey;
	struct hs_conn_state *c;
	__u64 *sk;

	if (!tgid_traced(tgid))
		return 0;
	sk = bpf_map_lookup_elem(&fds, &fkey);
	if (!sk)
		return 0;
	skey = *sk;
	/* the fd number may be reused for anything: forget it */
	bpf_map_delete_elem(&fds, &fkey);
	/* the server is done with the connection */
	c = skey ? bpf_map_lookup_elem(&conns, &skey) : NULL;
	if (c) {
		finish_conn(c, bpf_ktime_get_ns());
		bpf_map_delete_elem(&conns, &skey);
	}
	return 0;
}

/* Send hooked in the kernel (kernels without syscall tracepoints): the bytes are in
 * the msghdr's iov_iter, user memory for write/writev/send*. */
static __always_inline void on_tcp_sendmsg(struct sock *sk, struct msghdr *msg, __u64 size)
{
	__u64 skey = (__u64)sk, ptr;
	__u32 iovcnt = 0;
	__u8 type;

	if (!bpf_map_lookup_elem(&conns, &skey))
		return;
	type = BPF_CORE_READ(msg, msg_iter.iter_type);
	if (type == bpf_core_enum_value(enum iter_type, ITER_UBUF)) {
		ptr = (__u64)BPF_CORE_READ(msg, msg_iter.ubuf);
	} else if (type == bpf_core_enum_value(enum iter_type, ITER_IOVEC)) {
		ptr = (__u64)BPF_CORE_READ(msg, msg_iter.__iov);
		iovcnt = BPF_CORE_READ(msg, msg_iter.nr_segs);
	} else {
		return;
	}
	on_io(skey, HS_DIR_OUT, size, ptr, iovcnt, 0, bpf_ktime_get_ns());
}

SEC("fentry/tcp_sendmsg")
int BPF_PROG(send_fentry, struct sock *sk, struct msghdr *msg, size_t size)
{
	on_tcp_sendmsg(sk, msg, size);
	return 0;
}

SEC("kprobe/tcp_sendmsg")
int BPF_KPROBE(send_kprobe, struct sock *sk, struct msghdr *msg, size_t size)
{
	on_tcp_sendmsg(sk, msg, size);
	return 0;
}

/* ---- processes ------------------------------------------------------------------- */

SEC("tp_btf/sched_process_fork")
int BPF_PROG(process_fork, struct task_struct *parent, struct task_struct *child)
{
	__u32 ptgid = parent->tgid, ctgid = child->tgid;
	struct hs_fork f = { .rec = HS_REC_FORK, .tgid = ctgid };
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

/* ---- OpenSSL: SSL_do_handshake (also reached from SSL_accept) -------------------- */

SEC("uprobe/SSL_do_handshake")
int BPF_KPROBE(ssl_handshake_enter, void *ssl)
{
	__u32 tid = bpf_get_current_pid_tgid(), slot = tid % HS_IO_SLOTS;
	struct ssl_call *sc = bpf_map_lookup_elem(&ssl_in_flight, &slot);

	if (!sc)
		return 0;
	take_slot(sc->tid, tid);
	sc->ssl = (__u64)ssl;
	sc->t_entry = bpf_ktime_get_ns();
	sc->sk = 0;
	sc->tid = tid;
	return 0;
}

SEC("uretprobe/SSL_do_handshake")
int BPF_KRETPROBE(ssl_handshake_exit, int ret)
{
	__u64 id = bpf_get_current_pid_tgid(), now = bpf_ktime_get_ns();
	__u32 tid = id, slot = tid % HS_IO_SLOTS;
	struct ssl_key k = { .tgid = id >> 32 };
	struct ssl_call *scp, sc;
	struct hs_conn_state *c;
	__u64 *skp;

	scp = bpf_map_lookup_elem(&ssl_in_flight, &slot);
	if (!scp || scp->tid != tid)
		return 0;
	sc = *scp;
	scp->tid = 0;
	k.ssl = sc.ssl;
	/* a call that touched no socket belongs to the connection this SSL had before; the
	 * pair is kept while the connection is (drop_conn forgets it) */
	if (sc.sk) {
		c = bpf_map_lookup_elem(&conns, &sc.sk);
		if (c && !c->ssl && c->r.tgid == k.tgid) {
			c->ssl = sc.ssl;
			bpf_map_update_elem(&ssl_socks, &k, &sc.sk, BPF_ANY);
		}
	} else {
		skp = bpf_map_lookup_elem(&ssl_socks, &k);
		c = skp ? bpf_map_lookup_elem(&conns, skp) : NULL;
	}
	if (!c || c->r.phase != HS_PH_HANDSHAKE)
		return 0;
	c->r.flags |= HS_F_UPROBE;
	c->r.ssl_calls += 1;
	c->r.ssl_ns += now - sc.t_entry;
	if (ret != 1)
		return 0;
	/* a server that accepts early data returns once it may write (0.5-RTT data), before
	 * the client's second flight: the end of a handshake only when early data came */
	if (c->flight < HS_FL_C2 && !(c->r.flags & HS_F_EARLY_DATA)) {
		c->r.flags |= HS_F_WIRE_ENDS;
		return 0;
	}
	c->r.t_hs_done = now;
	c->r.cpu_hs_done = thread_cpu_now(now);
	c->r.flags |= HS_F_HS_DONE_SSL;
	handshake_complete(c);
	return 0;
}

/* the layout userspace/src/abi.rs expects */
_Static_assert(sizeof(struct hs_conn) == 472, "hs_conn layout changed: update abi.rs");
_Static_assert(sizeof(struct hs_close) == 56, "hs_close layout changed: update abi.rs");
_Static_assert(sizeof(struct hs_hello) == 32 + HS_HELLO_CAP, "hs_hello layout changed: update abi.rs");
_Static_assert(sizeof(struct hs_conn_state) == 632, "hs_conn_state layout changed: update abi.rs");
_Static_assert(__builtin_offsetof(struct hs_conn_state, emitted) == 617, "hs_conn_state layout changed: update abi.rs");
_Static_assert(sizeof(struct ssl_key) == 16, "ssl_key layout changed: update abi.rs");

/* ---- OpenSSL: SSL_read / SSL_write and _ex (--uprobes all) ------------------------ */

static __always_inline int ssl_io_enter(void *ssl, void *nbytes, __u32 write)
{
	__u32 tid = bpf_get_current_pid_tgid(), slot = tid % HS_IO_SLOTS;
	struct ssl_io *io = bpf_map_lookup_elem(&ssl_io_in_flight, &slot);

	if (!io)
		return 0;
	take_slot(io->tid, tid);
	io->ssl = (__u64)ssl;
	io->t_entry = bpf_ktime_get_ns();
	io->nbytes = (__u64)nbytes;
	io->write = write;
	io->tid = tid;
	return 0;
}

SEC("uprobe/SSL_read")
int BPF_KPROBE(ssl_read_enter, void *ssl)
{
	return ssl_io_enter(ssl, NULL, 0);
}

SEC("uprobe/SSL_read_ex")
int BPF_KPROBE(ssl_read_ex_enter, void *ssl, void *buf, size_t num, size_t *readbytes)
{
	return ssl_io_enter(ssl, readbytes, 0);
}

SEC("uprobe/SSL_write")
int BPF_KPROBE(ssl_write_enter, void *ssl)
{
	return ssl_io_enter(ssl, NULL, 1);
}

SEC("uprobe/SSL_write_ex")
int BPF_KPROBE(ssl_write_ex_enter, void *ssl, const void *buf, size_t num, size_t *written)
{
	return ssl_io_enter(ssl, written, 1);
}

/* Return of any of the four: the plaintext bytes and the time inside count toward the
 * first request (reads while it is being read) or its response (writes while it is being
 * written); the wire alone decides where those stages begin and end. */
SEC("uretprobe/SSL_read")
int BPF_KRETPROBE(ssl_io_exit, int ret)
{
	__u64 id = bpf_get_current_pid_tgid(), now = bpf_ktime_get_ns(), n = 0;
	__u32 tid = id, slot = tid % HS_IO_SLOTS;
	struct ssl_key k = { .tgid = id >> 32 };
	struct ssl_io *iop, io;
	struct hs_conn_state *c;
	__u64 *skp;

	iop = bpf_map_lookup_elem(&ssl_io_in_flight, &slot);
	if (!iop || iop->tid != tid)
		return 0;
	io = *iop;
	iop->tid = 0;
	k.ssl = io.ssl;
	skp = bpf_map_lookup_elem(&ssl_socks, &k);
	c = skp ? bpf_map_lookup_elem(&conns, skp) : NULL;
	if (!c)
		return 0;
	if (io.nbytes) {
		if (ret == 1)
			bpf_probe_read_user(&n, sizeof(n), (const void *)io.nbytes);
	} else if (ret > 0) {
		n = ret;
	}
	if (!io.write && c->r.phase == HS_PH_REQUEST) {
		c->r.lib_req_bytes += n;
		c->r.lib_req_ns += now - io.t_entry;
	} else if (io.write && c->r.phase == HS_PH_RESPONSE) {
		c->r.lib_resp_bytes += n;
		c->r.lib_resp_ns += now - io.t_entry;
	}
	return 0;
}
