/* SPDX-License-Identifier: GPL-2.0-only OR MIT */
/*
 * hs_conn.woke's coding of a time, in plain C: the BPF programs compile it, and so does a
 * host test that checks userspace's decoding (abi::woke_ns) against it.
 */
#ifndef HSTRACE_WOKE_H
#define HSTRACE_WOKE_H

/* `us` microseconds (0 taken as 1) on a log scale: 1 + 8 x log2(us), the three bits below
 * the leading one its fraction (an eighth of an octave: within 1/8 of the value); 255 at
 * most (1.75 x 2^31 µs, about 63 minutes, and longer). */
static inline unsigned int hs_woke_code(unsigned long long us)
{
	unsigned long long x;
	unsigned int msb = 0, step, frac, code;

	if (!us)
		us = 1;
	/* the leading one's position, by halving steps (BPF has no count of leading zeros) */
	x = us;
	for (step = 32; step; step >>= 1) {
		if (x >> step) {
			x >>= step;
			msb += step;
		}
	}
	frac = msb >= 3 ? (us >> (msb - 3)) & 7 : (us << (3 - msb)) & 7;
	code = 1 + 8 * msb + frac;
	return code > 255 ? 255 : code;
}

#endif
