/* SPDX-License-Identifier: GPL-2.0-only OR MIT */
/*
 * hs_conn.woke's coding of a time, in plain C: the BPF programs compile it, and so does a
 * host test that checks userspace's decoding (abi::woke_ns) against it.
 */
#ifndef HSTRACE_WOKE_H
#define HSTRACE_WOKE_H

#include "opaque.h"

/* 1 if x > c, else 0, for x and c below 2^63, with no branch: (c - x) wraps past 2^63
 * exactly when x > c. The compiler must not know x's range, or it turns this back into a
 * compare, which BPF has only as a branch: HS_OPAQUE hides it. */
#define HS_ABOVE(x, c) (((unsigned long long)(c) - (x)) >> 63)

/* A time of `ns` nanoseconds on a log scale, in units of 1,024 ns (a shift, where whole
 * microseconds would take a division at each call), 0 taken as 1: 1 + 8 x log2(units),
 * the three bits below the leading one its fraction (an eighth of an octave: within 1/8 of
 * the value); 255 at most (1.75 x 2^31 units, about 64 minutes, and longer).
 * It runs at every handler call that finds its CPU woken, with any time: the leading one
 * is found by arithmetic, not by branches on the time's bits, which a CPU mispredicts. */
static inline unsigned int hs_woke_code(unsigned long long ns)
{
	unsigned long long units = ns >> 10, x, step, msb;

	if (!units)
		units = 1;
	/* code 255 from 1.75 x 2^31 units on; below, units < 2^32 */
	if (units >= 7ULL << 29)
		return 255;
	/* the leading one's position, by halving steps (BPF has no count of leading zeros) */
	x = units;
	HS_OPAQUE(x);
	step = HS_ABOVE(x, 0xffff) << 4;
	x >>= step;
	msb = step;
	step = HS_ABOVE(x, 0xff) << 3;
	x >>= step;
	msb += step;
	step = HS_ABOVE(x, 0xf) << 2;
	x >>= step;
	msb += step;
	step = HS_ABOVE(x, 0x3) << 1;
	x >>= step;
	msb += step;
	msb += HS_ABOVE(x, 0x1);
	/* the three bits below the leading one (units < 2^32: units << 3 keeps every bit) */
	return 1 + 8 * msb + (((units << 3) >> msb) & 7);
}

#endif
