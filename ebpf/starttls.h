/* SPDX-License-Identifier: GPL-2.0-only OR MIT */
/*
 * The plaintext preamble before a TLS handshake on the same connection (STARTTLS and its
 * kin), recognized from the first HS_PRE_PEEK bytes of each flight: which protocol the
 * connection speaks, whether the client asked for TLS, and whether the server let it.
 *
 *   PostgreSQL  client: SSLRequest (8 bytes)         server: 'S' go on, 'N' refused
 *   SMTP        server: "220" banner, client EHLO    client: STARTTLS  server: 220 | 4xx 5xx
 *   FTP         server: "220" banner, client USER..  client: AUTH TLS  server: 234 | 4xx 5xx
 *   IMAP        server: "* OK"                       client: tag STARTTLS  server: tag OK | NO BAD
 *   POP3        server: "+OK"                        client: STLS      server: +OK | -ERR
 *   LDAP        client: a BER message                client: ExtendedRequest StartTLS
 *                                                    server: ExtendedResponse, resultCode 0 | other
 *   XMPP        client: "<?xml" or "<stream"         client: <starttls  server: <proceed | <failure
 *   MySQL       server: greeting (protocol 10)       client: SSLRequest (a 32-byte packet, seq 1),
 *                                                    then TLS at once
 *   HTTP        client: a method                     (no preamble: plain HTTP)
 *
 * Only these bytes are looked at, and only while the connection has sent no TLS record;
 * nothing of them is kept but the protocol and the state below. Pure C, no BPF helper:
 * the BPF programs include it (preamble.bpf.h), and so do the host-side unit tests
 * (tools/tests/starttls.rs), which is why the functions take a plain byte array. The
 * includer defines HS_INLINE.
 */
#ifndef HSTRACE_STARTTLS_H
#define HSTRACE_STARTTLS_H

/* Bytes of each flight looked at (the array is 2 * HS_PRE_PEEK for the verifier's masks). */
#define HS_PRE_PEEK 16

/* (HS_OPAQUE hides the byte array's address: knowing it aligned, clang would add a masked
 * index to it with an OR, which the BPF verifier refuses on a pointer.) */
#include "opaque.h"

/* The letter `c` in lower case. */
HS_INLINE __u8 hs_lc(__u8 c)
{
	return c >= 'A' && c <= 'Z' ? c + 32 : c;
}

/* Do the `n` bytes at `b` hold word `w` (lower case, `l` letters) at `at`, case folded? */
HS_INLINE int hs_word(const __u8 *b, __u32 n, __u32 at, const char *w, __u32 l)
{
	HS_OPAQUE(b);
	if (at + l > n)
		return 0;
	for (__u32 i = 0; i < l && i < HS_PRE_PEEK; i++)
		if (hs_lc(b[(at + i) & (HS_PRE_PEEK - 1)]) != (__u8)w[i])
			return 0;
	return 1;
}

/* The same, the word followed by the end of the bytes, a space or a line end. */
HS_INLINE int hs_command(const __u8 *b, __u32 n, __u32 at, const char *w, __u32 l)
{
	__u8 next;

	HS_OPAQUE(b);
	if (!hs_word(b, n, at, w, l))
		return 0;
	if (at + l >= n)
		return 1;
	next = b[(at + l) & (HS_PRE_PEEK - 1)];
	return next == ' ' || next == '\r' || next == '\n';
}

/* An SMTP, FTP or IMAP reply's first digit or status after a tag: where the text after the
 * first space starts (IMAP's tag), or n if there is none in the bytes. */
HS_INLINE __u32 hs_after_tag(const __u8 *b, __u32 n)
{
	HS_OPAQUE(b);
	for (__u32 i = 0; i < HS_PRE_PEEK; i++)
		if (i < n && b[i] == ' ')
			return i + 1;
	return n;
}

