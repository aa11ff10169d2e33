//! ebpf/starttls.h, the kernel's recognizer of plaintext preambles, as the host runs it
//! (compiled by build.rs from the same C): for its unit tests.

use hstrace::abi::{DIR_IN, DIR_OUT};

extern "C" {
    fn hs_host_pre_first(proto: *mut u8, state: *mut u8, dir: u32, b: *const u8, n: u32) -> i32;
    fn hs_host_pre_flight(proto: *mut u8, state: *mut u8, dir: u32, b: *const u8, n: u32) -> i32;
}

/// Bytes as the kernel passes them: the first 16 of a flight, in a 32-byte array.
fn peek(bytes: &[u8]) -> ([u8; 32], u32) {
    let mut b = [0u8; 32];
    let n = bytes.len().min(16);
    b[..n].copy_from_slice(&bytes[..n]);
    (b, n as u32)
}

/// A preamble as the kernel follows it: its protocol and state, and whether it is watched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Preamble {
    pub proto: u8,
    pub state: u8,
    pub watch: bool,
}

impl Preamble {
    /// The connection's first bytes (the server's if `server`).
    pub fn first(server: bool, bytes: &[u8]) -> Preamble {
        let (b, n) = peek(bytes);
        let mut p = Preamble::default();
        let dir = if server { DIR_OUT } else { DIR_IN };
        // SAFETY: plain C over a 32-byte array and two bytes of ours
        p.watch = unsafe { hs_host_pre_first(&mut p.proto, &mut p.state, dir, b.as_ptr(), n) } != 0;
        p
    }

    /// A later flight's first bytes.
    pub fn flight(&mut self, server: bool, bytes: &[u8]) {
        let (b, n) = peek(bytes);
        let dir = if server { DIR_OUT } else { DIR_IN };
        // SAFETY: as above
        self.watch =
            unsafe { hs_host_pre_flight(&mut self.proto, &mut self.state, dir, b.as_ptr(), n) }
                != 0;
    }
}
