/* SPDX-License-Identifier: GPL-2.0-only OR MIT */
/*
 * The TLS record stream, as the server reads and writes it. Only record headers
 * (type, version, length), the 4-byte headers of plaintext handshake messages, the two
 * bytes of plaintext alerts and the first 3 body bytes of a ServerKeyExchange (its ECDHE
 * group) are read, wherever the reads cut them (a message may span
 * records, a record may span reads); a ClientHello or ServerHello is copied out (up to
 * HS_HELLO_CAP) for userspace to parse: whole when it came in one read, else in pieces.
 * Nothing past ChangeCipherSpec, and no application data, is read.
 *
 * From the record types alone it tells flights apart and when the handshake is done:
 *   server flight 1 holds an application_data record  -> TLS 1.3 (encrypted from EE on)
 *   server flight 1 holds a ChangeCipherSpec           -> TLS 1.2 abbreviated (resumed)
 *   otherwise                                          -> TLS 1.2 full
 */
#ifndef HSTRACE_WIRE_BPF_H
#define HSTRACE_WIRE_BPF_H

#include "conn.bpf.h"
#include "preamble.bpf.h"

#define HS_REC_MAX_LEN (16384 + 2048) /* largest legal TLSCiphertext */
#define HS_WALK_STEPS 8192            /* steps walked in one read/write buffer: one per
				       * record header, handshake message header, alert or
				       * run of body bytes (a 16 KiB read of 1-byte records
				       * takes 5,462); a buffer needing more stops the
				       * connection's parse (counted as a desync) */
#define HS_BASIC_WALK_STEPS 32      /* the same, in the build for kernels without bpf_loop
				       * (HS_BASIC): a TLS 1.2 full server flight takes 9 */
#define HS_IOV_SEGS 4                 /* iovec segments walked in one readv/writev */
#define HS_HDRS_LEN 9                 /* a record header and a handshake message header */
#define HS_BODY_PREREAD 4             /* hs_stream.body_have: the message header is in body,
				       * read with its record's header, its bytes not yet
				       * walked */

#define REC_CCS 20
#define REC_ALERT 21
#define REC_HANDSHAKE 22
#define REC_APPDATA 23
#define REC_HEARTBEAT 24
#define HT_SERVER_KEY_EXCHANGE 12 /* (its first bytes name TLS 1.2's ECDHE group) */
#define REC_SSLV2_HELLO 0 /* not a TLS record type: the body of an SSLv2-format ClientHello */

/* A TLS 1.3 alert (close_notify) as an encrypted record: 2 bytes, content type, 16-byte
 * AEAD tag. No request is that short. */
#define HS_TLS13_ALERT_LEN 19
/* A TLS 1.3 EndOfEarlyData as an encrypted record: its 4-byte message header, content type,
 * 16-byte tag. After 0-RTT it opens the client's second flight, which the server may read
 * after it answered the early request (with uprobes, the handshake was done before). */
#define HS_TLS13_EOED_LEN 21

static __always_inline __u32 flight_dir(__s8 f)
{
	return f & 1 ? HS_DIR_OUT : HS_DIR_IN;
}

/* A HelloRetryRequest was sent and the second ClientHello has not come yet (once it has,
 * t_retry_read holds the first one's read: stage.rs's Retry reads the same two fields). */
static __always_inline int retry_pending(struct hs_conn_state *c)
{
	return (c->r.flags & HS_F_HRR) && !c->r.t_retry_read;
}

/* The client's flight after a HelloRetryRequest (its second ClientHello) starts: keep the
 * retry round's times apart and start the flights again, so those after it line up with a
 * handshake without one. TLS 1.3 only, so no ChangeCipherSpec so far meant encryption. */
HS_FUNC int hello_retry_restart(struct hs_conn_state *c)
{
	if (!c)
		return 0;
	c->r.t_retry_arrive = c->r.t_arrive[HS_FL_C1];
	c->r.t_retry_read = c->r.t_first[HS_FL_C1];
	c->r.t_retry_sent = c->r.t_last[HS_FL_S1];
	c->r.cpu_retry_read = c->r.cpu_first[HS_FL_C1];
	c->r.cpu_retry_sent = c->r.cpu_last[HS_FL_S1];
	c->r.idle_before = (c->r.idle_before & ~(HS_IDLE_FLIGHT1 | HS_IDLE_RETRY)) |
			   ((c->r.idle_before & HS_IDLE_FLIGHT1) ? HS_IDLE_RETRY : 0);
	c->r.woke[HS_WOKE_RETRY] = c->r.woke[HS_WOKE_FLIGHT1];
	c->r.woke[HS_WOKE_FLIGHT1] = 0;
	for (int f = HS_FL_C1; f <= HS_FL_S1; f++) {
		c->r.t_arrive[f] = 0;
		c->r.t_first[f] = 0;
		c->r.t_last[f] = 0;
		c->r.cpu_first[f] = 0;
		c->r.cpu_last[f] = 0;
		c->r.rec_types[f] = 0;
		c->r.hs_types[f] = 0;
	}
	c->st[HS_DIR_IN].ccs = 0;
	c->st[HS_DIR_OUT].ccs = 0;
	c->flight = HS_FL_C1;
	/* early data sent with the first ClientHello is refused with it (RFC 8446 4.2.10) */
	if (c->r.flags & HS_F_EARLY_DATA) {
		c->r.flags &= ~HS_F_EARLY_DATA;
		c->r.t_req_read = 0;
		c->r.t_req_arrive = 0;
		c->r.cpu_req_read = 0;
		c->r.woke[HS_WOKE_RESPONSE] = 0;
		c->exchanges = 0;
	}
	return 0;
}

