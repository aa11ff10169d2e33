/* SPDX-License-Identifier: GPL-2.0-only OR MIT */
/*
 * Per-connection state: the maps every hook shares, the settings userspace fills in
 * before load, the thread's on-CPU clock, and making, sending and forgetting a
 * connection's entry. Every hook family's file includes it; one object holds them all
 * (hstrace.bpf.c), so the maps are shared.
 */
#ifndef HSTRACE_CONN_BPF_H
#define HSTRACE_CONN_BPF_H

#include "hstrace.h"
#include "woke.h"

/* Two builds of this one source (userspace/build.rs); userspace loads the first whose
 * features the kernel has (probed at start, never told by version: docs/kernels.md).
 *  - the default needs bpf_loop (5.17), BPF atomics that fetch (5.12), the BTF-typed
 *    current task and its saved registers (5.11, 5.15), and global functions taking
 *    pointers (5.12);
 *  - HS_BASIC needs none of them (5.10): the record walk is a bounded loop of
 *    HS_BASIC_WALK_STEPS steps a buffer, the arrival's hand-over to the read is two plain
 *    stores, the task is read by helper calls and its registers found at the top of its
 *    kernel stack, and the parser's functions are static (verified at each call).
 * The macros below are the only places the two differ, but for the walk (wire.bpf.h). */
#ifdef HS_BASIC
#define HS_FUNC static __noinline
/* (no other CPU's store can come between: the races they guard are then lost, rarely) */
#define hs_xchg(p, v) ({ typeof(*(p)) __old = *(p); *(p) = (v); __old; })
#define hs_cmpxchg(p, o, n) ({ typeof(*(p)) __cur = *(p); if (__cur == (o)) *(p) = (n); __cur; })
#define hs_or(p, v) (*(p) |= (v))
#define hs_task() ((struct task_struct *)bpf_get_current_task())
/* a field of a kernel object reached through a pointer the verifier does not type (and
 * one through a chain of pointers, as BPF_CORE_READ walks it) */
#define HS_KREAD(p, f) BPF_CORE_READ(p, f)
#define HS_KREAD2(p, a, b) BPF_CORE_READ(p, a, b)
#define HS_KREAD4(p, a, b, c, d) BPF_CORE_READ(p, a, b, c, d)
#else
#define HS_FUNC __noinline
#define hs_xchg(p, v) __sync_lock_test_and_set(p, v)
#define hs_cmpxchg(p, o, n) __sync_val_compare_and_swap(p, o, n)
#define hs_or(p, v) __sync_fetch_and_or(p, v)
#define hs_task() bpf_get_current_task_btf()
#define HS_KREAD(p, f) ((p)->f)
#define HS_KREAD2(p, a, b) ((p)->a->b)
#define HS_KREAD4(p, a, b, c, d) ((p)->a->b->c->d)
#endif

#define AF_INET 2
#define AF_INET6 10
#define IPPROTO_TCP 6
#define TCP_ESTABLISHED 1
#define TCP_SYN_RECV 3
#define TCP_FIN_WAIT1 4
#define TCP_CLOSE 7
#define TCP_CLOSE_WAIT 8
#define TCP_LAST_ACK 9
#define TCP_LISTEN 10
#define EAGAIN 11
#define EPIPE 32
#define ECONNRESET 104
#define EEXIST 17

/* Settings, written by userspace before load (EbpfLoader::set_global). */
const volatile __u8 targ_all = 0;     /* trace every process that accepts (no selector, or
					 --port alone: followed from its first accept) */
const volatile __u16 targ_port = 0;   /* only connections to this local port (0: any) */
const volatile __u8 targ_uprobes = 0; /* OpenSSL functions may be hooked (not --uprobes none) */
const volatile char targ_comm[16] = {}; /* --comm: a process is traced from its exec under
					   this name (NUL-padded; empty: none) */