/* The first HS_PRE_PEEK bytes at `b` as two numbers, whose byte `i` hs_byte takes by a
 * shift: where the index varies (LDAP's lengths), a number, not an address. A varying
 * index added to the bytes' address makes a pointer that 6.12's verifier loses track of
 * through the function's spills. (Little-endian: x86-64, arm64 and BPF.) */
struct hs_peek {
	__u64 lo, hi;
};

HS_INLINE struct hs_peek hs_peek_of(const __u8 *b)
{
	struct hs_peek p;

	__builtin_memcpy(&p.lo, b, 8);
	__builtin_memcpy(&p.hi, b + 8, 8);
	return p;
}

HS_INLINE __u8 hs_byte(struct hs_peek p, __u32 i)
{
	i &= HS_PRE_PEEK - 1;
	return (__u8)((i < 8 ? p.lo : p.hi) >> ((i & 7) * 8));
}

/* Where an LDAP message's protocolOp starts (after its SEQUENCE header and messageID), or
 * 0 when the bytes are not such a message. */
HS_INLINE __u32 hs_ldap_op(struct hs_peek p, __u32 n)
{
	__u32 at, len;

	if (n < 7 || hs_byte(p, 0) != 0x30)
		return 0;
	if (hs_byte(p, 1) < 0x80)
		at = 2;
	else if (hs_byte(p, 1) == 0x81)
		at = 3;
	else if (hs_byte(p, 1) == 0x82)
		at = 4;
	else
		return 0;
	/* messageID: INTEGER of 1 to 4 bytes */
	len = hs_byte(p, at + 1);
	if (hs_byte(p, at) != 0x02 || len < 1 || len > 4)
		return 0;
	at += 2 + len;
	return at < n ? at : 0;
}

/* Does the LDAP protocolOp at `op` (hs_ldap_op's; 0: none) have tag `tag` and open with an
 * element of tag `tag2` and length `len2`, whose first byte is in the bytes too? */
HS_INLINE int hs_ldap_is(struct hs_peek p, __u32 n, __u32 op, __u8 tag, __u8 tag2, __u8 len2)
{
	return op && op + 5 <= n && hs_byte(p, op) == tag && hs_byte(p, op + 2) == tag2 &&
	       hs_byte(p, op + 3) == len2;
}

/* The first bytes of a connection, before any TLS record, in direction `dir`: which
 * protocol, and whether a TLS handshake may still follow them (1: watch the next flights).
 * `proto` and `state` are the record's (hs_conn.pre_proto, pre_state). */