/* Bytes moved in `dir`: a change of direction starts the next flight (returns 1). Times
 * are kept only during the handshake (once the record is sent, the socket-layer hooks
 * pass `now` 0). */
static __always_inline int on_transfer(struct hs_conn_state *c, __u32 dir, __u32 n, __u64 now)
{
	__s8 f = c->flight;
	int new_flight = f < 0 || flight_dir(f) != dir;
	__u32 fi;

	if (new_flight) {
		f += 1;
		if (flight_dir(f) != dir)
			f += 1;
		c->flight = f;
		if (dir == HS_DIR_IN && retry_pending(c)) {
			hello_retry_restart(c);
			f = HS_FL_C1;
		}
		/* last_arrive carries over: bytes still queued from an earlier arrival (a TLS 1.3
		 * client's request sent with its Finished) arrived then */
		c->first_rec_done = 0;
	}
	if (dir == HS_DIR_OUT) {
		c->r.bytes_out += n;
	} else if (new_flight && c->r.phase == HS_PH_HANDSHAKE && arrivals_hooked) {
		__u64 pending;

		c->r.bytes_in += n;
		/* a handshake flight's first read. The arrival hook runs just after the bytes
		 * are queued, so it may still be running on another CPU: say so before taking
		 * the arrival (an exchange, a full barrier), and on_data_ready, which stores
		 * its arrival before it looks, either leaves it to this read or takes it back */
		c->arrival_missed = 1;
		pending = hs_xchg(&c->arrive_pending, 0);
		if (pending) {
			c->arrival_missed = 0;
			c->last_arrive = pending;
		}
	} else {
		/* what arrived since the last read is what this read gets */
		c->r.bytes_in += n;
		if (c->arrive_pending)
			c->last_arrive = c->arrive_pending;
		c->arrive_pending = 0;
	}
	/* the times of the handshake's four flights, until the handshake is done: writes
	 * after it are the response even when no read came between (a 0-RTT answer right
	 * behind the server's first flight) */
	fi = (__u8)f;
	if (fi >= HS_FLIGHTS || c->r.phase != HS_PH_HANDSHAKE)
		return new_flight;
	/* the compiler drops this mask as redundant; the verifier needs it to bound the index */
	barrier_var(fi);
	fi &= HS_FLIGHTS - 1;
	if (new_flight && dir == HS_DIR_OUT)
		c->r.t_first[fi] = now;
	c->r.t_last[fi] = now;
	/* on-CPU time where a service stage ends: a server flight's last write (where one
	 * starts, a client flight's first record, is read in on_record_end) */
	if (dir == HS_DIR_OUT)
		c->r.cpu_last[fi] = stage_ends(now);
	return new_flight;
}

/* SHA-256("HelloRetryRequest"): a HelloRetryRequest's random (RFC 8446 4.1.3). */
static __always_inline int is_retry_random(const __u64 *r)
{
	return r[0] == HS_HRR_RANDOM_0 && r[1] == HS_HRR_RANDOM_1 && r[2] == HS_HRR_RANDOM_2 &&
	       r[3] == HS_HRR_RANDOM_3;
}

/* Is the ServerHello at user address `msg` (handshake header first, 38 bytes readable) a
 * HelloRetryRequest? (A ServerHello in pieces: a whole one is checked in its copy.) */
HS_FUNC int is_hello_retry(__u64 msg)
{
	__u64 r[4];

	if (bpf_probe_read_user(r, sizeof(r), (const void *)(msg + 4 + 2)))
		return 0;
	return is_retry_random(r);
}

/* The length of a TLS 1.3 client's Finished record under cipher suite `cs` (the
 * ServerHello's): verify_data (the suite's hash length), its 4-byte header, the content
 * type and the AEAD tag. 0 for a suite that is not TLS 1.3's. Certificate and
 * CertificateVerify records are never as short, so with mutual TLS this tells the
 * Finished from them. */
static __always_inline int finished_len(__u8 cs0, __u8 cs1)
{
	if (cs0 != 0x13)
		return 0;
	switch (cs1) {
	case 0x01: /* TLS_AES_128_GCM_SHA256 */
	case 0x03: /* TLS_CHACHA20_POLY1305_SHA256 */
	case 0x04: /* TLS_AES_128_CCM_SHA256 */
		return 32 + 4 + 1 + 16;
	case 0x02: /* TLS_AES_256_GCM_SHA384 */
		return 48 + 4 + 1 + 16;
	case 0x05: /* TLS_AES_128_CCM_8_SHA256 */
		return 32 + 4 + 1 + 8;
	}
	return 0;
}

/* A whole ServerHello of the first flight, copied to `m` (`len` bytes, handshake header
 * first): is it a HelloRetryRequest, and else, how long is the client's Finished under
 * its cipher suite? Read from the copy userspace gets, not from the server's buffer again. */
