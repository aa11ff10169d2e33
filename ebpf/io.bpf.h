/* SPDX-License-Identifier: GPL-2.0-only OR MIT */
/*
 * Socket I/O and arrivals: the bytes the server reads and writes, fed to the record-stream
 * parser (wire.bpf.h), and when the client's bytes were queued on the socket.
 *
 *   arrival: sk_data_ready (tp_btf | tracepoint) | fentry or kprobe tcp_data_ready:
 *            t_arrive, matched by socket (on loopback it runs in the sender's context)
 *   I/O:     sock_recv_length (in) and sock_send_length (out), tp_btf, with the buffer
 *            from the arguments of the syscall the thread is in | fentry/fexit on
 *            inet_recvmsg and inet6_recvmsg (in) and tcp_sendmsg (out), with the buffer
 *            from the call's msghdr | syscalls read/readv/recvfrom/recvmsg and
 *            write/writev/sendto/sendmsg, entry and exit (every read and write of every
 *            process on the host runs them) | kprobe/kretprobe on the same functions as
 *            fentry/fexit (last: a kretprobe skips returns once its instances are held by
 *            threads asleep in the function)
 *   close:   syscalls:sys_enter_close, the end of a connection where tcp_destroy_sock
 *            (tcp.bpf.h) cannot be hooked
 *
 * Which alternative runs is the probe table's choice (userspace/src/probes.rs).
 */
#ifndef HSTRACE_IO_BPF_H
#define HSTRACE_IO_BPF_H

#include "conn.bpf.h"
#include "wire.bpf.h"
#include "task.bpf.h"

/* ---- arrivals -------------------------------------------------------------------- */

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
		hs_cmpxchg(&c->arrive_pending, t, 0);
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
	if (!hs_cmpxchg(&c->arrive_pending, 0, now))
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

