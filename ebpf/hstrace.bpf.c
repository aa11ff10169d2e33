// SPDX-License-Identifier: GPL-2.0-only OR MIT
/*
 * hstrace's BPF programs: one object, so every hook shares one set of maps. Each hook
 * family has a file of its own; every program's hook and its alternatives are listed in
 * the probe table, userspace/src/probes.rs. The ABI is include/hstrace.h.
 *
 *   conn.bpf.h  per-connection state: the maps, the settings, sending a connection's record
 *   wire.bpf.h  the TLS record-stream parser
 *   preamble.bpf.h  a plaintext preamble before TLS (STARTTLS), watched for the switch;
 *               starttls.h tells its protocol (pure C, unit-tested on the host too)
 *   task.bpf.h  the current thread's syscall, its arguments, the socket behind an fd
 *   tcp.bpf.h   accept and TCP state: inet_sock_set_state, tcp_destroy_sock, accept
 *   io.bpf.h    reads, writes and arrivals: sock_recv_length/sock_send_length, sk_data_ready,
 *               the syscall fallbacks, tcp_sendmsg, close
 *   proc.bpf.h  processes: sched_process_fork, sched_process_exec
 *   ssl.bpf.h   OpenSSL uprobes: SSL_do_handshake, SSL_read/SSL_write and their _ex
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>

#include "conn.bpf.h"
#include "wire.bpf.h"
#include "task.bpf.h"
#include "tcp.bpf.h"
#include "io.bpf.h"
#include "proc.bpf.h"
#include "ssl.bpf.h"

/* GPL-compatible for the kernel (the GPL-only helpers); see ebpf/LICENSE */
char LICENSE[] SEC("license") = "Dual MIT/GPL";