static __always_inline void server_hello_copied(struct hs_conn_state *c, const __u8 *m, __u32 len)
{
	__u64 r[4];
	__u32 sid;

	if (len < 4 + 2 + 32 + 1)
		return;
	__builtin_memcpy(r, m + 4 + 2, sizeof(r));
	if (c->flight == HS_FL_S1 && !(c->r.flags & HS_F_HRR) && is_retry_random(r))
		c->r.flags |= HS_F_HRR;
	if (retry_pending(c))
		return;
	sid = m[4 + 2 + 32];
	if (len < 4 + 2 + 32 + 1 + sid + 2)
		return;
	c->fin_len = finished_len(m[4 + 2 + 32 + 1 + sid], m[4 + 2 + 32 + 1 + sid + 1]);
}

/* Send `len` bytes at user address `at` of the hello being walked in `dir` (its length
 * in the stream's msg_len), from `offset` in the message (0: the whole hello, else a
 * piece), to userspace through the per-CPU scratch: only those bytes go through the ring
 * buffer; counted if it has no room. (Global functions are verified once, not at every
 * call site: the parser's loops stay within the verifier's budget. User pointers are
 * passed to them as plain numbers.) */
HS_FUNC int send_hello(struct hs_conn_state *c, __u32 dir, __u32 offset, __u64 at, __u32 len)
{
	__u32 zero = 0;
	struct hs_hello *h = bpf_map_lookup_elem(&hello_scratch, &zero);
	__u64 waiting;

	if (!c || !h)
		return 0;
	if (len > HS_HELLO_CAP)
		len = HS_HELLO_CAP;
	h->rec = offset ? HS_REC_HELLO_PART : HS_REC_HELLO;
	h->dir = dir;
	h->conn_id = c->r.conn_id;
	h->msg_len = c->st[dir & 1].msg_len;
	h->offset = offset;
	h->pad = 0;
	if (bpf_probe_read_user(h->data, len, (const void *)at))
		len = 0;
	h->cap_len = len;
	if (dir == HS_DIR_OUT && !offset && len && h->data[0] == HT_SERVER_HELLO)
		server_hello_copied(c, h->data, len);
	waiting = bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA);
	if (bpf_ringbuf_output(&events, h, __builtin_offsetof(struct hs_hello, data) + len,
			       waiting >= HS_WAKEUP_BYTES ? BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP))
		count(HS_C_HELLOS_DROPPED);
	return 0;
}

/* A ClientHello or ServerHello of `msg_len` bytes at user address `msg`, `avail` bytes of
 * it here: copy it out whole (up to HS_HELLO_CAP) for userspace to parse. */
static __always_inline void capture_hello(struct hs_conn_state *c, __u32 dir, __u64 msg, __u32 msg_len,
					  __u32 avail)
{
	send_hello(c, dir, 0, msg, msg_len < avail ? msg_len : avail);
}

/* The next `len` body bytes of a hello in pieces, at user address `at`: copy them out. */
static __always_inline void copy_hello_part(struct hs_conn_state *c, __u32 dir, __u64 at, __u32 len)
{
	struct hs_stream *st = &c->st[dir & 1];

	if (len > st->hello_left)
		len = st->hello_left;
	send_hello(c, dir, st->hello_off, at, len);
	st->hello_off += len;
	st->hello_left -= len;
}

/* A record starts: note its type for the flight. Its body is walked as it passes. */
static __always_inline void on_record_start(struct hs_conn_state *c, struct hs_stream *st)
{
	__u8 type = st->rec_type;

	/* the handshake's flights only: later ones (requests, responses) are not typed */
	if (type >= REC_CCS && type <= REC_APPDATA && (__u8)c->flight < HS_FLIGHTS)
		c->r.rec_types[(__u32)c->flight & 3] |= 1u << (type - REC_CCS);
	/* (TLS 1.3's compatibility ChangeCipherSpec, known by its retry, changes nothing) */
	if (type == REC_CCS && !(c->r.flags & HS_F_HRR))
		st->ccs = 1;
	if (type != REC_HANDSHAKE) {
		/* a handshake message cannot go on past another record type: start afresh */
		st->msg_left = 0;
		st->hello_left = 0;
		st->body_have = 0;
	}
}

/* Up to `avail` (>= 1) bytes of a plaintext handshake record's body at user address `at`:
 * assemble the next message header, or pass over (and copy out, for a hello in pieces)
 * the current message's body. Returns the bytes taken (>= 1).
 * It runs at every message header and body run a server writes or reads: keep its stack
 * under 64 bytes (llvm-objdump shows the deepest r10 offset). From that size, newer
 * kernels (6.13+) give a tracing program's subprogram a per-CPU stack of its own, which
 * costs at every call (docs/cost.md). */