/* Unique id of each traced connection (socket addresses are reused). */
#ifdef HS_BASIC
/* each CPU's count of them: an id is that count and the CPU (up to 4096) */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} conn_seq SEC(".maps");

static __always_inline __u64 new_conn_id(void)
{
	__u32 zero = 0;
	__u64 *n = bpf_map_lookup_elem(&conn_seq, &zero);

	if (!n)
		return 0;
	*n += 1;
	return (*n << 12) | (bpf_get_smp_processor_id() & 4095);
}
#else
__u64 next_conn_id = 0;

static __always_inline __u64 new_conn_id(void)
{
	return __sync_fetch_and_add(&next_conn_id, 1) + 1;
}
#endif

/* The arrival hook has run (it is attached): a read with no arrival seen before it then
 * races the hook, rather than meaning there is no hook. */
__u8 arrivals_hooked = 0;

/* Local ports of the selected servers, one bit each: set here when a handshake completes
 * on a port `port_selected` allows, or a traced process accepts on one. A socket on any
 * other port (a client's ephemeral port, another server's) cannot be a traced connection:
 * its state changes, arrivals, reads and writes leave before any map lookup. */
__u64 server_ports[65536 / 64] = {};

/* The ports the selected processes listen on, one bit each, as userspace found them in
 * /proc (--pid and --comm: where the kernel cannot know them before the first accept).
 * Only userspace writes it; an array, so its lookups are inlined. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 65536 / 64);
	__type(key, __u32);
	__type(value, __u64);
} listen_ports SEC(".maps");

static __always_inline void mark_server_port(__u16 port)
{
	__u64 bit = 1ULL << (port & 63);

	if (!(server_ports[port >> 6] & bit))
		hs_or(&server_ports[port >> 6], bit);
}

static __always_inline int is_server_port(__u16 port)
{
	return (server_ports[port >> 6] >> (port & 63)) & 1;
}

/* May a connection on local port `port` belong to the selection? --port: that port; no
 * selector: any; --pid, --comm: one their processes listen on or accepted on. */
static __always_inline int port_selected(__u16 port)
{
	__u32 word = port >> 6;
	__u64 *bits;

	if (targ_port)
		return port == targ_port;
	if (targ_all || is_server_port(port))
		return 1;
	bits = bpf_map_lookup_elem(&listen_ports, &word);
	return bits && ((*bits >> (port & 63)) & 1);
}

/* A new connection's addresses, where its state change has them at hand (a BTF socket
 * or the tracepoint's fields): accept then reads no socket field. */
struct conn_addrs {
	__u16 family;
	__u16 sport; /* host byte order */
	__u16 dport;
	__u16 pad;
	__u8 saddr[16]; /* as in struct hs_conn */
	__u8 daddr[16];
};

/* A read- or write-family syscall in progress, in its thread's slot. */
struct io_args {
	__u64 skey;   /* the connection's struct sock * */
	__u64 ptr;    /* the buffer, or the iovec array */
	__u32 tid;    /* the thread in the call; 0: the slot is free */
	__u32 iovcnt; /* 0: ptr is a plain buffer */
	__u32 peek;   /* MSG_PEEK: only end of stream and errors count, the bytes stay queued */
	__u32 pad;
};

/* An SSL_do_handshake call in progress, in its thread's slot. */
struct ssl_call {
	__u64 ssl;
	__u64 t_entry;
	__u64 sk;  /* the connection whose fd the call read or wrote */
	__u32 tid; /* the thread in the call; 0: the slot is free */
	__u32 pad;
};

/* An SSL_read/SSL_write(_ex) call in progress, in its thread's slot. */
struct ssl_io {
	__u64 ssl;
	__u64 t_entry;
	__u64 nbytes; /* _ex: where the library stores the byte count; 0: the return value */
	__u32 write;
	__u32 tid; /* the thread in the call; 0: the slot is free */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, HS_MAX_TGIDS);
	__type(key, __u32);
	__type(value, __u8);
} traced_tgids SEC(".maps");

