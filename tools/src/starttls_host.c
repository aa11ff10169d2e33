// SPDX-License-Identifier: GPL-2.0-only OR MIT
/* ebpf/starttls.h compiled for the host, so that its recognizer is unit-tested as the BPF
 * programs run it (tools/tests/starttls.rs). */
#include <linux/types.h>

#define HS_INLINE static inline
#include "hstrace.h"
#include "starttls.h"

int hs_host_pre_first(__u8 *proto, __u8 *state, __u32 dir, const __u8 *b, __u32 n)
{
	return hs_pre_first(proto, state, dir, b, n);
}

int hs_host_pre_flight(__u8 *proto, __u8 *state, __u32 dir, const __u8 *b, __u32 n)
{
	return hs_pre_flight(proto, state, dir, b, n);
}
