/* SPDX-License-Identifier: GPL-2.0-only OR MIT */
/*
 * hstrace's kernel <-> userspace ABI: every constant both sides use, the records the BPF
 * programs send through the ring buffer, the per-connection state userspace's sweep reads,
 * and the counters the programs keep, with their names. Plain fixed-size C types only.
 *
 * userspace/src/abi.rs mirrors it: the structs with compile-time size and offset checks
 * (the same figures as the _Static_asserts here), and each #define below as the Rust
 * constant of the same name less its HS_ prefix, tied by abi.rs's unit test
 * `header_constants_match_abi_rs`, which reads this file and fails on any value that
 * differs and on any #define it does not know. So keep each value a plain number or
 * shift, and add its Rust twin in the same commit. Constants only the BPF side uses
 * belong in its .bpf.h files.
 */
#ifndef HSTRACE_H
#define HSTRACE_H

/* Bytes of a ClientHello/ServerHello message (handshake header included) copied out for
 * userspace to parse. Larger hellos are cut here and flagged as truncated. */
#define HS_HELLO_CAP 16384 /* one whole record's plaintext: post-quantum key shares and any
			    * extension order fit */

/* Map sizes. HS_MAX_CONNS is --max-conns's default: userspace sets the size of `conns`,
 * `fds` and `ssl_socks` at load. The others are fixed. */
#define HS_MAX_CONNS 65536   /* connections tracked at once */
#define HS_MAX_TGIDS 4096    /* traced processes */
#define HS_IO_SLOTS 65536    /* per-thread state (a read/write or SSL call in flight): one
			      * slot per thread id mod this */
#define HS_RINGBUF_BYTES (8 << 20)
/* Userspace is woken when this much is waiting in the ring buffer; it also drains it
 * every HS_DRAIN_MS on its own, so a wakeup per record is not needed. Each wakeup costs
 * the tracer a switch in and a cold start (~0.6 us a resumed handshake at 64 KiB, 90
 * wakeups a second at 2,600 handshakes/s): at 1 MiB the timer does the draining below
 * ~10 MB/s of records, and a burst still leaves 7 MiB of room while the tracer wakes. */
#define HS_WAKEUP_BYTES (1 << 20)
#define HS_DRAIN_MS 100

/* Record kinds, the first __u32 of every ring-buffer record. */
#define HS_REC_HELLO 1
#define HS_REC_CONN 2
#define HS_REC_CLOSE 3
#define HS_REC_HELLO_PART 4 /* a piece of a hello that did not come in one read */
#define HS_REC_FORK 5       /* a traced process forked a new one: attach its uprobes now */

/* Direction of bytes on a server's connection. */
#define HS_DIR_IN 0  /* client -> server: the server reads them */
#define HS_DIR_OUT 1 /* server -> client: the server writes them */

/* How a connection's record ended (hs_conn.outcome). */
#define HS_OUTCOME_DONE 1   /* the handshake completed */
#define HS_OUTCOME_FAILED 2 /* it ended before completing */
#define HS_OUTCOME_NOT_TLS 3 /* the client's first bytes were not TLS: plain text (plain HTTP
			      * on a plain port, or a failed TLS connection: userspace decides) */

/* Why it failed (hs_conn.failure). */
#define HS_FAIL_NONE 0
#define HS_FAIL_CLIENT_CLOSED 1 /* the client closed (EOF) before completing */
#define HS_FAIL_ALERT 2         /* a TLS alert was sent or received */
#define HS_FAIL_RESET 3         /* the connection was reset */
#define HS_FAIL_NOT_TLS 4       /* the first bytes were not a TLS handshake record */
#define HS_FAIL_SERVER_CLOSED 5 /* the server closed it without an alert */
#define HS_FAIL_SERVER_EXITED 6 /* the server process exited (found by userspace) */
#define HS_FAIL_TIMEOUT 7       /* idle past the timeout before completing (userspace) */

/* hs_conn.flags */
#define HS_F_UPROBE (1 << 0)       /* SSL_do_handshake calls were seen for this connection */
#define HS_F_HS_DONE_SSL (1 << 1)  /* t_hs_done came from SSL_do_handshake returning 1 */
#define HS_F_DESYNC (1 << 2)       /* a record header did not parse: wire parsing stopped */
#define HS_F_EST_SEEN (1 << 3)     /* t_est is known */
#define HS_F_PEER_FIN (1 << 4)     /* the client sent FIN */
#define HS_F_READ_EOF (1 << 5)     /* a read returned 0 */
#define HS_F_READ_RESET (1 << 6)   /* a read or write returned ECONNRESET/EPIPE */
#define HS_F_PEER_RESET (1 << 7)   /* the socket closed straight from ESTABLISHED: a reset */
#define HS_F_SSLV2_HELLO (1 << 8)  /* the ClientHello came in SSLv2 format (RFC 6101 E.2): no
				    * extensions, so nothing of it is parsed */