/* The traced connections, from the three-way handshake's last ACK (on a port the
 * selection allows: port_selected) until they close. An entry made then waits in the
 * accept queue with its socket, t_accept 0, until accept gives it its process: one entry
 * a connection, so accept, arrivals and state changes each take one lookup. A plain hash,
 * never evicted by the kernel: when it is full, a socket's handshake is counted
 * (HS_C_EST_FULL: its accept_queue is not measured) and accept tries again; a connection
 * accepted with the table still full is counted (HS_C_TABLE_FULL), not tracked.
 * Userspace's sweep keeps room by evicting the longest idle accepted ones, counting each. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, HS_MAX_CONNS);
	__type(key, __u64); /* struct sock * */
	__type(value, struct hs_conn_state);
} conns SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, HS_MAX_CONNS);
	__type(key, __u64);   /* tgid << 32 | fd */
	__type(value, __u64); /* struct sock *, 0: not a traced connection */
} fds SEC(".maps");

/* Per-thread state lives in the slot of the thread's id mod HS_IO_SLOTS, tagged with the
 * id: arrays, not hashes, because an array lookup is a bounds check and an add (inlined,
 * no helper call), where a hash lookup hashes and walks, and an update or delete takes a
 * lock. A slot tagged with another thread's id is not this thread's (HS_C_IO_SLOT_TAKEN
 * counts the collisions that cost a call). */

/* A traced read or write between its syscall entry and exit: the exit of every read/write
 * on the host looks here. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, HS_IO_SLOTS);
	__type(key, __u32); /* thread id % HS_IO_SLOTS */
	__type(value, struct io_args);
} io_in_flight SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, HS_IO_SLOTS);
	__type(key, __u32); /* thread id % HS_IO_SLOTS */
	__type(value, struct ssl_call);
} ssl_in_flight SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, HS_IO_SLOTS);
	__type(key, __u32); /* thread id % HS_IO_SLOTS */
	__type(value, struct ssl_io);
} ssl_io_in_flight SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, HS_MAX_CONNS);
	__type(key, struct ssl_key);
	__type(value, __u64); /* struct sock * */
} ssl_socks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, HS_RINGBUF_BYTES);
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, HS_C_MAX);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

/* Scratch space for a hello being captured: copied here, then only its captured bytes
 * go to the ring buffer. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct hs_hello);
} hello_scratch SEC(".maps");

/* Scratch space for a new connection (too big for the BPF stack): one for accept, which
 * runs in a process, one for the handshake's last ACK, which a softirq may bring in the
 * middle of an accept on the same CPU. */
#define HS_SCRATCH_ACCEPT 0
#define HS_SCRATCH_ESTABLISHED 1
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, struct hs_conn_state);
} conn_scratch SEC(".maps");

/* Settings userspace writes once its probes are attached (and when it widens a library's
 * uprobes), HS_SET_* bits (an array: its lookups are inlined, no helper call). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} settings SEC(".maps");

/* Does a hook read the fds table? Yes until userspace says otherwise. */
static __always_inline int fds_used(void)
{
	__u32 zero = 0, *v = bpf_map_lookup_elem(&settings, &zero);

	return !v || !(*v & HS_SET_NO_FDS);
}

/* Is a connection's fd learned at its first read or write (HS_SET_LAZY_FD)? */
static __always_inline int lazy_fd(void)
{
	__u32 zero = 0, *v = bpf_map_lookup_elem(&settings, &zero);

	return v && (*v & HS_SET_LAZY_FD);
}

/* The settings word: HS_SET_* bits, 0 until userspace has written it. */
static __always_inline __u32 settings_word(void)
{
	__u32 zero = 0, *v = bpf_map_lookup_elem(&settings, &zero);

	return v ? *v : 0;
}