HS_INLINE int hs_pre_first(__u8 *proto, __u8 *state, __u32 dir, const __u8 *b, __u32 n)
{
	struct hs_peek p;
	__u32 op;

	HS_OPAQUE(b);
	*state = HS_PRE_PLAIN;
	if (dir == HS_DIR_OUT) {
		/* the server speaks first: a banner */
		if (n >= 4 && b[0] == '2' && b[1] == '2' && b[2] == '0' && (b[3] == ' ' || b[3] == '-')) {
			*proto = HS_PROTO_BANNER_220; /* SMTP or FTP: the client's first command says */
			return 1;
		}
		if (hs_word(b, n, 0, "* ok", 4) || hs_word(b, n, 0, "* preauth", 9)) {
			*proto = HS_PROTO_IMAP;
			return 1;
		}
		if (hs_word(b, n, 0, "+ok", 3)) {
			*proto = HS_PROTO_POP3;
			return 1;
		}
		/* MySQL's greeting: a 3-byte length, sequence 0, protocol version 10 */
		if (n >= 5 && b[2] == 0 && b[3] == 0 && b[4] == 10 && (b[0] | (b[1] << 8)) >= 20) {
			*proto = HS_PROTO_MYSQL;
			return 1;
		}
		return 0;
	}
	/* the client speaks first */
	if (n >= 8 && b[0] == 0 && b[1] == 0 && b[2] == 0 && b[4] == 0x04 && b[5] == 0xd2 &&
	    b[6] == 0x16) {
		/* PostgreSQL's requests (code 1234 in the high half): SSLRequest (5679, length 8)
		 * asks for TLS; GSSENCRequest (5680) and CancelRequest (5678) do not */
		*proto = HS_PROTO_POSTGRESQL;
		if (b[3] == 8 && b[7] == 0x2f) {
			*state = HS_PRE_ASKED;
			return 1;
		}
		return 0;
	}
	if (n >= 8 && b[0] == 0 && b[4] == 0 && b[5] == 3 && b[6] == 0 && b[7] == 0) {
		/* PostgreSQL's StartupMessage (protocol 3.0): no TLS asked for first */
		*proto = HS_PROTO_POSTGRESQL;
		return 0;
	}
	if (hs_word(b, n, 0, "<?xml", 5) || hs_word(b, n, 0, "<stream", 7)) {
		*proto = HS_PROTO_XMPP;
		return 1;
	}
	p = hs_peek_of(b);
	op = hs_ldap_op(p, n);
	if (op) {
		*proto = HS_PROTO_LDAP;
		/* ExtendedRequest ([APPLICATION 23]) whose requestName is 22 bytes, "1.3.6.1.4.1.
		 * 1466.20037": StartTLS (RFC 4511 4.14) */
		if (hs_ldap_is(p, n, op, 0x77, 0x80, 22) && hs_byte(p, op + 4) == '1')
			*state = HS_PRE_ASKED;
		return 1;
	}
	if (hs_word(b, n, 0, "get ", 4) || hs_word(b, n, 0, "post ", 5) ||
	    hs_word(b, n, 0, "head ", 5) || hs_word(b, n, 0, "put ", 4) ||
	    hs_word(b, n, 0, "delete ", 7) || hs_word(b, n, 0, "options ", 8) ||
	    hs_word(b, n, 0, "patch ", 6) || hs_word(b, n, 0, "connect ", 8) ||
	    hs_word(b, n, 0, "pri * ", 6))
		*proto = HS_PROTO_HTTP;
	return 0;
}

/* The first bytes of a later flight of a watched preamble, in direction `dir` (a client's
 * flight that starts a TLS record is not passed here: TLS begins). Returns 1 to go on
 * watching, 0 when TLS can no longer follow (the connection is plain of its protocol). */