HS_FUNC int walk_message(struct hs_conn_state *c, __u32 dir, __u64 at, __u32 avail)
{
	struct hs_stream *st;
	__u32 have, need, mlen, take, f;
	__u8 type;

	if (!c || !avail)
		return 1;
	st = &c->st[dir & 1];
	if (st->msg_left) {
		take = avail < st->msg_left ? avail : st->msg_left;
		if (st->hello_left)
			copy_hello_part(c, dir, at, take);
		st->msg_left -= take;
		return take;
	}
	/* the 4-byte message header, which may be split over records and reads, or read
	 * with its record's header (walk_step) */
	if (st->body_have == HS_BODY_PREREAD && avail >= 4) {
		have = 0;
		need = 4;
	} else {
		have = st->body_have & 3;
		need = 4 - have;
		if (need > avail)
			need = avail;
		barrier_var(need);
		need &= 7;
		if (bpf_probe_read_user(&st->body[have], need, (const void *)at))
			return avail; /* unreadable: pass over what is left of this buffer */
		if (have + need < 4) {
			st->body_have = have + need;
			return need;
		}
	}
	st->body_have = 0;
	type = st->body[0];
	mlen = ((__u32)st->body[1] << 16) | ((__u32)st->body[2] << 8) | st->body[3];
	if (type < 32 && (__u8)c->flight < HS_FLIGHTS) {
		/* the mask on the register that indexes, loaded here: a value kept across the
		 * calls below is spilled, and 5.10's verifier forgets a spilled value's bounds */
		f = c->flight;
		barrier_var(f);
		f &= 3;
		c->r.hs_types[f] |= 1u << type;
	}
	st->msg_left = mlen;
	st->msg_len = mlen + 4;
	st->hello_left = 0;
	if (type == HT_SERVER_KEY_EXCHANGE) {
		/* TLS 1.2's: its first 3 body bytes name an ECDHE group, read when the header
		 * and they are in this buffer (a server writes its flight at once). Its own
		 * branch, left at once: nothing of it is on any other message's path. */
		if (dir == HS_DIR_OUT && have == 0 && mlen >= 3 && avail - need >= 3)
			bpf_probe_read_user(c->r.ske_head, 3, (const void *)(at + need));
		return need;
	}
	if ((type == HT_CLIENT_HELLO && dir == HS_DIR_IN) ||
	    (type == HT_SERVER_HELLO && dir == HS_DIR_OUT)) {
		take = avail - need; /* the body bytes in this buffer */
		if (have == 0 && (take >= mlen || take >= HS_HELLO_CAP - 4)) {
			/* all of it (or all that is kept) right here: one copy (a ServerHello's
			 * retry random and cipher suite are read from it) */
			capture_hello(c, dir, at, mlen + 4, avail);
			take = take < mlen ? take : mlen;
			st->msg_left -= take;
			return need + take;
		}
		if (type == HT_SERVER_HELLO && have == 0 && take >= 34 && c->flight == HS_FL_S1 &&
		    !(c->r.flags & HS_F_HRR) && is_hello_retry(at))
			c->r.flags |= HS_F_HRR;
		/* in pieces, from the body on, as it passes */
		st->hello_left = mlen < HS_HELLO_CAP - 4 ? mlen : HS_HELLO_CAP - 4;
		st->hello_off = 4;
	}
	return need;
}

/* Up to `avail` bytes of a plaintext alert record's body at `at`: its two bytes (level,
 * description), however the reads cut them. Returns the bytes taken. */
HS_FUNC int walk_alert(struct hs_conn_state *c, __u32 dir, __u64 at, __u32 avail, __u32 pos)
{
	struct hs_stream *st;
	__u32 have, need;

	if (!c || !avail)
		return 1;
	st = &c->st[dir & 1];
	if (pos >= 2 || c->r.alert_level)
		return avail;
	have = pos;
	need = 2 - have;
	if (need > avail)
		need = avail;
	/* the compiler drops these masks as redundant; the verifier needs them */
	barrier_var(have);
	barrier_var(need);
	have &= 1;
	need &= 3;
	if (bpf_probe_read_user(&st->body[have], need, (const void *)at))
		return avail;
	if (have + need == 2) {
		c->r.alert_level = st->body[0];
		c->r.alert_desc = st->body[1];
		c->r.alert_dir = dir;
	}
	return need;
}

static __always_inline int is_tls13(struct hs_conn_state *c)
{
	return c->r.rec_types[HS_FL_S1] & HS_RT_APPDATA;
}

/* Did the TLS view of the connection end during the handshake, with a fatal alert or a
 * close_notify (plaintext, from either side)? What either side sends after it is not
 * TLS's (MariaDB answers a client's alert with a plaintext error packet): its bytes are
 * counted, never walked as records. */
static __always_inline int tls_ended(struct hs_conn_state *c)
{
	return c->r.alert_level == 2 || (c->r.alert_level && c->r.alert_desc == 0);
}

/* Does SSL_do_handshake's return say when the handshake ends? */
static __always_inline int ssl_ends(struct hs_conn_state *c)
{
	return (c->r.flags & (HS_F_UPROBE | HS_F_WIRE_ENDS)) == HS_F_UPROBE;
}

/* The handshake is complete on the wire at `now`. */
static __always_inline void wire_done(struct hs_conn_state *c, __u64 now)
{
	c->wire_done = 1;
	/* SSL_do_handshake already returned 1: it said when, and the writes the wire took
	 * for more of the server's flight were the response (a blocking server that read the
	 * request with the client's Finished answers before it reads again) */
	if (c->r.flags & HS_F_HS_DONE_SSL)
		return;
	c->r.t_hs_done = now;
	/* with uprobes on this connection, SSL_do_handshake's return says when */
	if (!ssl_ends(c)) {
		handshake_complete(c);
		/* TLS 1.3's end is found at the next read: its last write's CPU reading */
		c->r.cpu_hs_done = now == c->done_at && c->r.t_last[HS_FL_S2] == now
					   ? c->r.cpu_last[HS_FL_S2]
					   : thread_cpu_now(now);
	}
}