/* May an OpenSSL uprobe fire in a process hstrace does not trace (HS_SET_SSL_ALL_PROCS)?
 * Not while each is attached to one traced process. */
static __always_inline int ssl_all_procs(void)
{
	__u32 zero = 0, *v = bpf_map_lookup_elem(&settings, &zero);

	return v && (*v & HS_SET_SSL_ALL_PROCS);
}

/* Hand a reserved record to userspace, waking it only once enough has piled up. */
static __always_inline void submit(void *rec)
{
	__u64 waiting = bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA);

	bpf_ringbuf_submit(rec, waiting >= HS_WAKEUP_BYTES ? BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP);
}

static __always_inline void count(__u32 idx)
{
	__u64 *v = bpf_map_lookup_elem(&counters, &idx);
	if (v)
		*v += 1;
}

/* The current thread takes slot `owner` of a per-thread array: another thread whose id
 * shares it may be inside a call (or have died in one), which costs that call: counted. */
static __always_inline void take_slot(__u32 owner, __u32 tid)
{
	if (owner && owner != tid)
		count(HS_C_IO_SLOT_TAKEN);
}

static __always_inline int tgid_traced(__u32 tgid)
{
	return bpf_map_lookup_elem(&traced_tgids, &tgid) != NULL;
}

/* The current thread's on-CPU time at `now` (it is on CPU now), from the scheduler's own
 * accounting of it: the run time it has been charged (`se.sum_exec_runtime`, brought up
 * to date at every switch and tick) plus the time since it was last charged
 * (`se.exec_start`). No hook on the scheduler: nothing runs at context switches.
 *
 * `exec_start` is on the CPU's task clock, which runs behind the scheduler's clock by the
 * IRQ and steal time charged on that CPU (`rq->clock - rq->clock_task`): a different lag
 * on each CPU, a fifth of a second apart on a VM whose host steals time. The lag is taken
 * off, so that two readings on different CPUs (the thread migrated between them) still
 * differ by the time it ran. It is read from the run queue at every reading: it grows at
 * each of the CPU's clock updates by the time stolen (and, with IRQ_TIME_ACCOUNTING,
 * spent in interrupts) since the last, so a lag kept from an earlier reading would count
 * that time as the thread's, and a stage that began on a CPU with a kept lag and ended on
 * another could come out negative (it then has no CPU figure). What no reading can take
 * off is time stolen since the CPU's last clock update: the scheduler charges it only at
 * the next one. Without group scheduling (no `se.cfs_rq`) the lag stays in, and a stage
 * across a migration can lose its CPU figure.
 *
 * The scheduler's clock is not bpf_ktime_get_ns's, but the two move together: what is
 * left is their constant difference (HS_CPU_BASE keeps it from wrapping), and only
 * differences between two readings of one thread are used. */
#define HS_CPU_BASE (1ULL << 62)

static __always_inline __u64 task_cpu_now(struct task_struct *t, __u64 now)
{
	__u64 lag = 0;

	if (bpf_core_field_exists(t->se.cfs_rq)) {
		struct rq *rq = HS_KREAD2(t, se.cfs_rq, rq);

		lag = HS_KREAD(rq, clock) - HS_KREAD(rq, clock_task);
	}
	return HS_CPU_BASE + HS_KREAD(t, se.sum_exec_runtime) + now - HS_KREAD(t, se.exec_start) - lag;
}

static __always_inline __u64 thread_cpu_now(__u64 now)
{
	return task_cpu_now(hs_task(), now);
}

/* Was the CPU idle before a service stage, or a handler call? Each CPU has a mark that
 * moves each time it goes idle (cpu_idles). Each CPU keeps that mark twice:
 *  - at the last service stage's end (`stage_idles`): a stage's start that finds it moved
 *    ran on a CPU that had been idle in between (cold caches, a wake from an idle state),
 *    whatever the connection (hs_conn.idle_before);
 *  - at a traced server's last handler call (`call_idles`: an accept, a service stage's
 *    first read or last write), with its time (`call_t`): a call that finds it moved woke
 *    the CPU, which had slept at most as long as that was ago less the message's wait
 *    (hs_conn.woke: the wake-up's cost by how long the CPU slept). Work no hook marks
 *    (a plaintext preamble's, later requests', a close's, other processes') lengthens
 *    that bound. */
