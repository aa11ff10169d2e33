//! The parser's subprograms that run at every message header or body run keep their
//! stack frames small enough to stay on the kernel stack. From a frame of 64 bytes (as
//! the verifier rounds it for the JIT: up to 16), newer kernels give a tracing program's
//! subprogram a per-CPU stack of its own, which costs at every call: its address is
//! computed in the prologue and saved around each helper call. b3e2f07's ServerKeyExchange
//! read took walk_message from 40 to 64 bytes that way. Read from the compiled objects;
//! no root needed.

use aya_obj::{generated::bpf_insn, Object};
use hstrace::features::Build;

/// The deepest stack offset (bytes below r10) that `insns` reach, directly or through a
/// register that holds r10 plus a constant (a stack pointer handed to a helper).
fn stack_depth(insns: &[bpf_insn]) -> i64 {
    const LDX: u8 = 0x01;
    const ST: u8 = 0x02;
    const STX: u8 = 0x03;
    const ALU64: u8 = 0x07;
    const MOV_X: u8 = 0xb0 | 0x08;
    const ADD_K: u8 = 0x00;
    // registers known to hold r10 + offset, and the deepest reach so far
    let mut frame: [Option<i64>; 11] = [None; 11];
    frame[10] = Some(0);
    let mut deepest = 0;
    for insn in insns {
        let (class, op) = (insn.code & 0x07, insn.code & 0xf8);
        let (dst, src) = (insn.dst_reg() as usize, insn.src_reg() as usize);
        let base = match class {
            LDX => frame.get(src).copied().flatten(),
            ST | STX => frame.get(dst).copied().flatten(),
            _ => None,
        };
        if let Some(b) = base {
            deepest = deepest.max(-(b + insn.off as i64));
        }
        match (class, op) {
            (ALU64, MOV_X) if dst < 10 => frame[dst] = frame.get(src).copied().flatten(),
            (ALU64, ADD_K) if dst < 10 && insn.code & 0x08 == 0 => {
                frame[dst] = frame[dst].map(|b| b + insn.imm as i64);
                if let Some(b) = frame[dst] {
                    deepest = deepest.max(-b);
                }
            }
            // a load into the register, or any other write to it, ends what it held
            (LDX, _) | (ALU64, _) | (0x04, _) if dst < 10 => frame[dst] = None,
            _ => {}
        }
        // a call clobbers r0-r5
        if insn.code == 0x85 {
            frame[..6].iter_mut().for_each(|f| *f = None);
        }
    }
    deepest
}

#[test]
fn the_per_step_subprograms_stay_on_the_kernel_stack() {
    for build in [Build::Full, Build::Basic] {
        let obj = Object::parse(build.object()).expect("the BPF object parses");
        for name in ["walk_message", "walk_alert"] {
            let f = obj
                .functions
                .values()
                .find(|f| f.name == name)
                .unwrap_or_else(|| panic!("{}: no function {name}", build.name()));
            let depth = stack_depth(&f.instructions);
            assert!(
                (depth + 15) / 16 * 16 < 64,
                "{}: {name} uses {depth} bytes of stack (rounded up to 16, 64 or more gets a \
                 private per-CPU stack at every call): keep fewer values live across its \
                 helper calls",
                build.name()
            );
        }
    }
}

/// One instruction (bpf_insn is plain data: all zeroes is a valid one).
fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> bpf_insn {
    // SAFETY: bpf_insn is integers and bit fields only
    let mut i: bpf_insn = unsafe { std::mem::zeroed() };
    i.code = code;
    i.set_dst_reg(dst);
    i.set_src_reg(src);
    i.off = off;
    i.imm = imm;
    i
}

#[test]
fn the_depth_is_read_as_the_verifier_counts_it() {
    let insns = [
        insn(0x07 | 0xb8, 1, 10, 0, 0),   // r1 = r10
        insn(0x07, 1, 0, 0, -48),         // r1 += -48 (a helper's stack buffer)
        insn(0x03 | 0x78, 10, 2, -8, 0),  // *(u64 *)(r10 - 8) = r2
        insn(0x01 | 0x78, 3, 10, -16, 0), // r3 = *(u64 *)(r10 - 16)
        insn(0x85, 0, 0, 0, 4),           // call: r1 no longer a stack pointer
        insn(0x03 | 0x78, 1, 2, -8, 0),   // *(u64 *)(r1 - 8) = r2
    ];
    assert_eq!(stack_depth(&insns), 48);
    assert_eq!(stack_depth(&insns[2..]), 16);
}
