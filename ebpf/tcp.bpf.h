/* SPDX-License-Identifier: GPL-2.0-only OR MIT */
/*
 * Accept and TCP state: where a connection's entry is made, gets its process, and ends.
 *
 *   accept:  syscalls:sys_exit_accept4/accept (t_accept and the fd) | fexit or kretprobe
 *            inet_csk_accept (the fd is then learned at the first read or write)
 *   state:   inet_sock_set_state (tp_btf | tracepoint): ESTABLISHED from SYN_RECV makes the
 *            entry at the handshake's last ACK (t_est, the addresses), before accept;
 *            CLOSE_WAIT is the client's FIN; FIN_WAIT1, LAST_ACK and CLOSE the end (the
 *            server's close(), or a reset); LISTEN a new server for userspace to find
 *   destroy: tcp_destroy_sock (tp_btf | tracepoint): the end, if no state change told it
 *
 * Which alternative runs is the probe table's choice (userspace/src/probes.rs).
 */
#ifndef HSTRACE_TCP_BPF_H
#define HSTRACE_TCP_BPF_H

#include "conn.bpf.h"
#include "task.bpf.h"

/* A socket's local port as inet_sport keeps it, past struct sock, by a helper copy (for a
 * socket pointer that is not BTF-typed, as accept's): where a close, or a reset, has
 * cleared skc_num (inet_put_port). */
static __always_inline __u16 released_port(const struct sock *sk)
{
	return bpf_ntohs(BPF_CORE_READ((struct inet_sock *)sk, inet_sport));
}

/* A BTF-typed socket's local port: skc_num (a plain load) until a close clears it (by the
 * time the tracepoints fire for TCP_CLOSE and the socket's destruction); then inet_sport,
 * a plain load too, through the socket as the TCP socket it is (bpf_skc_to_tcp_sock checks
 * its type; released_port's helper copy costs more). 0: no full TCP socket. */
static __always_inline __u16 local_port(const struct sock *sk)
{
	__u16 port = sk->__sk_common.skc_num;
	struct tcp_sock *tp;

	if (port)
		return port;
	tp = bpf_skc_to_tcp_sock((struct sock *)sk);
	return tp ? bpf_ntohs(tp->inet_conn.icsk_inet.inet_sport) : 0;
}

/* Does a process hold the socket (its sk_socket set)? Not before accept, nor after the
 * server's close. A plain load where `sk` is BTF-typed (`btf`), else a helper copy. */
static __always_inline int held_by_process(const struct sock *sk, int btf)
{
	return btf ? sk->sk_socket != NULL : BPF_CORE_READ(sk, sk_socket) != NULL;
}

/* ---- accept ---------------------------------------------------------------------- */

/* Does this accept belong to a traced process? (With no selector, every process that
 * accepts is.) */
static __always_inline int accept_traced(__u32 tgid)
{
	return targ_all || tgid_traced(tgid);
}

/* `old`, the entry on a socket a new connection now has, was an accepted connection's:
 * the socket was freed and reused without its end being seen. Its record (unless sent)
 * and its close line will not come: counted as lost, not overwritten silently. */
static __always_inline void end_missed(const struct hs_conn_state *old)
{
	if (old && old->r.t_accept)
		count(old->r.t_end ? HS_C_CLOSE_MISSED : HS_C_END_MISSED);
}

/* A connection's entry as the handshake's last ACK left it (in the accept queue, no
 * process yet); or, for a socket whose handshake was not seen (established before hstrace
 * attached, the table full then, or taken from the queue before its state change: see
 * accepted_early), one built now from the socket. NULL: not a connection to trace. */
static __always_inline struct hs_conn_state *queued_conn(struct sock *sk, __u64 skey)
{
	struct hs_conn_state *c = bpf_map_lookup_elem(&conns, &skey);
	struct conn_addrs a = {};

	if (c && !c->r.t_accept)
		return c;
	end_missed(c);
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
	/* taken from the queue ahead of its change to ESTABLISHED (accept hooked in the
	 * kernel; see accepted_early): it waited there for no time */
	if (BPF_CORE_READ(sk, __sk_common.skc_state) == TCP_SYN_RECV) {
		c->r.flags = HS_F_EST_SEEN;
		c->r.t_est = bpf_ktime_get_ns();
	}
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
	c->r.conn_id = new_conn_id();
	c->r.tgid = tgid;
	bpf_get_current_comm(c->r.comm, sizeof(c->r.comm));
	/* the fd, only while some hook reads the fds table: a connection has an fds entry
	 * exactly when its fkey is set */
	if (fd >= 0 && fds_used()) {
		fkey = fd_key(tgid, fd);
		c->fkey = fkey;
		bpf_map_update_elem(&fds, &fkey, &skey, BPF_ANY);
	}
	/* accepted in the kernel, no fd: its reads and writes learn it, unless the settings
	 * already say no hook reads the table (then they never look: the settings are read
	 * here once, not at each of its calls) */
	if (fd < 0)
		c->learn_fd = fds_used();
	/* last: from here on the entry is an accepted connection's */
	c->r.t_accept = bpf_ktime_get_ns();
	accept_call(c, c->r.t_accept);
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
 * namespace on the same port number): its socket's queued entry goes too, or it would stay
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

