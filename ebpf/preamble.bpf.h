/* SPDX-License-Identifier: GPL-2.0-only OR MIT */
/*
 * A plaintext preamble before TLS on the same connection: SMTP, IMAP, POP3, FTP and XMPP's
 * STARTTLS, PostgreSQL's and MySQL's SSL requests, LDAP's StartTLS. It starts where the
 * record-stream parser (wire.bpf.h) finds that a connection's very first bytes are not a
 * TLS record and starttls.h tells a protocol that may switch to TLS; from then on each
 * read and write of the connection comes here instead of to the parser (io.bpf.h), until
 * a client's read starts with a TLS record (the parser then takes over from that read, as
 * for a connection that began with TLS), or the protocol can no longer switch, or the
 * bounds (HS_PRE_FLIGHTS_MAX flights, HS_PRE_BYTES_MAX bytes) pass: then the connection
 * is plain of its protocol and its record is sent.
 *
 * The preamble's time is split as the handshake's is: the server answering (from the
 * client message's read, or accept for a banner, to the answer's last write: service),
 * the client's messages waiting in the socket (arrival to read: queue) and the server
 * waiting for them (its last write, or accept, to the arrival: delay). Only the first
 * HS_PRE_PEEK bytes of a flight are read (of every client read, for a TLS record), and
 * nothing of them is kept but the protocol and how far the switch to TLS got.
 */
#ifndef HSTRACE_PREAMBLE_BPF_H
#define HSTRACE_PREAMBLE_BPF_H

#include "conn.bpf.h"

#define HS_INLINE static __always_inline
#include "starttls.h"

/* 0xff in pre_dir: no transfer of the preamble yet */
#define HS_PRE_NO_DIR 0xff

/* A transfer in `dir` at `now` (a client's message that arrived at `arr`, 0: not seen):
 * its time into the preamble's service, queue and wait sums. */
static __always_inline void pre_transfer(struct hs_conn_state *c, __u32 dir, __u64 now, __u64 arr)
{
	int new_flight = c->pre_dir != dir;
	__u64 from;

	if (dir == HS_DIR_IN) {
		if (new_flight) {
			/* the server waited from its last write (or accept) for the message,
			 * which then queued until this read */
			from = c->pre_dir == HS_DIR_OUT ? c->pre_last_out : c->r.t_accept;
			if (!arr || arr > now || arr < from)
				arr = now;
			if (from && from <= arr) {
				c->r.pre_wait_ns += arr - from;
				c->r.pre_queue_ns += now - arr;
			}
			c->pre_in_start = now;
			c->r.pre_flights++;
		}
		c->pre_last_in = now;
	} else {
		if (new_flight) {
			c->r.pre_flights++;
			/* a banner: the server answers the connection itself, from accept */
			if (c->pre_dir == HS_PRE_NO_DIR)
				c->pre_in_start = c->r.t_accept;
		}
		/* the answer so far: from its start (or its last write) to this write */
		if (c->pre_in_start && c->pre_in_start <= now) {
			__u64 since = c->pre_last_out > c->pre_in_start ? c->pre_last_out : c->pre_in_start;

			c->r.pre_service_ns += now - since;
		}
		c->pre_last_out = now;
	}
	c->pre_dir = dir;
}

/* How the record ends if the connection ends now: the client asked and the server said go
 * ahead, but no ClientHello came: a failed handshake; otherwise plain of its protocol. */
static __always_inline void pre_outcome(struct hs_conn_state *c)
{
	c->r.outcome = c->r.pre_state == HS_PRE_GRANTED ? HS_OUTCOME_FAILED : HS_OUTCOME_NOT_TLS;
}

/* The preamble can no longer switch to TLS: the connection is plain of its protocol. Its
 * record is sent now (the preamble's stages); its later exchanges and bytes are counted
 * in its close, as a plain connection's are. */
static __always_inline void pre_plain(struct hs_conn_state *c, __u64 now)
{
	c->pre_watch = 0;
	c->not_tls = 1;
	c->st[HS_DIR_IN].desync = 1;
	c->st[HS_DIR_OUT].desync = 1;
	c->r.phase = HS_PH_DONE;
	emit_conn(c, now, HS_OUTCOME_NOT_TLS);
}

/* A client's read starts with a TLS record: the preamble is over at its last write (the
 * server's go-ahead), or, if the server did not answer the request (MySQL), at the
 * request's read. The parser takes this read as the ClientHello's. */
static __always_inline void pre_upgrade(struct hs_conn_state *c)
{
	c->r.t_tls_start = c->pre_dir == HS_DIR_OUT ? c->pre_last_out : c->pre_last_in;
	c->r.pre_state = HS_PRE_UPGRADED;
	c->r.outcome = HS_OUTCOME_FAILED; /* until its handshake completes */
	c->pre_watch = 0;
	c->flight = -1;
	c->first_rec_done = 0;
}