/* Handshake bytes of `c`, whose SSL_do_handshake calls were seen, move at `now`: outside
 * such a call, the library goes on with the handshake elsewhere (SSL_read, which is not
 * hooked by default) and SSL_do_handshake will not return 1 for it: from here the wire
 * says when it ends (HS_F_WIRE_ENDS). */
static __always_inline void ssl_left_handshake(struct hs_conn_state *c, __u64 now)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid(), slot = tid % HS_IO_SLOTS;
	struct ssl_call *sc = bpf_map_lookup_elem(&ssl_in_flight, &slot);

	if (sc && sc->tid == tid)
		return;
	c->r.flags |= HS_F_WIRE_ENDS;
	/* the wire saw the end already, waiting for the library's word (no CPU reading of
	 * that moment is left) */
	if (c->wire_done && !(c->r.flags & HS_F_HS_DONE_SSL))
		handshake_complete(c);
}

/* A TLS 1.3 server writes again after the client's Finished, in a later write call than
 * its first after it (`now` is this call's time), and the first request already came in
 * the same read as that Finished: the server answers without reading again (Apache), so
 * this call is the response, and the NewSessionTickets were the first call. Wire only:
 * with uprobes, SSL_do_handshake's return says where the handshake ends. */
static __always_inline int answers_unread_request(struct hs_conn_state *c, __u64 now)
{
	return c->r.t_req_read && c->client_fin && !c->wire_done && c->flight == HS_FL_S2 &&
	       c->r.t_first[HS_FL_S2] != now && !ssl_ends(c) && is_tls13(c);
}

/* TLS 1.3 0-RTT, from the wire: the server writes again in its first flight, in a later
 * call than the flight's first, without having read the client's second flight. It
 * answers the early request (0.5-RTT data): the handshake, as far as serving goes, ended
 * with the flight's last write before this one (a PSK resumption's flight takes one
 * write). Called before this write's bytes are counted. */
static __always_inline int answers_early_request(struct hs_conn_state *c)
{
	return (c->r.flags & HS_F_EARLY_DATA) && c->flight == HS_FL_S1 && !c->wire_done &&
	       c->r.phase == HS_PH_HANDSHAKE && !ssl_ends(c);
}

/* A record's last byte has passed: the first record of a client flight is the read
 * the server acts on; and is the handshake complete? */
static __always_inline void on_record_end(struct hs_conn_state *c, __u32 dir, __u8 type, __u64 now)
{
	__s8 f = c->flight;
	int tls13 = is_tls13(c);
	int s1_ccs = c->r.rec_types[HS_FL_S1] & HS_RT_CCS;

	if (dir == HS_DIR_IN && !c->first_rec_done) {
		__u32 fi = (__u8)f;

		c->first_rec_done = 1;
		if (fi < HS_FLIGHTS) {
			/* the compiler drops this mask as redundant; the verifier needs it to
			 * bound the index (6.1's lost the bound through a spill) */
			barrier_var(fi);
			fi &= HS_FLIGHTS - 1;
			c->r.t_first[fi] = now;
			/* read before its arrival was seen: it arrived within this read (and so
			 * did whatever else this flight's reads take) */
			if (c->arrival_missed) {
				c->last_arrive = now;
				count(HS_C_LATE_ARRIVAL);
			}
			c->r.t_arrive[fi] = c->last_arrive;
			c->r.cpu_first[fi] =
				stage_starts(c, f == HS_FL_C1 ? HS_WOKE_FLIGHT1 : HS_WOKE_FLIGHT2, now);
		}
	}
	/* TLS 1.3 0-RTT: application data in the client's first flight is early data, the
	 * first request (an alert is never sent that way) */
	if (dir == HS_DIR_IN && type == REC_APPDATA && !c->r.t_req_read && f == HS_FL_C1 &&
	    c->r.phase == HS_PH_HANDSHAKE)
		c->r.flags |= HS_F_EARLY_DATA;
	/* the first request's first record is complete: after the handshake, right behind
	 * the client's Finished before the server is done (a client that does not wait, e.g.
	 * a TLS 1.3 client's request in the same segment as its Finished), or as early data */
	if (dir == HS_DIR_IN && type == REC_APPDATA && !c->r.t_req_read &&
	    (c->r.phase == HS_PH_WAIT_REQUEST || (c->r.phase == HS_PH_HANDSHAKE && c->client_fin) ||
	     (c->r.flags & HS_F_EARLY_DATA)) &&
	    !(tls13 && c->st[HS_DIR_IN].rec_len == HS_TLS13_ALERT_LEN)) {
		if (c->r.phase == HS_PH_WAIT_REQUEST)
			c->r.phase = HS_PH_REQUEST;
		c->r.t_req_read = now;
		c->r.t_req_arrive = c->last_arrive;
		c->r.cpu_req_read = stage_starts(c, HS_WOKE_RESPONSE, now);
		c->exchanges = 1;
	}
	/* TLS 1.2: the client's Finished (a handshake record after its ChangeCipherSpec) */
	if (dir == HS_DIR_IN && type == REC_HANDSHAKE && c->st[HS_DIR_IN].ccs)
		c->client_fin = 1;
	if (c->wire_done)
		return;
	if (dir == HS_DIR_OUT && type == REC_HANDSHAKE && c->st[HS_DIR_OUT].ccs && !tls13 &&
	    f >= HS_FL_S2) {
		/* TLS 1.2 full: the server's Finished is written */
		wire_done(c, now);
	} else if (dir == HS_DIR_IN && type == REC_HANDSHAKE && c->st[HS_DIR_IN].ccs && !tls13 &&
		   s1_ccs) {
		/* TLS 1.2 resumed: the client's Finished is read */
		wire_done(c, now);
	} else if (dir == HS_DIR_IN && type == REC_APPDATA && tls13 && f == HS_FL_C2 && !c->client_fin &&
		   (!c->fin_len || c->st[HS_DIR_IN].rec_len == c->fin_len)) {
		/* TLS 1.3: the client's Finished is read (after its Certificate and
		 * CertificateVerify, with mutual TLS); tickets may follow */
		if (!c->done_at)
			c->done_at = now;
		c->client_fin = 1;
	} else if (dir == HS_DIR_OUT && tls13 && f == HS_FL_S2 && c->done_at &&
		   !answers_unread_request(c, now)) {
		/* TLS 1.3: a NewSessionTicket is written */
		c->done_at = now;
	}
}