#define HS_F_HRR (1 << 9)          /* the server answered the first ClientHello with a
				    * HelloRetryRequest (TLS 1.3) */
#define HS_F_EARLY_DATA (1 << 10)  /* TLS 1.3 0-RTT: application data came in the client's
				    * first flight, the first request with the ClientHello */
#define HS_F_WIRE_ENDS (1 << 11)   /* SSL_do_handshake does not say when the handshake ends:
				    * it returned 1 before the client's second flight (an
				    * early-data server, for a connection without early
				    * data), or handshake bytes moved outside it (the server
				    * finishes in SSL_read): the wire says */
#define HS_F_CLOSED (1 << 12)      /* the connection ended as its record was made (t_end): the
				    * record is its close too (exchanges, bytes_in, bytes_out
				    * are the totals), and no hs_close follows */

/* hs_conn.idle_before: a service stage's first read found its CPU had gone idle since a
 * service stage last ended there (cold caches, a deeper idle state), by the stage that
 * starts there. HS_IDLE_KNOWN: the CPU's idle mark could be read (with group
 * scheduling; without it no bit is set). */
#define HS_IDLE_FLIGHT1 (1 << 0)  /* the ClientHello's read: server flight 1 */
#define HS_IDLE_FLIGHT2 (1 << 1)  /* the client's second flight's read: server flight 2 */
#define HS_IDLE_RESPONSE (1 << 2) /* the first request's read: the response */
#define HS_IDLE_RETRY (1 << 3)    /* the first ClientHello's read: the HelloRetryRequest */
#define HS_IDLE_KNOWN (1 << 7)

/* hs_conn.woke: the handler calls that read a message of the client's (or took the
 * connection from the accept queue), by slot. A call that found its CPU idle since a traced
 * server's handler last ran on it (its accept, a service stage's first read or last write)
 * keeps how long ago that was, coded on a log scale (hs_woke_code): the message's wait
 * less that is how long the CPU had slept before it came, the wait its wake-up. */
#define HS_WOKE_ACCEPT 0   /* the accept */
#define HS_WOKE_FLIGHT1 1  /* the ClientHello's read (after a retry: the second's) */
#define HS_WOKE_FLIGHT2 2  /* the client's second flight's read */
#define HS_WOKE_RESPONSE 3 /* the first request's read */
#define HS_WOKE_RETRY 4    /* the first ClientHello's read, when a HelloRetryRequest followed */
#define HS_WOKE_CALLS 5

/* Where a connection is (hs_conn.phase). */
#define HS_PH_HANDSHAKE 0
#define HS_PH_WAIT_REQUEST 1 /* handshake complete, no request read yet */
#define HS_PH_REQUEST 2      /* the first request is being read */
#define HS_PH_RESPONSE 3     /* its response is being written */
#define HS_PH_DONE 4         /* record sent; bytes and exchanges are still counted */

/* Bits of the `settings` map's word, written by userspace once its probes are attached
 * (HS_SET_SSL_ALL_PROCS: before it widens a library's uprobes). */
#define HS_SET_NO_FDS 1 /* no attached hook reads the fds table (reads, writes and closes
			 * are all seen at the socket layer): accept does not fill it */
#define HS_SET_LAZY_FD 2 /* accept is hooked in the kernel (it returns a socket, not an
			  * fd) and a hook reads the fds table: a connection's fd is learned
			  * at its first read or write */
#define HS_SET_SSL_ALL_PROCS 4 /* a libssl's uprobes fire for every process that maps it
				* (a traced process forks children that serve): the OpenSSL
				* programs must tell the traced processes from the others */

/* Bits of the per-flight record-type masks (hs_conn.rec_types[]): 1 << (type - 20). */
#define HS_RT_CCS (1 << 0)
#define HS_RT_ALERT (1 << 1)
#define HS_RT_HANDSHAKE (1 << 2)
#define HS_RT_APPDATA (1 << 3)