struct hs_cpu_mark {
	__u64 stage_idles; /* 1 + the CPU's idle mark at the last service stage's end */
	__u64 call_idles;  /* 1 + its idle mark at the last handler call */
	__u64 call_t;      /* when that call was (ns; 0: none yet) */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct hs_cpu_mark);
} idle_mark SEC(".maps");

/* 1 + the idle mark of the CPU `t` runs on; 0 when its run queue cannot be reached (no
 * `se.cfs_rq`). Where the run queue has `clock_idle` (Debian's 6.1 has it, 5.10 has not),
 * that: the scheduler stamps it with the run queue's clock as the CPU goes idle, and it
 * shares the cache line of the clock task_cpu_now reads. Else the `nivcsw` of the run
 * queue's idle task, switched out once each time the CPU leaves idle and counted as a
 * preemption (it never sleeps): a line no other reading keeps warm. */
static __always_inline __u64 cpu_idles(struct task_struct *t)
{
	struct rq *rq;

	if (!bpf_core_field_exists(t->se.cfs_rq))
		return 0;
	rq = HS_KREAD2(t, se.cfs_rq, rq);
	if (bpf_core_field_exists(rq->clock_idle))
		return 1 + HS_KREAD(rq, clock_idle);
	return 1 + HS_KREAD2(rq, idle, nivcsw);
}

/* `ns` as hs_conn.woke codes it (woke.h). A function of its own, one copy for its callers:
 * inlined at each, it measured no quicker and made the load slower. */
HS_FUNC int woke_code(__u64 ns)
{
	return hs_woke_code(ns);
}

/* A traced handler runs on this CPU at `now`, its idle mark `idles`. */
static __always_inline void cpu_busy_now(struct hs_cpu_mark *m, __u64 idles, __u64 now)
{
	m->call_idles = idles;
	m->call_t = now;
}

/* A handler call of connection `c` (`slot`: HS_WOKE_*) begins at `now` on a CPU whose idle
 * mark is `idles`: if the CPU idled since a traced handler last ran on it, keep how long
 * ago that was. The CPU is busy from now. */
static __always_inline void handler_call(struct hs_conn_state *c, int slot, __u64 idles,
					 struct hs_cpu_mark *m, __u64 now)
{
	int woke = idles && m->call_t && m->call_idles != idles && now > m->call_t;

	c->r.woke[slot] = woke ? woke_code(now - m->call_t) : 0;
	cpu_busy_now(m, idles, now);
}

/* The accept of connection `c` at `now`: a handler call (`woke`). */
static __always_inline void accept_call(struct hs_conn_state *c, __u64 now)
{
	__u32 zero = 0;
	struct hs_cpu_mark *m = bpf_map_lookup_elem(&idle_mark, &zero);

	if (m)
		handler_call(c, HS_WOKE_ACCEPT, cpu_idles(hs_task()), m, now);
}

/* A service stage starts (its first read; `slot`: HS_WOKE_FLIGHT1, _FLIGHT2 or _RESPONSE):
 * sets its bit of idle_before if the CPU idled since a service stage last ended on it (or
 * none has yet), and its `woke` as a handler call; returns the thread's on-CPU time
 * (thread_cpu_now). One task lookup for all. */
