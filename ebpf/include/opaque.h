/* SPDX-License-Identifier: GPL-2.0-only OR MIT */
/*
 * HS_OPAQUE(v): v's value hidden from the compiler, which then cannot reason from what it
 * knows of it (an alignment, a range) to code the BPF verifier refuses or that branches.
 * Plain C, no libbpf (whose barrier_var is the same): host tests compile its includers.
 */
#ifndef HSTRACE_OPAQUE_H
#define HSTRACE_OPAQUE_H

#define HS_OPAQUE(v) asm volatile("" : "+r"(v))

#endif