/* Flights, in wire order, as indexes into the per-flight arrays:
 * client 1 (ClientHello), server 1, client 2, server 2. */
#define HS_FLIGHTS 4
#define HS_FL_C1 0
#define HS_FL_S1 1
#define HS_FL_C2 2
#define HS_FL_S2 3

/* TLS handshake message types (RFC 8446 4): the first byte of a captured hello, and a bit
 * (1 << type) of hs_conn.hs_types. */
#define HT_CLIENT_HELLO 1
#define HT_SERVER_HELLO 2
#define HT_CERTIFICATE 11

/* A HelloRetryRequest's ServerHello.random, SHA-256("HelloRetryRequest") (RFC 8446 4.1.3),
 * as four little-endian 64-bit words: bytes cf 21 ad 74 e5 9a 61 11 ... 33 9c. */
#define HS_HRR_RANDOM_0 0x11619ae574ad21cfULL
#define HS_HRR_RANDOM_1 0x91b8651e028c1dbeULL
#define HS_HRR_RANDOM_2 0x5e8cbb7a1611a2c2ULL
#define HS_HRR_RANDOM_3 0x9c33a8c8e2099e07ULL

/* The protocol of a connection's plaintext part (hs_conn.pre_proto), told from its first
 * bytes (starttls.h): a preamble before TLS, or the whole of a plain connection. */
#define HS_PROTO_NONE 0       /* TLS from the first byte, or not told */
#define HS_PROTO_HTTP 1
#define HS_PROTO_POSTGRESQL 2
#define HS_PROTO_SMTP 3
#define HS_PROTO_FTP 4
#define HS_PROTO_IMAP 5
#define HS_PROTO_POP3 6
#define HS_PROTO_LDAP 7
#define HS_PROTO_MYSQL 8
#define HS_PROTO_XMPP 9
#define HS_PROTO_BANNER_220 10 /* a "220" banner the client never answered: SMTP or FTP */

/* How far a plaintext preamble got (hs_conn.pre_state). */
#define HS_PRE_NONE 0     /* no preamble: TLS from the first byte */
#define HS_PRE_PLAIN 1    /* plain text; the client did not ask for TLS */
#define HS_PRE_ASKED 2    /* the client asked for TLS; the server has not answered */
#define HS_PRE_GRANTED 3  /* the server said go ahead; no ClientHello came */
#define HS_PRE_REFUSED 4  /* the server refused */
#define HS_PRE_UPGRADED 5 /* TLS began after the preamble (t_tls_start) */

/* Bounds of watching a preamble for TLS: flights (either direction) and bytes moved. Past
 * either the connection is plain of its protocol, and nothing more of it is looked at. */
#define HS_PRE_FLIGHTS_MAX 16
#define HS_PRE_BYTES_MAX 16384

/* HS_REC_FORK: userspace is woken at once, so a worker forked while tracing (Apache
 * prefork) gets its uprobes before it serves, not at the next once-a-second scan. */
struct hs_fork {
	__u32 rec;
	__u32 tgid;   /* the new process */
	__u32 parent; /* the traced process that forked it */
	__u32 pad;
};

/* A ClientHello (dir IN) or ServerHello (dir OUT), as the server read or wrote it: whole
 * (HS_REC_HELLO, offset 0, the 4-byte handshake header first) when it came in one read,
 * else in pieces as its bytes pass (HS_REC_HELLO_PART, offset 4 and on: the body only;
 * a hello split over many records or reads). Userspace puts the pieces together. */
struct hs_hello {
	__u32 rec;      /* HS_REC_HELLO or HS_REC_HELLO_PART */
	__u32 dir;      /* HS_DIR_IN or HS_DIR_OUT */
	__u64 conn_id;
	__u32 msg_len;  /* full handshake message length, 4-byte header included */
	__u32 cap_len;  /* bytes in data (<= HS_HELLO_CAP) */
	__u32 offset;   /* where data starts in the message */
	__u32 pad;
	__u8 data[HS_HELLO_CAP]; /* the ring buffer carries only the first cap_len */
};

/* One per connection, sent once its first response is complete, or when it ends before
 * that (it failed, or closed: HS_F_CLOSED); userspace's sweep makes the record of one
 * that idles or whose server exits. Times are CLOCK_MONOTONIC (bpf_ktime_get_ns)
 * nanoseconds; 0 means not seen. */