/* The server reads (or tries to) again: TLS 1.3 is complete once it does after the
 * client's Finished, and a response is complete once it does after writing it. */
static __always_inline void on_read_attempt(struct hs_conn_state *c, __u64 now)
{
	if (c->done_at && !c->wire_done)
		wire_done(c, c->done_at);
	if (c->r.phase == HS_PH_RESPONSE) {
		/* (`now` is 0 for a call that moved nothing: see call_time) */
		emit_conn(c, now ? now : bpf_ktime_get_ns(), outcome_now(c));
		c->r.phase = HS_PH_DONE;
	}
}

/* Does a client flight whose bytes start at `buf` (an iovec array if `iovcnt`) open with
 * a request, not an alert nor the end of early data? Only its first record header is
 * read. */
static __always_inline int is_request(struct hs_conn_state *c, __u64 buf, __u32 iovcnt)
{
	struct iovec first;
	__u32 len;
	__u8 h[5];

	/* plain text has no records; a call whose buffer is unknown is counted */
	if (c->not_tls || !buf)
		return 1;
	if (iovcnt) {
		if (read_iovec(&first, buf, 0, iovcnt))
			return 0;
		buf = (__u64)first.iov_base;
	}
	if (bpf_probe_read_user(h, 5, (const void *)buf) || h[0] != REC_APPDATA)
		return 0;
	if (!is_tls13(c))
		return 1;
	len = ((__u32)h[3] << 8) | h[4];
	return len != HS_TLS13_ALERT_LEN && !((c->r.flags & HS_F_EARLY_DATA) && len == HS_TLS13_EOED_LEN);
}

/* After the bytes are parsed: the first request and response of a plain-text stream
 * (it has no records), the response's writes of either, and later requests counted from
 * the record header that starts each client flight (`buf`, user memory). */
static __always_inline void on_exchange(struct hs_conn_state *c, __u32 dir, int new_flight, __u64 buf,
					__u32 iovcnt, __u64 now)
{
	__u8 ph = c->r.phase;

	if (dir == HS_DIR_IN) {
		if (c->not_tls && ph == HS_PH_HANDSHAKE) {
			c->r.phase = HS_PH_REQUEST;
			c->r.t_req_read = now;
			c->r.t_req_arrive = c->last_arrive;
			c->r.cpu_req_read = stage_starts(c, HS_WOKE_RESPONSE, now);
			c->exchanges = 1;
		} else if (ph == HS_PH_DONE && new_flight && is_request(c, buf, iovcnt)) {
			c->exchanges += 1;
		}
		return;
	}
	if (ph == HS_PH_HANDSHAKE && c->done_at && answers_unread_request(c, now)) {
		wire_done(c, c->done_at);
		ph = c->r.phase;
	}
	if (ph == HS_PH_REQUEST || ph == HS_PH_RESPONSE) {
		if (!c->r.t_resp_first)
			c->r.t_resp_first = now;
		c->r.t_resp_last = now;
		c->r.cpu_resp_last = stage_ends(now);
		c->r.phase = HS_PH_RESPONSE;
	}
}

/* The record stream in `dir` stopped making sense: stop parsing it. The other direction
 * goes on (the server's alert about the bytes it could not parse is still seen). */
static __always_inline void desync(struct hs_conn_state *c, __u32 dir)
{
	c->st[dir & 1].desync = 1;
	if (c->r.flags & HS_F_DESYNC)
		return;
	c->r.flags |= HS_F_DESYNC;
	count(HS_C_DESYNC);
}

/* The record header just assembled in `st` does not parse. The client's very first bytes
 * are not TLS if they do not even look like a record (plain HTTP, say); a record that
 * does (type and version right, too long) is a TLS peer breaking the protocol. */