/* inet_csk_accept(sk, arg) since 6.10, inet_csk_accept(sk, flags, err, kern) before it:
 * the returned socket follows the arguments, so where it is depends on which the kernel
 * has, which its BTF tells (struct proto_accept_arg came with the change) */
SEC("fexit/inet_csk_accept")
int BPF_PROG(accept_fexit)
{
	struct sock *newsk;

	/* one load or the other, each at its constant offset (the verifier refuses a read past
	 * a function's arguments, and a load through a context pointer moved first, which is
	 * what the compiler makes of ctx[i] when it merges the two) */
	if (bpf_core_type_exists(struct proto_accept_arg))
		asm volatile("%0 = *(u64 *)(%1 + 16)" : "=r"(newsk) : "r"(ctx));
	else
		asm volatile("%0 = *(u64 *)(%1 + 32)" : "=r"(newsk) : "r"(ctx));
	return on_accept_sock(newsk);
}

SEC("kretprobe/inet_csk_accept")
int BPF_KRETPROBE(accept_kretprobe, struct sock *newsk)
{
	return on_accept_sock(newsk);
}

/* ---- TCP state ------------------------------------------------------------------- */

/* The thread is in close() of the process that accepted connection `c`: a state change
 * now is the server letting go of it (its FIN, or its reset over unread bytes). */
static __always_inline int server_closing(struct hs_conn_state *c)
{
	return (bpf_get_current_pid_tgid() >> 32) == c->r.tgid && SYSCALL_NR(user_regs()) == NR_close;
}

/* Is `c`, the entry already on a socket reaching ESTABLISHED, its own connection's, made
 * by accept (the same peer address and port)? A socket joins the accept queue before
 * its state changes, so accept hooked in the kernel (before the fd is given) can take it
 * first on another CPU. Replacing that entry would lose the connection. */
static __always_inline int accepted_early(const struct hs_conn_state *c, const struct conn_addrs *a)
{
	const __u64 *x = (const __u64 *)c->r.daddr, *y = (const __u64 *)a->daddr;

	return c->r.dport == a->dport && x[0] == y[0] && x[1] == y[1];
}

/* A server's child socket `sk` finished the three-way handshake (`fresh` holds its
 * addresses): it waits in the accept queue from now, its connection's entry made (no
 * process yet: t_accept 0) so that accept, its arrivals and its state changes all find
 * the one entry. `btf`: `sk` is BTF-typed (its fields are plain loads). */
static __always_inline void on_established(const struct sock *sk, struct conn_addrs *fresh, int btf)
{
	__u64 skey = (__u64)sk;
	struct hs_conn_state *c;
	long err;

	/* other servers' connections are not waited for */
	if (!port_selected(fresh->sport))
		return;
	/* accepted and given its fd already (a TCP Fast Open child, or an accept that held
	 * the socket's lock while this change waited): accept built the connection's entry */
	if (held_by_process(sk, btf))
		return;
	c = new_conn(HS_SCRATCH_ESTABLISHED, fresh);
	if (!c)
		return;
	c->r.flags = HS_F_EST_SEEN;
	c->r.t_est = bpf_ktime_get_ns();
	err = bpf_map_update_elem(&conns, &skey, c, BPF_NOEXIST);
	if (err == -EEXIST) {
		struct hs_conn_state *old = bpf_map_lookup_elem(&conns, &skey);

		/* accept came first: this connection's own entry, which it may be filling now */
		if (old && accepted_early(old, fresh))
			return;
		/* a socket whose last connection's end was missed: counted, then replaced */
		end_missed(old);
		err = bpf_map_update_elem(&conns, &skey, c, BPF_ANY);
	}
	/* a full table: accept builds the entry, without t_est, if there is room then */
	if (err)
		count(HS_C_EST_FULL);
}

static __always_inline int is_established(int oldstate, int newstate)
{
	return newstate == TCP_ESTABLISHED && oldstate == TCP_SYN_RECV;
}

/* Socket `sk` (BTF-typed: `btf`) on local port `sport` changed state, other than to
 * ESTABLISHED from SYN_RECV. */
static __always_inline void on_set_state(struct sock *sk, int oldstate, int newstate, __u16 sport,
					 int btf)
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
		if (!held_by_process(sk, btf))
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
	if (held_by_process(sk, btf))
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
	on_set_state((struct sock *)sk, oldstate, newstate, local_port(sk), 1);
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
	on_set_state((struct sock *)ctx->skaddr, ctx->oldstate, ctx->newstate, ctx->sport, 0);
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

#endif