HS_INLINE int hs_pre_flight(__u8 *proto, __u8 *state, __u32 dir, const __u8 *b, __u32 n)
{
	struct hs_peek p;
	__u32 at;

	HS_OPAQUE(b);
	if (dir == HS_DIR_IN) {
		if (*state == HS_PRE_GRANTED || *state == HS_PRE_REFUSED)
			/* plain text after the server's answer: no TLS on this connection (the
			 * client gave up, or goes on without it) */
			return 0;
		switch (*proto) {
		case HS_PROTO_BANNER_220:
			if (hs_command(b, n, 0, "ehlo", 4) || hs_command(b, n, 0, "helo", 4) ||
			    hs_command(b, n, 0, "lhlo", 4))
				*proto = HS_PROTO_SMTP;
			else if (hs_word(b, n, 0, "auth tls", 8) || hs_word(b, n, 0, "auth ssl", 8)) {
				*proto = HS_PROTO_FTP;
				*state = HS_PRE_ASKED;
			} else if (hs_command(b, n, 0, "user", 4) || hs_command(b, n, 0, "feat", 4) ||
				   hs_command(b, n, 0, "syst", 4) || hs_command(b, n, 0, "opts", 4))
				*proto = HS_PROTO_FTP;
			else
				return 0;
			return 1;
		case HS_PROTO_SMTP:
			if (hs_command(b, n, 0, "starttls", 8))
				*state = HS_PRE_ASKED;
			return 1;
		case HS_PROTO_FTP:
			if (hs_word(b, n, 0, "auth tls", 8) || hs_word(b, n, 0, "auth ssl", 8))
				*state = HS_PRE_ASKED;
			return 1;
		case HS_PROTO_IMAP:
			at = hs_after_tag(b, n);
			if (hs_command(b, n, at, "starttls", 8))
				*state = HS_PRE_ASKED;
			return 1;
		case HS_PROTO_POP3:
			if (hs_command(b, n, 0, "stls", 4))
				*state = HS_PRE_ASKED;
			return 1;
		case HS_PROTO_XMPP:
			if (hs_word(b, n, 0, "<starttls", 9))
				*state = HS_PRE_ASKED;
			return 1;
		case HS_PROTO_LDAP:
			p = hs_peek_of(b);
			at = hs_ldap_op(p, n);
			if (hs_ldap_is(p, n, at, 0x77, 0x80, 22) && hs_byte(p, at + 4) == '1')
				*state = HS_PRE_ASKED;
			return 1;
		case HS_PROTO_MYSQL:
			/* the client's answer to the greeting: a 32-byte SSLRequest (sequence 1)
			 * asks for TLS, which follows at once; a longer one logs in in plain text */
			if (n >= 4 && b[0] == 32 && b[1] == 0 && b[2] == 0 && b[3] == 1) {
				*state = HS_PRE_ASKED;
				return 1;
			}
			return 0;
		}
		return 0;
	}
	/* the server's answer, when the client asked */
	if (*state != HS_PRE_ASKED)
		return 1;
	switch (*proto) {
	case HS_PROTO_POSTGRESQL:
		*state = n >= 1 && b[0] == 'S' ? HS_PRE_GRANTED : HS_PRE_REFUSED;
		break;
	case HS_PROTO_SMTP:
		if (n >= 3 && b[0] == '2' && b[1] == '2' && b[2] == '0')
			*state = HS_PRE_GRANTED;
		else if (n >= 1 && (b[0] == '4' || b[0] == '5'))
			*state = HS_PRE_REFUSED;
		break;
	case HS_PROTO_FTP:
		if (n >= 3 && b[0] == '2' && b[1] == '3' && b[2] == '4')
			*state = HS_PRE_GRANTED;
		else if (n >= 1 && (b[0] == '4' || b[0] == '5'))
			*state = HS_PRE_REFUSED;
		break;
	case HS_PROTO_IMAP:
		/* a tagged answer; an untagged line ("* ...") first is not it */
		if (n >= 1 && b[0] == '*')
			break;
		at = hs_after_tag(b, n);
		if (hs_command(b, n, at, "ok", 2))
			*state = HS_PRE_GRANTED;
		else if (hs_command(b, n, at, "no", 2) || hs_command(b, n, at, "bad", 3))
			*state = HS_PRE_REFUSED;
		break;
	case HS_PROTO_POP3:
		if (hs_word(b, n, 0, "+ok", 3))
			*state = HS_PRE_GRANTED;
		else if (hs_word(b, n, 0, "-err", 4))
			*state = HS_PRE_REFUSED;
		break;
	case HS_PROTO_XMPP:
		if (hs_word(b, n, 0, "<proceed", 8))
			*state = HS_PRE_GRANTED;
		else if (hs_word(b, n, 0, "<failure", 8))
			*state = HS_PRE_REFUSED;
		break;
	case HS_PROTO_LDAP:
		/* ExtendedResponse ([APPLICATION 24]): its resultCode, an ENUMERATED, comes
		 * first (the messageID's length is at most 4: the code is in the bytes) */
		p = hs_peek_of(b);
		at = hs_ldap_op(p, n);
		if (hs_ldap_is(p, n, at, 0x78, 0x0a, 1))
			*state = hs_byte(p, at + 4) == 0 ? HS_PRE_GRANTED : HS_PRE_REFUSED;
		break;
	}
	/* the client's next flight says whether TLS begins */
	return 1;
}

#endif