static __always_inline __u64 stage_starts(struct hs_conn_state *c, int slot, __u64 now)
{
	struct task_struct *t = hs_task();
	__u32 zero = 0;
	__u64 idles = cpu_idles(t);
	struct hs_cpu_mark *m = bpf_map_lookup_elem(&idle_mark, &zero);
	__u8 bit = slot == HS_WOKE_FLIGHT1   ? HS_IDLE_FLIGHT1
		   : slot == HS_WOKE_FLIGHT2 ? HS_IDLE_FLIGHT2
					     : HS_IDLE_RESPONSE;

	if (m) {
		if (idles)
			c->r.idle_before = (c->r.idle_before & ~bit) | HS_IDLE_KNOWN |
					   (m->stage_idles != idles ? bit : 0);
		handler_call(c, slot, idles, m, now);
	}
	return task_cpu_now(t, now);
}

/* A service stage's write (or its handshake's end): the CPU was busy until now. Returns
 * the thread's on-CPU time. */
static __always_inline __u64 stage_ends(__u64 now)
{
	struct task_struct *t = hs_task();
	__u32 zero = 0;
	struct hs_cpu_mark *m = bpf_map_lookup_elem(&idle_mark, &zero);

	if (m) {
		m->stage_idles = cpu_idles(t);
		cpu_busy_now(m, m->stage_idles, now);
	}
	return task_cpu_now(t, now);
}

/* A new connection's entry at addresses `a`, built in conn_scratch's `slot` (nothing seen
 * yet), its port marked as a server's; NULL if there is no scratch. */
static __always_inline struct hs_conn_state *new_conn(__u32 slot, const struct conn_addrs *a)
{
	struct hs_conn_state *c = bpf_map_lookup_elem(&conn_scratch, &slot);

	if (!c)
		return NULL;
	__builtin_memset(c, 0, sizeof(*c));
	c->r.family = a->family;
	c->r.sport = a->sport;
	c->r.dport = a->dport;
	__builtin_memcpy(c->r.saddr, a->saddr, sizeof(c->r.saddr));
	__builtin_memcpy(c->r.daddr, a->daddr, sizeof(c->r.daddr));
	c->flight = -1;
	c->r.rec = HS_REC_CONN;
	c->r.outcome = HS_OUTCOME_FAILED; /* until its handshake completes */
	mark_server_port(a->sport);
	return c;
}

/* Send the connection's record; from here on only bytes and exchanges are counted. */
static __noinline void emit_conn(struct hs_conn_state *c, __u64 now, __u8 outcome)
{
	struct hs_conn *r;

	if (!c || c->emitted)
		return;
	c->emitted = 1;
	c->r.outcome = outcome;
	c->r.t_end = now;
	c->r.fail_flight = c->flight + 1;
	/* reserve the record in the ring buffer; count it if there is no room (and its
	 * close, when it carried it) */
	r = bpf_ringbuf_reserve(&events, sizeof(*r), 0);
	if (!r) {
		count(HS_C_RECORDS_DROPPED);
		if (c->r.flags & HS_F_CLOSED)
			count(HS_C_CLOSES_DROPPED);
		return;
	}
	__builtin_memcpy(r, &c->r, sizeof(*r));
	submit(r);
	count(HS_C_RECORDS);
}

/* Why a connection that never completed its handshake ended. */
static __always_inline __u8 failure_reason(struct hs_conn_state *c)
{
	if (c->not_tls)
		return HS_FAIL_NOT_TLS;
	if (c->r.alert_level)
		return HS_FAIL_ALERT;
	if (c->r.flags & (HS_F_READ_RESET | HS_F_PEER_RESET))
		return HS_FAIL_RESET;
	if (c->r.flags & (HS_F_READ_EOF | HS_F_PEER_FIN))
		return HS_FAIL_CLIENT_CLOSED;
	return HS_FAIL_SERVER_CLOSED;
}

/* The handshake is complete: wait for the first request, unless it already came. */
static __always_inline void handshake_complete(struct hs_conn_state *c)
{
	c->r.phase = c->r.t_req_read ? HS_PH_REQUEST : HS_PH_WAIT_REQUEST;
	if (!c->not_tls)
		c->r.outcome = HS_OUTCOME_DONE;
}