/* Does a client's read start with a TLS record (a handshake record, version 3.x)? */
static __always_inline int starts_tls(const __u8 *b, __u32 n)
{
	return n >= 3 && b[0] == 22 && b[1] == 3 && b[2] <= 4;
}

/* The first bytes of a call's buffer `buf` (an iovec array if `iovcnt`), `ret` moved, into
 * `b`: how many (0: unreadable). */
static __always_inline __u32 pre_peek(__u8 *b, __u64 buf, __u32 iovcnt, long ret)
{
	struct iovec v;
	__u32 n = ret < HS_PRE_PEEK ? ret : HS_PRE_PEEK;

	if (!buf)
		return 0;
	if (iovcnt) {
		if (read_iovec(&v, buf, 0, iovcnt))
			return 0;
		buf = (__u64)v.iov_base;
		if (v.iov_len < n)
			n = v.iov_len;
	}
	/* the compiler drops this mask as redundant; the verifier needs it */
	barrier_var(n);
	n &= 2 * HS_PRE_PEEK - 1;
	if (!n || bpf_probe_read_user(b, n, (const void *)buf))
		return 0;
	return n;
}

/* A read or write of `ret` bytes (buffer `ptr`, an iovec array if `iovcnt`) on a
 * connection whose preamble is watched, `dir_iov` = dir | iovcnt << 1 (a BPF function
 * takes five arguments): 1 when it belongs to the preamble (nothing more to do with it),
 * 0 when it starts TLS (the caller goes on as for any connection). (A global function:
 * verified once.) */
HS_FUNC int preamble_io(struct hs_conn_state *c, __u32 dir_iov, long ret, __u64 ptr, __u64 now)
{
	__u8 b[2 * HS_PRE_PEEK] = {};
	__u32 n = 0, new_flight, watch = 1, dir = dir_iov & 1, iovcnt = dir_iov >> 1;
	__u64 arr = 0;

	if (!c || ret <= 0)
		return 0;
	new_flight = c->pre_dir != dir;
	if (ptr != HS_PTR_UNREAD && (dir == HS_DIR_IN || new_flight))
		n = pre_peek(b, ptr, iovcnt, ret);
	if (dir == HS_DIR_IN && starts_tls(b, n)) {
		pre_upgrade(c);
		return 0;
	}
	if (dir == HS_DIR_IN) {
		c->r.bytes_in += ret;
		if (new_flight)
			arr = hs_xchg(&c->arrive_pending, 0);
	} else {
		c->r.bytes_out += ret;
	}
	pre_transfer(c, dir, now, arr);
	if (new_flight && n)
		watch = hs_pre_flight(&c->r.pre_proto, &c->r.pre_state, dir, b, n);
	pre_outcome(c);
	if (!watch || c->r.pre_flights > HS_PRE_FLIGHTS_MAX ||
	    c->r.bytes_in + c->r.bytes_out > HS_PRE_BYTES_MAX)
		pre_plain(c, now);
	return 1;
}

/* The connection's first bytes in `dir` do not start a TLS record (walk_step found a
 * header that does not parse, `avail` bytes at user address `at`). If they are a protocol
 * that may switch to TLS, watch its preamble: this transfer, which was taken for a TLS
 * flight, becomes its first (returns 1: the parser stops here, no desync). Otherwise the
 * protocol is noted (plain HTTP, say) and the parser goes on as before (0). */
HS_FUNC int preamble_start(struct hs_conn_state *c, __u32 dir, __u64 at, __u32 avail, __u64 now)
{
	__u8 b[2 * HS_PRE_PEEK] = {};
	__u32 n = avail < HS_PRE_PEEK ? avail : HS_PRE_PEEK;
	__u64 arr;

	if (!c)
		return 0;
	/* a protocol is told once, from the connection's first bytes, before any TLS record */
	if (c->r.pre_state != HS_PRE_NONE || c->r.rec_types[HS_FL_C1] || c->r.rec_types[HS_FL_S1])
		return 0;
	barrier_var(n);
	n &= 2 * HS_PRE_PEEK - 1;
	if (!n || bpf_probe_read_user(b, n, (const void *)at))
		return 0;
	if (!hs_pre_first(&c->r.pre_proto, &c->r.pre_state, dir, b, n))
		return 0;
	/* this transfer was counted as the first TLS flight it is not: take that back */
	arr = c->arrival_missed ? 0 : c->last_arrive;
	for (int f = 0; f < HS_FLIGHTS; f++) {
		c->r.t_arrive[f] = 0;
		c->r.t_first[f] = 0;
		c->r.t_last[f] = 0;
		c->r.cpu_first[f] = 0;
		c->r.cpu_last[f] = 0;
	}
	c->flight = -1;
	c->first_rec_done = 0;
	c->arrival_missed = 0;
	c->last_arrive = 0;
	c->st[dir & 1].hdr_have = 0;
	c->st[dir & 1].rec_left = 0;
	c->pre_watch = 1;
	c->pre_dir = HS_PRE_NO_DIR;
	pre_transfer(c, dir, now, arr);
	pre_outcome(c);
	return 1;
}

#endif