static __always_inline void bad_header(struct hs_conn_state *c, struct hs_stream *st, __u32 dir)
{
	if (dir == HS_DIR_IN && c->flight == HS_FL_C1 && !c->r.rec_types[HS_FL_C1] &&
	    (st->hdr[0] < REC_CCS || st->hdr[0] > REC_HEARTBEAT || st->hdr[1] != 3)) {
		c->not_tls = 1;
		c->r.outcome = HS_OUTCOME_NOT_TLS;
	}
	desync(c, dir);
}

/* Is the header in `st` the start of an SSLv2-format ClientHello (RFC 6101 E.2: a 2-byte
 * length with the top bit set, msg_type 1, a TLS version)? Only as a client's first
 * bytes. Its body is then skipped as one handshake record holding a ClientHello. */
static __always_inline int sslv2_hello(struct hs_conn_state *c, struct hs_stream *st, __u32 dir)
{
	__u32 len = (((__u32)st->hdr[0] & 0x7f) << 8) | st->hdr[1];

	if (dir != HS_DIR_IN || c->flight != HS_FL_C1 || c->r.rec_types[HS_FL_C1] ||
	    !(st->hdr[0] & 0x80) || st->hdr[2] != HT_CLIENT_HELLO || st->hdr[3] != 3 || len < 3)
		return 0;
	st->rec_type = REC_SSLV2_HELLO;
	st->rec_left = len - 3; /* msg_type and version were the header's last three bytes */
	st->rec_len = len - 3;
	c->r.rec_types[HS_FL_C1] |= HS_RT_HANDSHAKE;
	c->r.hs_types[HS_FL_C1] |= 1u << HT_CLIENT_HELLO;
	c->r.flags |= HS_F_SSLV2_HELLO;
	return 1;
}

struct walk {
	struct hs_conn_state *c;
	__u64 buf;
	__u64 now;
	__u32 dir;
	__u32 n;
	__u32 off;
};

/* `n` more bytes of the current record's body have passed (at most what is left of it):
 * at its last byte, the record ends. */
static __always_inline void body_taken(struct hs_conn_state *c, __u32 dir, __u32 n, __u64 now)
{
	struct hs_stream *st = &c->st[dir & 1];

	st->rec_left -= n;
	if (!st->rec_left)
		on_record_end(c, dir, st->rec_type, now);
}

/* One step of the walk: a record header, or the next run of a record's body. 1 stops it. */
static long walk_step(__u32 i, struct walk *w)
{
	struct hs_conn_state *c = w->c;
	struct hs_stream *st;
	__u32 type, len, have, need, off = w->off, n = w->n, pre = 0;
	__u8 hdrs[HS_HDRS_LEN];

	if (!c || off >= n || c->emitted || c->pre_watch)
		return 1;
	st = &c->st[w->dir & 1];
	if (st->desync)
		return 1;
	if (st->rec_left) {
		/* the body of the current record: walked while plaintext, else passed over */
		__u32 avail = n - off < st->rec_left ? n - off : st->rec_left, take = avail;

		if (st->rec_type == REC_HANDSHAKE && !st->ccs)
			take = walk_message(c, w->dir, w->buf + off, avail);
		else if (st->rec_type == REC_ALERT && !st->ccs)
			take = walk_alert(c, w->dir, w->buf + off, avail, st->rec_len - st->rec_left);
		if (take > avail)
			take = avail;
		w->off = off + take;
		body_taken(c, w->dir, take, w->now);
		return 0;
	}
	/* assemble the 5-byte record header, which may be split over reads; a whole one is
	 * read with the 4 bytes after it, the header of the handshake message it may start */
	have = st->hdr_have & 7;
	need = have < 5 ? 5 - have : 0;
	if (have == 0 && n - off >= HS_HDRS_LEN) {
		if (bpf_probe_read_user(hdrs, HS_HDRS_LEN, (const void *)(w->buf + off)))
			return 1;
		__builtin_memcpy(st->hdr, hdrs, 5);
		pre = 1;
	} else {
		if (need > n - off)
			need = n - off;
		if (bpf_probe_read_user(&st->hdr[have], need & 7, (const void *)(w->buf + off)))
			return 1;
	}
	off += need;
	w->off = off;
	if (have + need < 5) {
		st->hdr_have = have + need;
		return 1;
	}
	st->hdr_have = 0;
	type = st->hdr[0];
	len = ((__u32)st->hdr[3] << 8) | st->hdr[4];
	if (sslv2_hello(c, st, w->dir)) {
		if (!st->rec_left)
			on_record_end(c, w->dir, REC_SSLV2_HELLO, w->now);
		return 0;
	}
	if (type < REC_CCS || type > REC_HEARTBEAT || st->hdr[1] != 3 || len > HS_REC_MAX_LEN) {
		/* the connection's first bytes, not TLS: a protocol that may switch to TLS
		 * later (STARTTLS) is watched from here (preamble.bpf.h) */
		if (have == 0 && preamble_start(c, w->dir, w->buf + off - 5, n - (off - 5), w->now)) {
			w->off = n;
			return 1;
		}
		/* behind the alert that ended TLS, in the same buffer: no record, and no
		 * desync either (tls_ended) */
		if (tls_ended(c)) {
			w->off = n;
			return 1;
		}
		bad_header(c, st, w->dir);
		return 1;
	}
	st->rec_type = type;
	st->rec_left = len;
	st->rec_len = len;
	on_record_start(c, st);
	/* a plaintext handshake record that starts a message: its header is read already */
	if (pre && type == REC_HANDSHAKE && !st->ccs && !st->msg_left && !st->body_have && len >= 4) {
		__builtin_memcpy(st->body, hdrs + 5, 4);
		st->body_have = HS_BODY_PREREAD;
	}
	if (!len)
		on_record_end(c, w->dir, type, w->now);
	return 0;
}