/* How the record of a connection that got this far ends: r.outcome is kept current as it
 * goes (userspace's sweep reads it too); a failure's reason is decided at the end. */
static __always_inline __u8 outcome_now(struct hs_conn_state *c)
{
	if (c->r.outcome == HS_OUTCOME_FAILED)
		c->r.failure = failure_reason(c);
	return c->r.outcome;
}

/* The end of every connection: totals after its record. */
static __noinline void emit_close(struct hs_conn_state *c, __u64 now)
{
	struct hs_close *r;

	if (!c)
		return;
	r = bpf_ringbuf_reserve(&events, sizeof(*r), 0);
	if (!r) {
		count(HS_C_CLOSES_DROPPED);
		return;
	}
	r->rec = HS_REC_CLOSE;
	r->tgid = c->r.tgid;
	r->conn_id = c->r.conn_id;
	r->t_accept = c->r.t_accept;
	r->t_close = now;
	r->exchanges = c->exchanges;
	r->pad = 0;
	r->bytes_in = c->r.bytes_in;
	r->bytes_out = c->r.bytes_out;
	submit(r);
}

/* The connection is going away: send its record if it has not been sent, with its totals
 * in it (one record: HS_F_CLOSED), else its totals alone. */
static __always_inline void finish_conn(struct hs_conn_state *c, __u64 now)
{
	if (c->done_at && !c->wire_done) {
		/* TLS 1.3 with no read after the tickets: the handshake did complete */
		c->wire_done = 1;
		if (!c->r.t_hs_done)
			c->r.t_hs_done = c->done_at;
		handshake_complete(c);
	}
	if (c->emitted) {
		emit_close(c, now);
		return;
	}
	c->r.flags |= HS_F_CLOSED;
	c->r.exchanges = c->exchanges;
	emit_conn(c, now, outcome_now(c));
}

/* Forget a connection: its state, its fd and its SSL object (unless a later connection
 * has that fd or object). Userspace's sweep forgets one the same way (sweep.rs). */
static __always_inline void drop_conn(struct hs_conn_state *c, __u64 skey)
{
	__u64 *fd_sk = c->fkey ? bpf_map_lookup_elem(&fds, &c->fkey) : NULL;
	struct ssl_key k = { .tgid = c->ssl_tgid, .ssl = c->ssl };
	__u64 *ssl_sk = c->ssl ? bpf_map_lookup_elem(&ssl_socks, &k) : NULL;

	if (fd_sk && *fd_sk == skey)
		bpf_map_delete_elem(&fds, &c->fkey);
	if (ssl_sk && *ssl_sk == skey)
		bpf_map_delete_elem(&ssl_socks, &k);
	bpf_map_delete_elem(&conns, &skey);
}

/* The connection ended now: send what is owed, then forget it. */
static __always_inline void end_conn(struct hs_conn_state *c, __u64 skey)
{
	finish_conn(c, bpf_ktime_get_ns());
	drop_conn(c, skey);
}

/* The call's buffer was not looked up: the bytes lie inside a record body the parser
 * passes over (wants_bytes). */
#define HS_PTR_UNREAD (~0ULL)

/* A call's iovec array is in user memory (a syscall's argument) or, with this bit in its
 * count, the kernel's copy of it (what a kernel function's msghdr points to). */
#define HS_IOV_KERNEL (1u << 16)

/* Entry `i` of the iovec array at `arr` of a call whose count is `iovcnt`. */
static __always_inline long read_iovec(struct iovec *v, __u64 arr, __u32 i, __u32 iovcnt)
{
	const struct iovec *at = (const struct iovec *)arr + i;

	if (iovcnt & HS_IOV_KERNEL)
		return bpf_probe_read_kernel(v, sizeof(*v), at);
	return bpf_probe_read_user(v, sizeof(*v), at);
}

#endif