/* ---- bytes on a connection ------------------------------------------------------- */

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
	/* handshake bytes moved outside SSL_do_handshake once it has run: the server goes on
	 * with the handshake in SSL_read (Mosquitto: one SSL_accept, then its event loop's
	 * SSL_read), and no return of 1 will come: the wire says when it ends */
	if (ret > 0 && !peek && (c->r.flags & (HS_F_UPROBE | HS_F_WIRE_ENDS)) == HS_F_UPROBE &&
	    c->r.phase == HS_PH_HANDSHAKE)
		ssl_left_handshake(c, now);
	if (dir == HS_DIR_IN && !peek)
		on_read_attempt(c, now);
	if (ret <= 0 || peek) {
		if (dir == HS_DIR_IN && ret == 0)
			c->r.flags |= HS_F_READ_EOF;
		if (ret == -ECONNRESET || ret == -EPIPE)
			c->r.flags |= HS_F_READ_RESET;
		return;
	}
	/* after the alert that ended TLS in the handshake, bytes are only counted: no flight
	 * starts, no record is walked (tls_ended) */
	if (c->r.phase == HS_PH_HANDSHAKE && tls_ended(c)) {
		if (dir == HS_DIR_OUT)
			c->r.bytes_out += ret;
		else
			c->r.bytes_in += ret;
		return;
	}
	/* a plaintext preamble (STARTTLS and its kin) is watched for TLS, not parsed */
	if (c->pre_watch && preamble_io(c, dir | iovcnt << 1, ret, ptr, now))
		return;
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
			parse_iov(c, skey, dir, (const struct iovec *)ptr, iovcnt, ret, now);
		else
			parse_bytes(c, skey, dir, ptr, ret, now);
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
	peek = dir == HS_DIR_IN && (flags & MSG_PEEK);
	/* a peek that found bytes leaves them to the read after it and changes nothing of the
	 * connection (nginx peeks at every new connection's first byte): it leaves before the
	 * lookup, unless the settings say its fd may be learned here (HS_SET_LAZY_FD) */
	if (peek && ret > 0 && !(settings_word() & HS_SET_LAZY_FD))
		return;
	c = bpf_map_lookup_elem(&conns, &skey);
	if (!c)
		return;
	/* after the record is sent only bytes and exchanges are counted: no clock, and the
	 * buffer only for the read that opens a TLS client flight (its first record header;
	 * plain text has none: every client flight is a request) */
	if (c->r.phase == HS_PH_DONE) {
		if (dir == HS_DIR_IN && ret > 0 && !peek && !c->not_tls &&
		    flight_dir(c->flight) != HS_DIR_IN)
			ptr = call_buffer(user_regs(), &iovcnt);
	} else if (!wants_bytes(c, dir, ret, peek) && !c->learn_fd) {
		/* the syscall's buffer only when the parser reads these bytes (or the fd is
		 * wanted): not for a failed or peeking read, nor for bytes inside a record body
		 * it passes over */
		ptr = HS_PTR_UNREAD;
		now = call_time(ret, peek);
	} else {
		regs = user_regs();
		ptr = call_buffer(regs, &iovcnt);
		/* accepted in the kernel: the connection's fd is the one this call names, once
		 * the settings say a hook reads the fds table (and never, once they say none
		 * does); the settings are read only until then */
		if (ptr && c->learn_fd) {
			__u32 set = settings_word();

			if ((set & HS_SET_LAZY_FD) && !c->fkey) {
				__u64 fkey = fd_key(bpf_get_current_pid_tgid() >> 32, SYSCALL_ARG1(regs));

				c->fkey = fkey;
				bpf_map_update_elem(&fds, &fkey, &skey, BPF_ANY);
			}
			if (set & (HS_SET_LAZY_FD | HS_SET_NO_FDS))
				c->learn_fd = 0;
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

/* ---- reads and writes at the syscall (kernels without the socket tracepoints) ---- */

/* The traced connection on fd `fd` of process `tgid`, or 0. */
static __always_inline __u64 conn_sock(__u32 tgid, __u32 fd)
{
	__u64 fkey = fd_key(tgid, fd), skey;
	__u64 *sk = bpf_map_lookup_elem(&fds, &fkey);
	struct hs_conn_state *c;

	if (sk)
		return *sk;
	if (!lazy_fd())
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
	/* a peek that found bytes changes nothing of the connection (on_sock_call) */
	if (a.peek && ret > 0)
		return 0;
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

/* ---- reads and writes at kernel functions (kernels without the socket tracepoints) */

/* Before 5.14 an iov_iter kept its kind in `type` (with the direction in bit 0); before
 * 6.4 its iovec array was `iov`. */
struct iov_iter___type {
	unsigned int type;
} __attribute__((preserve_access_index));
struct iov_iter___iov {
	const struct iovec *iov;
} __attribute__((preserve_access_index));

/* The user buffer of a socket call from its msghdr (`*iovcnt` set for an iovec array), as
 * the read, write, recv and send calls pass it; 0 for kernel memory (sendfile, splice,
 * kTLS). */
static __always_inline __u64 msg_buffer(struct msghdr *msg, __u32 *iovcnt)
{
	struct iov_iter *it = &msg->msg_iter;
	__u32 type;

	if (bpf_core_field_exists(it->iter_type))
		type = BPF_CORE_READ(it, iter_type);
	else
		type = BPF_CORE_READ((struct iov_iter___type *)it, type) & ~1u;
	if (bpf_core_enum_value_exists(enum iter_type, ITER_UBUF) &&
	    type == bpf_core_enum_value(enum iter_type, ITER_UBUF))
		return (__u64)BPF_CORE_READ(it, ubuf);
	if (type != bpf_core_enum_value(enum iter_type, ITER_IOVEC))
		return 0;
	/* (the kernel's copy of the caller's iovecs) */
	*iovcnt = BPF_CORE_READ(it, nr_segs) | HS_IOV_KERNEL;
	if (bpf_core_field_exists(it->__iov))
		return (__u64)BPF_CORE_READ(it, __iov);
	return (__u64)BPF_CORE_READ((struct iov_iter___iov *)it, iov);
}

/* A socket call begins on `sk` (local port `port`): if it is a traced connection's, keep
 * its buffer in the thread's slot for the call's return (io_exit), as the syscall entries
 * do. Reads are hooked at inet_recvmsg and inet6_recvmsg, whose arguments have not changed
 * since 4.x (tcp_recvmsg's have), writes at tcp_sendmsg. */
static __always_inline void sock_call_enter(struct sock *sk, __u16 port, struct msghdr *msg, __u32 peek)
{
	__u64 id = bpf_get_current_pid_tgid(), skey = (__u64)sk;
	__u32 tid = id, slot = tid % HS_IO_SLOTS;
	struct io_args *a;

	/* other ports' sockets leave before the lookup (port 0: a reset released it) */
	if ((port && !is_server_port(port)) || !bpf_map_lookup_elem(&conns, &skey))
		return;
	a = bpf_map_lookup_elem(&io_in_flight, &slot);
	if (!a)
		return;
	take_slot(a->tid, tid);
	a->skey = skey;
	a->iovcnt = 0;
	a->ptr = msg_buffer(msg, &a->iovcnt);
	a->peek = peek;
	a->tid = tid;
}

/* BTF-typed: the socket's fields are plain loads */
static __always_inline void recv_enter_btf(struct socket *sock, struct msghdr *msg, int flags)
{
	struct sock *sk = sock->sk;

	if (sk)
		sock_call_enter(sk, sk->__sk_common.skc_num, msg, flags & MSG_PEEK);
}

static __always_inline void recv_enter_kprobe(struct socket *sock, struct msghdr *msg, int flags)
{
	struct sock *sk = BPF_CORE_READ(sock, sk);

	if (sk)
		sock_call_enter(sk, BPF_CORE_READ(sk, __sk_common.skc_num), msg, flags & MSG_PEEK);
}

SEC("fentry/inet_recvmsg")
int BPF_PROG(recv4_fentry, struct socket *sock, struct msghdr *msg, size_t size, int flags)
{
	recv_enter_btf(sock, msg, flags);
	return 0;
}

SEC("fexit/inet_recvmsg")
int BPF_PROG(recv4_fexit, struct socket *sock, struct msghdr *msg, size_t size, int flags, int ret)
{
	return io_exit(HS_DIR_IN, ret);
}

SEC("fentry/inet6_recvmsg")
int BPF_PROG(recv6_fentry, struct socket *sock, struct msghdr *msg, size_t size, int flags)
{
	recv_enter_btf(sock, msg, flags);
	return 0;
}

SEC("fexit/inet6_recvmsg")
int BPF_PROG(recv6_fexit, struct socket *sock, struct msghdr *msg, size_t size, int flags, int ret)
{
	return io_exit(HS_DIR_IN, ret);
}

/* (one program each, attached to both inet_recvmsg and inet6_recvmsg) */
SEC("kprobe/inet_recvmsg")
int BPF_KPROBE(recv_kprobe, struct socket *sock, struct msghdr *msg, size_t size, int flags)
{
	recv_enter_kprobe(sock, msg, flags);
	return 0;
}

SEC("kretprobe/inet_recvmsg")
int BPF_KRETPROBE(recv_kretprobe, int ret)
{
	return io_exit(HS_DIR_IN, ret);
}

SEC("fentry/tcp_sendmsg")
int BPF_PROG(send_fentry, struct sock *sk, struct msghdr *msg, size_t size)
{
	sock_call_enter(sk, sk->__sk_common.skc_num, msg, 0);
	return 0;
}

SEC("fexit/tcp_sendmsg")
int BPF_PROG(send_fexit, struct sock *sk, struct msghdr *msg, size_t size, int ret)
{
	return io_exit(HS_DIR_OUT, ret);
}

SEC("kprobe/tcp_sendmsg")
int BPF_KPROBE(send_kprobe, struct sock *sk, struct msghdr *msg, size_t size)
{
	sock_call_enter(sk, BPF_CORE_READ(sk, __sk_common.skc_num), msg, 0);
	return 0;
}

SEC("kretprobe/tcp_sendmsg")
int BPF_KRETPROBE(send_kretprobe, int ret)
{
	return io_exit(HS_DIR_OUT, ret);
}

#endif
