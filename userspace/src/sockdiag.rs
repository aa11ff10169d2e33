//! The host's listening TCP sockets from the kernel's socket-diagnostics netlink
//! (NETLINK_SOCK_DIAG, what `ss -ltn` asks), in hstrace's own network namespace.
//!
//! /proc/net/tcp lists every socket: the kernel walks its whole established-connection
//! table to print it (3 ms for each of tcp and tcp6 on an idle 24 GiB machine, its 262,144
//! buckets all empty; more with each connection, whose line it formats). Asking for
//! listening sockets only, the kernel skips that table: the answer costs what the
//! listeners do. Another namespace's listeners (a server in a container) are still read
//! from /proc/PID/net/tcp: a netlink socket answers for the namespace it was made in.

use std::{
    collections::HashMap,
    io,
    mem::size_of,
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
};

const NETLINK_SOCK_DIAG: i32 = 4;
const SOCK_DIAG_BY_FAMILY: u16 = 20;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const TCP_LISTEN: u32 = 10;

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct NlMsgHdr {
    len: u32,
    kind: u16,
    flags: u16,
    seq: u32,
    pid: u32,
}

/// struct inet_diag_sockid
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct SockId {
    sport: [u8; 2], // big-endian
    dport: [u8; 2],
    src: [u32; 4],
    dst: [u32; 4],
    interface: u32,
    cookie: [u32; 2],
}

/// struct inet_diag_req_v2, behind its netlink header
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct Request {
    hdr: NlMsgHdr,
    family: u8,
    protocol: u8,
    ext: u8,
    pad: u8,
    states: u32,
    id: SockId,
}

/// struct inet_diag_msg: the part of each answer read here
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct Answer {
    family: u8,
    state: u8,
    timer: u8,
    retrans: u8,
    id: SockId,
    expires: u32,
    rqueue: u32,
    wqueue: u32,
    uid: u32,
    inode: u32,
}

/// Inodes of the listening TCP sockets (IPv4 and IPv6) of hstrace's network namespace,
/// with their local port; an error where the kernel has no socket diagnostics.
pub fn listening_inodes() -> io::Result<HashMap<u64, u16>> {
    // SAFETY: socket() takes no pointers
    let raw = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            NETLINK_SOCK_DIAG,
        )
    };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new fd of ours, owned (and closed) by this OwnedFd alone
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let mut out = HashMap::new();
    for (seq, family) in [(1, libc::AF_INET), (2, libc::AF_INET6)] {
        dump(&fd, seq, family as u8, &mut out)?;
    }
    Ok(out)
}

/// One family's listening sockets into `out`.
fn dump(fd: &OwnedFd, seq: u32, family: u8, out: &mut HashMap<u64, u16>) -> io::Result<()> {
    let req = Request {
        hdr: NlMsgHdr {
            len: size_of::<Request>() as u32,
            kind: SOCK_DIAG_BY_FAMILY,
            flags: (libc::NLM_F_REQUEST | libc::NLM_F_DUMP) as u16,
            seq,
            pid: 0,
        },
        family,
        protocol: libc::IPPROTO_TCP as u8,
        states: 1 << TCP_LISTEN,
        ..Request::default()
    };
    // SAFETY: req is plain data of the size given; the kernel only reads it
    let sent = unsafe {
        libc::send(
            fd.as_raw_fd(),
            (&req as *const Request).cast(),
            size_of::<Request>(),
            0,
        )
    };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        // SAFETY: buf is ours and as long as said
        let n = unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if parse(&buf[..n as usize], seq, out)? {
            return Ok(());
        }
    }
}

/// One datagram of the answer: its messages' listening sockets into `out`; true at the
/// end of the dump.
fn parse(mut data: &[u8], seq: u32, out: &mut HashMap<u64, u16>) -> io::Result<bool> {
    let hdr_len = size_of::<NlMsgHdr>();
    while data.len() >= hdr_len {
        let hdr: NlMsgHdr = read(data);
        let len = hdr.len as usize;
        if len < hdr_len || len > data.len() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "sock_diag: a message longer than its datagram",
            ));
        }
        if hdr.seq == seq {
            match hdr.kind {
                NLMSG_DONE => return Ok(true),
                NLMSG_ERROR => {
                    // an nlmsgerr: the negative errno first
                    let errno = data
                        .get(hdr_len..hdr_len + 4)
                        .map(|b| i32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
                        .unwrap_or(-libc::EIO);
                    return Err(io::Error::from_raw_os_error(-errno));
                }
                SOCK_DIAG_BY_FAMILY if len >= hdr_len + size_of::<Answer>() => {
                    let a: Answer = read(&data[hdr_len..]);
                    if u32::from(a.state) == TCP_LISTEN {
                        out.insert(u64::from(a.inode), u16::from_be_bytes(a.id.sport));
                    }
                }
                _ => {}
            }
        }
        // messages are aligned to 4 bytes
        let next = (len + 3) & !3;
        data = data.get(next..).unwrap_or(&[]);
    }
    Ok(false)
}

/// A plain-data struct from the start of `bytes` (at least its size, checked by callers).
fn read<T: Copy + Default>(bytes: &[u8]) -> T {
    let mut v = T::default();
    let n = size_of::<T>().min(bytes.len());
    // SAFETY: T is plain old data (repr(C) integers and arrays); at most its size is
    // copied, from a slice at least that long
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), (&mut v as *mut T).cast::<u8>(), n);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::{fs, net::TcpListener, os::unix::io::AsRawFd};

    /// A socket this process listens on is in the answer, with its port and the inode
    /// its fd links to (what `ports_held` matches against); a connected one is not.
    #[test]
    fn a_listener_of_ours_is_found_with_its_inode() {
        let v4 = TcpListener::bind("127.0.0.1:0").unwrap();
        let v6 = TcpListener::bind("[::1]:0").ok();
        let client = std::net::TcpStream::connect(v4.local_addr().unwrap()).unwrap();
        let inode = |fd: i32| -> u64 {
            let link = fs::read_link(format!("/proc/self/fd/{fd}")).unwrap();
            let link = link.to_string_lossy();
            link.trim_start_matches("socket:[")
                .trim_end_matches(']')
                .parse()
                .unwrap()
        };
        let found = listening_inodes().expect("sock_diag answers");
        assert_eq!(
            found.get(&inode(v4.as_raw_fd())),
            Some(&v4.local_addr().unwrap().port())
        );
        if let Some(v6) = v6 {
            assert_eq!(
                found.get(&inode(v6.as_raw_fd())),
                Some(&v6.local_addr().unwrap().port())
            );
        }
        assert!(!found.contains_key(&inode(client.as_raw_fd())));
    }

    #[test]
    fn a_truncated_answer_is_an_error_not_a_panic() {
        let mut out = HashMap::new();
        let hdr = NlMsgHdr {
            len: 200,
            kind: SOCK_DIAG_BY_FAMILY,
            seq: 1,
            ..NlMsgHdr::default()
        };
        // SAFETY: reading a plain struct's bytes
        let bytes = unsafe {
            std::slice::from_raw_parts(
                (&hdr as *const NlMsgHdr).cast::<u8>(),
                size_of::<NlMsgHdr>(),
            )
        };
        assert!(parse(bytes, 1, &mut out).is_err());
        assert!(!parse(&[1, 2, 3], 1, &mut out).unwrap() && out.is_empty());
    }
}