struct hs_conn {
	__u32 rec;      /* HS_REC_CONN */
	__u32 tgid;
	__u64 conn_id;
	char comm[16];
	__u8 saddr[16]; /* server (local) address: IPv4 in the first 4 bytes */
	__u8 daddr[16]; /* client (peer) address */
	__u16 sport;    /* host byte order */
	__u16 dport;
	__u16 family;   /* AF_INET or AF_INET6 */
	__u8 outcome;   /* HS_OUTCOME_* */
	__u8 failure;   /* HS_FAIL_* */
	__u32 flags;    /* HS_F_* */
	__u8 alert_level; /* first plaintext alert seen, if any */
	__u8 alert_desc;
	__u8 alert_dir;
	__u8 fail_flight; /* 1 + the flight in progress when the record was sent; 0: no bytes yet */
	__u64 t_est;      /* TCP handshake complete (child socket ESTABLISHED) */
	__u64 t_accept;   /* accept() returned the fd */
	__u64 t_arrive[HS_FLIGHTS]; /* client flights: the bytes that completed the first record
				     * were queued on the socket (a slow client's earlier pieces
				     * are waiting for the client, not queueing) */
	__u64 t_first[HS_FLIGHTS];  /* client: the read that completed the flight's first record;
				     * server: the flight's first write */
	__u64 t_last[HS_FLIGHTS];   /* last read (client) / last write (server) of the flight */
	__u64 t_hs_done;  /* handshake complete (SSL_do_handshake == 1, or from the wire) */
	__u64 t_end;      /* record sent */
	__u32 rec_types[HS_FLIGHTS]; /* HS_RT_* bits of the records in each flight */
	__u32 hs_types[HS_FLIGHTS];  /* 1 << handshake type (plaintext ones, types < 32) */
	__u32 ssl_calls;  /* SSL_do_handshake calls for this connection */
	__u32 exchanges;  /* with HS_F_CLOSED: request/response exchanges after the handshake */
	__u64 ssl_ns;     /* time spent inside those calls */
	__u64 bytes_in;   /* bytes read by the server before the record was sent (with
			   * HS_F_CLOSED: in all) */
	__u64 bytes_out;
	/* the first request and its response (TLS after the handshake, or plain text) */
	__u64 t_req_arrive; /* the bytes that completed the request's first record arrived */
	__u64 t_req_read;   /* the read that completed it (plain text: the first read) */
	__u64 t_resp_first; /* first write after the request */
	__u64 t_resp_last;  /* last write before the server read again */
	__u8 phase;         /* HS_PH_* when the record was made */
	__u8 idle_before;   /* HS_IDLE_* bits: which service stages began on a CPU that had
			     * been idle since the last service stage ran on it */
	__u8 woke[HS_WOKE_CALLS]; /* each handler call that found its CPU idle since a traced
				   * server's handler last ran there: how long before, as
				   * hs_woke_code; 0: it did not (or unknown) */
	__u8 pad1;
	/* the server thread's on-CPU time (the scheduler's accounting, thread_cpu_now), read
	 * where a service stage starts or ends: a client flight's first record read
	 * (cpu_first of flights 0 and 2), a server flight's last write (cpu_last of flights 1
	 * and 3), t_hs_done, t_req_read and t_resp_last. Differences of one thread's readings
	 * give each service stage's on-CPU time; 0 means not read */
	__u64 cpu_first[HS_FLIGHTS];
	__u64 cpu_last[HS_FLIGHTS];
	__u64 cpu_hs_done;
	__u64 cpu_req_read;
	__u64 cpu_resp_last;
	/* the library's view of the first request and response (--uprobes all): plaintext
	 * bytes SSL_read/SSL_write returned, and time spent inside them */
	__u64 lib_req_bytes;
	__u64 lib_req_ns;
	__u64 lib_resp_bytes;
	__u64 lib_resp_ns;
	/* a HelloRetryRequest's round (HS_F_HRR), once the second ClientHello came: the first
	 * ClientHello's arrival and read, the retry flight's last write, and the CPU readings
	 * then. The flights above are the handshake after it. */
	__u64 t_retry_arrive;
	__u64 t_retry_read;
	__u64 t_retry_sent;
	__u64 cpu_retry_read;
	__u64 cpu_retry_sent;
	/* a plaintext preamble before TLS (STARTTLS, PostgreSQL's SSLRequest), or a plain
	 * connection of a known protocol: its time split as the handshake's stages are, the
	 * server answering (service), the client's messages queued (queue) and the server
	 * waiting for them (delay), summed over its exchanges from t_accept to t_tls_start
	 * (or to the record); t_tls_start: the preamble's last write or read, after which
	 * the ClientHello came (HS_PRE_UPGRADED). Flight arrays above are TLS's only. */
	__u64 t_tls_start;
	__u64 pre_service_ns;
	__u64 pre_queue_ns;
	__u64 pre_wait_ns;
	__u8 pre_proto;   /* HS_PROTO_* */
	__u8 pre_state;   /* HS_PRE_* */
	__u8 pre_flights; /* flights of the preamble seen */
	__u8 ske_head[3]; /* TLS 1.2: the first 3 body bytes of the ServerKeyExchange the
			   * server wrote, when its header and they came in one write: an
			   * ECDHE one's curve_type (3: named_curve) and named group; zero
			   * when not read */
	__u8 pad2[2];
};