/* Would the parser read any of the `ret` bytes a call moved in `dir` (a failed call and a
 * peek move none)? Not when they all lie inside the body of a record whose bytes are
 * passed over (encrypted, or neither handshake nor alert), past its header. */
static __always_inline int wants_bytes(struct hs_conn_state *c, __u32 dir, long ret, __u32 peek)
{
	struct hs_stream *st = &c->st[dir & 1];

	if (ret <= 0 || peek || st->desync || c->emitted)
		return 0;
	/* a preamble watched for TLS: its first bytes are looked at (preamble_io) */
	if (c->pre_watch)
		return 1;
	if (st->hdr_have || st->rec_left < ret)
		return 1;
	return (st->rec_type == REC_HANDSHAKE || st->rec_type == REC_ALERT) && !st->ccs;
}

/* `n` bytes inside the current record's body, which wants_bytes said are passed over: what
 * walk_step does with them, without the buffer. */
static __always_inline void pass_over(struct hs_conn_state *c, __u32 dir, __u32 n, __u64 now)
{
	struct hs_stream *st = &c->st[dir & 1];

	if (c->emitted || st->desync || st->rec_left < n)
		return;
	body_taken(c, dir, n, now);
}

#ifdef HS_BASIC
/* One step of the walk as a global function, verified once rather than at each step of
 * the loop below. The kernels of this build take only numbers as a global function's
 * arguments: the connection is looked up by its socket `skey`, and `dir_n` is the
 * direction and the buffer's length (dir << 32 | n). Returns the offset the step reached,
 * with bit 32 set when the walk stops. */
__noinline __u64 walk_step_key(__u64 skey, __u64 dir_n, __u64 buf, __u64 now, __u32 off)
{
	struct walk w = { .c = bpf_map_lookup_elem(&conns, &skey), .buf = buf, .now = now,
			  .dir = dir_n >> 32, .n = (__u32)dir_n, .off = off };
	long stop = walk_step(0, &w);

	return w.off | ((__u64)(stop != 0) << 32);
}
#endif

/* Walk the records in `n` bytes at user address `buf`, read (IN) or written (OUT), of
 * connection `c` on socket `skey`. (A global function: verified once, not at each of its
 * call sites, and its code is in each program once. In the HS_BASIC build a loop of global
 * steps, bounded by HS_BASIC_WALK_STEPS, for want of bpf_loop.) */
#ifdef HS_BASIC
static __always_inline int parse_bytes(struct hs_conn_state *c, __u64 skey, __u32 dir, __u64 buf,
				       __u32 n, __u64 now)
{
	__u64 step = 0, key = 0;
	__u32 off = 0;

	/* a socket pointer of a BTF-typed hook is no number to the verifier: copy it as one */
	bpf_probe_read_kernel(&key, sizeof(key), &skey);
	for (__u32 i = 0; i < HS_BASIC_WALK_STEPS; i++) {
		step = walk_step_key(key, (__u64)dir << 32 | n, buf, now, off);
		off = (__u32)step;
		if (step >> 32)
			break;
	}
	/* bytes left unwalked would put the next read's parse out of step */
	if (off < n && !c->emitted && !c->st[dir & 1].desync && !c->pre_watch)
		desync(c, dir);
	return 0;
}
#else
#define parse_bytes(c, skey, dir, buf, n, now) parse_bytes_walk(c, dir, buf, n, now)
__noinline int parse_bytes_walk(struct hs_conn_state *c, __u32 dir, __u64 buf, __u32 n, __u64 now)
{
	struct walk w = { .c = c, .buf = buf, .now = now, .dir = dir, .n = n };

	if (!c)
		return 0;
	bpf_loop(HS_WALK_STEPS, walk_step, &w, 0);
	/* bytes left unwalked would put the next read's parse out of step */
	if (w.off < n && !c->emitted && !c->st[dir & 1].desync && !c->pre_watch)
		desync(c, dir);
	return 0;
}
#endif

/* Walk up to HS_IOV_SEGS segments of an iovec array, `n` bytes in all. */
static __always_inline void parse_iov(struct hs_conn_state *c, __u64 skey, __u32 dir,
				      const struct iovec *iov, __u32 iovcnt, __u32 n, __u64 now)
{
	for (int i = 0; i < HS_IOV_SEGS; i++) {
		struct iovec v;
		__u32 seg;

		if ((__u32)i >= (iovcnt & ~HS_IOV_KERNEL) || n == 0)
			break;
		if (read_iovec(&v, (__u64)iov, i, iovcnt))
			break;
		seg = v.iov_len < n ? v.iov_len : n;
		parse_bytes(c, skey, dir, (__u64)v.iov_base, seg, now);
		n -= seg;
	}
}

#endif
