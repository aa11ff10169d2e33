/* SPDX-License-Identifier: GPL-2.0-only OR MIT */
/*
 * OpenSSL uprobes, attached per traced process to the libssl it maps (or to its executable,
 * if that exports the symbols), or to a shared libssl for every process that maps it once a
 * traced process forks children (PostgreSQL's backends, a prefork server's): each program
 * leaves at once for a process that is not traced. No OpenSSL struct offsets: arguments
 * and return values only.
 *
 *   SSL_do_handshake (uprobe + uretprobe; SSL_accept reaches it too): the SSL object is tied
 *     to the connection whose socket its call reads or writes (io.bpf.h's on_conn_io); a
 *     return of 1 is t_hs_done; the calls and the time inside them are counted
 *   SSL_read, SSL_read_ex, SSL_write, SSL_write_ex (uprobes, and one uretprobe program for
 *     the four; --uprobes all): the plaintext bytes and library time of the first request
 *     and its response
 */
#ifndef HSTRACE_SSL_BPF_H
#define HSTRACE_SSL_BPF_H

#include "conn.bpf.h"

/* ---- OpenSSL: SSL_do_handshake (also reached from SSL_accept) -------------------- */

SEC("uprobe/SSL_do_handshake")
int BPF_KPROBE(ssl_handshake_enter, void *ssl)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tid = id, slot = tid % HS_IO_SLOTS;
	struct ssl_call *sc;

	/* (once attached for every process that maps the library, only the traced ones count:
	 * a hash lookup, so not before) */
	if (ssl_all_procs() && !tgid_traced(id >> 32))
		return 0;
	sc = bpf_map_lookup_elem(&ssl_in_flight, &slot);
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
	 * pair is kept while the connection is (drop_conn forgets it). The call may be another
	 * process's than the accept's (a child the connection was handed to: PostgreSQL) */
	if (sc.sk) {
		c = bpf_map_lookup_elem(&conns, &sc.sk);
		if (c && !c->ssl) {
			c->ssl = sc.ssl;
			c->ssl_tgid = k.tgid;
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
	c->r.cpu_hs_done = stage_ends(now);
	c->r.flags |= HS_F_HS_DONE_SSL;
	handshake_complete(c);
	return 0;
}

/* ---- OpenSSL: SSL_read / SSL_write and _ex (--uprobes all) ----------------------- */

static __always_inline int ssl_io_enter(void *ssl, void *nbytes, __u32 write)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tid = id, slot = tid % HS_IO_SLOTS;
	struct ssl_io *io;

	/* (as in ssl_handshake_enter) */
	if (ssl_all_procs() && !tgid_traced(id >> 32))
		return 0;
	io = bpf_map_lookup_elem(&ssl_io_in_flight, &slot);
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

#endif