/* At the end of every connection, after its hs_conn record (unless that record carried
 * the close: HS_F_CLOSED). */
struct hs_close {
	__u32 rec;       /* HS_REC_CLOSE */
	__u32 tgid;
	__u64 conn_id;
	__u64 t_accept;
	__u64 t_close;
	__u32 exchanges; /* request/response exchanges after the handshake */
	__u32 pad;
	__u64 bytes_in;
	__u64 bytes_out;
};

/* One direction of a connection's TLS record stream. */
struct hs_stream {
	__u32 rec_left;      /* body bytes of the current record not yet seen */
	__u32 rec_len;       /* body length of the current record */
	__u32 msg_left;      /* body bytes of the current handshake message not yet seen (it
			      * may go on in the next records) */
	__u32 msg_len;       /* that message's length, 4-byte header included */
	__u16 hello_left;    /* bytes of a hello in pieces still to copy out (0: none) */
	__u16 hello_off;     /* offset in the hello of the next byte to copy */
	__u8 hdr[16];        /* the record header being assembled (5 bytes; room for the verifier) */
	__u8 body[8];        /* a handshake message header (4 bytes) or an alert (2) being
			      * assembled from a record's body (room for the verifier) */
	__u8 hdr_have;       /* bytes of hdr seen so far */
	__u8 body_have;      /* bytes of body seen so far */
	__u8 rec_type;       /* type of the current record */
	__u8 ccs;            /* a ChangeCipherSpec passed: later handshake records are encrypted */
	__u8 desync;         /* a record header in this direction did not parse: stopped here */
	__u8 pad[3];
};

/* The kernel's per-connection state (the `conns` map's values): the record being filled in
 * and how far the server's reads and writes have been parsed; r.t_accept 0 while the
 * socket waits in the accept queue. Userspace reads it only to sweep up connections that
 * never end on their own (idle, or their server exited). */
struct hs_conn_state {
	struct hs_conn r;       /* the record, filled in as the connection goes; r.outcome is how
				 * it ends if it ends now (FAILED until the handshake completes) */
	struct hs_stream st[2];    /* HS_DIR_IN, HS_DIR_OUT */
	__u64 arrive_pending;   /* first bytes queued since the server last read or wrote */
	__u64 last_arrive;      /* the latest arrival the server has read in this flight */
	__u64 done_at;          /* TLS 1.3: client Finished read; tickets may still follow */
	__u64 fkey;             /* tgid << 32 | fd, once known */
	__u64 ssl;              /* the SSL object whose calls map to it (ssl_socks), once known */
	__s8 flight;            /* index of the current flight, -1 before any bytes */
	__u8 emitted;           /* the record was sent: the connection is no longer parsed */
	__u8 wire_done;         /* the wire says the handshake completed at r.t_hs_done */
	__u8 not_tls;
	__u8 arrival_missed;    /* the current client flight's first bytes were read before
				 * any arrival of them was seen (the hook still running) */
	__u8 first_rec_done;    /* the current client flight's first record is complete */
	__u8 client_fin;        /* the client's Finished has been read */
	__u8 fin_len;           /* TLS 1.3: the length of the client's Finished record for the
				 * ServerHello's cipher suite (0: unknown) */
	__u32 exchanges;        /* request/response exchanges after the handshake */
	__u32 ssl_tgid;         /* the process whose SSL object `ssl` is (a forked child of the
				 * one that accepted, for PostgreSQL): with `ssl`, the key of
				 * `ssl_socks` */
	/* a preamble being watched for TLS (preamble.bpf.h) */
	__u8 pre_watch;         /* plain text so far, and TLS may still begin */
	__u8 pre_dir;           /* direction of its last transfer (HS_DIR_*; 0xff: none yet) */
	__u8 learn_fd;          /* accepted in the kernel (no fd): its reads and writes look for
				 * its fd, until one finds it or the settings say no hook reads
				 * the fds table */
	__u8 pad3[5];
	__u64 pre_in_start;     /* the read that began the server's current answer (t_accept
				 * for a banner) */
	__u64 pre_last_out;     /* its last write */
	__u64 pre_last_in;      /* its last read */
};

/* The key of `ssl_socks`: an SSL object of a process (userspace's sweep deletes entries). */
struct ssl_key {
	__u32 tgid;
	__u32 pad;
	__u64 ssl;
};

/* The layout userspace/src/abi.rs expects (it asserts the same figures). */
_Static_assert(sizeof(struct hs_fork) == 16, "hs_fork layout changed: update abi.rs");
_Static_assert(sizeof(struct hs_hello) == 32 + HS_HELLO_CAP, "hs_hello layout changed: update abi.rs");
_Static_assert(__builtin_offsetof(struct hs_hello, data) == 32, "hs_hello layout changed: update abi.rs");
_Static_assert(sizeof(struct hs_conn) == 512, "hs_conn layout changed: update abi.rs");
_Static_assert(__builtin_offsetof(struct hs_conn, t_tls_start) == 472, "hs_conn layout changed: update abi.rs");
_Static_assert(__builtin_offsetof(struct hs_conn, t_retry_arrive) == 432, "hs_conn layout changed: update abi.rs");
_Static_assert(sizeof(struct hs_close) == 56, "hs_close layout changed: update abi.rs");
_Static_assert(sizeof(struct hs_stream) == 52, "hs_stream layout changed: update abi.rs");
_Static_assert(sizeof(struct hs_conn_state) == 704, "hs_conn_state layout changed: update abi.rs");
_Static_assert(__builtin_offsetof(struct hs_conn_state, emitted) == 657, "hs_conn_state layout changed: update abi.rs");
_Static_assert(sizeof(struct ssl_key) == 16, "ssl_key layout changed: update abi.rs");

/* Counters: indexes into the per-CPU array `counters`, each with the name userspace logs
 * it under, quoted first in its comment (abi.rs's COUNTERS, tied to these by its test). */
#define HS_C_CONNS 0          /* "connections_tracked": connections accepted and tracked (in
			       * the table `conns`) */
#define HS_C_RECORDS 1        /* "records_sent": connection records sent */
#define HS_C_RECORDS_DROPPED 2 /* "records_dropped": connection records the ring buffer had no
				* room for */
#define HS_C_HELLOS_DROPPED 3 /* "hellos_dropped": hello captures the ring buffer had no room
			       * for */
#define HS_C_DESYNC 4         /* "record_stream_desync": connections whose record stream
			       * stopped parsing */
#define HS_C_TABLE_FULL 5     /* "accepted_while_table_full": connections accepted while
			       * `conns` was full: untracked */
#define HS_C_NO_SOCK 6        /* "accepted_fd_without_socket": accepted fd whose socket could
			       * not be resolved */
#define HS_C_CLOSES_DROPPED 7 /* "close_records_dropped": close records the ring buffer had no
			       * room for */
#define HS_C_IO_SLOT_TAKEN 8  /* "io_slot_taken": a traced read/write or SSL call found its
			       * thread slot held by another thread */
#define HS_C_ACCEPTED 9       /* "connections_accepted": connections the selected servers
			       * accepted: tracked, table full or no socket */
#define HS_C_LISTENS 10       /* "listens_seen": TCP sockets that started listening, any
			       * process: userspace looks for new servers when this moves */
#define HS_C_LATE_ARRIVAL 11  /* "arrivals_after_read": a client flight read before its
			       * arrival hook ran: the read's time stands for the arrival */
#define HS_C_EST_FULL 12      /* "established_while_est_table_full": sockets established while
			       * `conns` was full: their accept_queue is not measured. (The
			       * name is from est_socks, the table they had before `conns`
			       * took them; kept, as scripts may read it.) */
#define HS_C_END_MISSED 13    /* "ended_unseen": accepted connections whose socket became a new
			       * connection's before their end was seen: their record and
			       * close line are lost */
#define HS_C_CLOSE_MISSED 14  /* "closed_unseen": the same, after their record was sent: their
			       * close line is lost */
#define HS_C_MAX 15

#endif
