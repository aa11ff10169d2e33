//! TCP proxies on 127.0.0.1 in front of a test server: one holds a client flight for a
//! known delay and measures the server's waits on the wire, the other re-frames the
//! ClientHello into small records. Both stop when dropped.

use std::{
    io::{Read, Write},
    net::{TcpListener, TcpStream},
    thread,
    time::{Duration, SystemTime},
};

/// A TCP proxy on 127.0.0.1 in front of `target` that holds the client's `flight`-th
/// flight (1: its first bytes; 2: its first bytes after the server's first answer; …)
/// for `delay` before passing it on: a known network delay on loopback, where there is
/// no netem. One connection at a time; it stops when dropped.
///
/// It also measures, as ground truth, how long the server waited on the wire for each
/// client flight after its first: from the proxy's read of the last bytes of the server's
/// previous flight to its write of the flight's first bytes to the server (delay
/// included). That is the server's wait for the client, less two loopback hops. Its
/// threads run real-time (SCHED_FIFO) so that, on a busy machine, no ordinary task comes
/// between its stamp of a flight and its write of it to the server.
pub struct DelayProxy {
    pub port: u16,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    waits: std::sync::Arc<std::sync::Mutex<Vec<(u32, Duration)>>>,
}

impl DelayProxy {
    pub fn start(target: u16, flight: u32, delay: Duration) -> DelayProxy {
        Self::spawn(target, flight, delay, false)
    }

    /// The same, passing on everything the client sent during the delay in one write: a
    /// TLS 1.3 client's Finished and its request then reach the server in one segment.
    pub fn merging(target: u16, flight: u32, delay: Duration) -> DelayProxy {
        Self::spawn(target, flight, delay, true)
    }

    fn spawn(target: u16, flight: u32, delay: Duration, merge: bool) -> DelayProxy {
        use std::sync::{
            atomic::{AtomicBool, AtomicU32, Ordering},
            Arc,
        };
        let (listener, port) = proxy_listener();
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let waits = Arc::new(std::sync::Mutex::new(Vec::new()));
        let measured = waits.clone();
        thread::spawn(move || {
            real_time();
            while !stopped.load(Ordering::Relaxed) {
                let Ok((client, _)) = listener.accept() else {
                    thread::sleep(Duration::from_millis(5));
                    continue;
                };
                client.set_nonblocking(false).unwrap();
                client.set_nodelay(true).unwrap();
                let server = TcpStream::connect(("127.0.0.1", target)).unwrap();
                server.set_nodelay(true).unwrap();
                // flights: odd while the client speaks, even while the server does
                let turn = Arc::new(AtomicU32::new(0));
                let last_down = Arc::new(std::sync::Mutex::new(None::<SystemTime>));
                let (mut c_in, mut s_out) =
                    (client.try_clone().unwrap(), server.try_clone().unwrap());
                let (t, down, measured) = (turn.clone(), last_down.clone(), measured.clone());
                let up = thread::spawn(move || {
                    real_time();
                    let mut buf = [0u8; 16384];
                    while let Ok(mut n) = c_in.read(&mut buf) {
                        if n == 0 {
                            break;
                        }
                        if t.load(Ordering::SeqCst) % 2 == 0 {
                            let f = t.fetch_add(1, Ordering::SeqCst) / 2 + 1;
                            if f == flight {
                                thread::sleep(delay);
                                if merge {
                                    c_in.set_nonblocking(true).unwrap();
                                    while let Ok(m) = c_in.read(&mut buf[n..]) {
                                        if m == 0 {
                                            break;
                                        }
                                        n += m;
                                    }
                                    c_in.set_nonblocking(false).unwrap();
                                }
                            }
                            if let Some(since) = *down.lock().unwrap() {
                                let wait = SystemTime::now().duration_since(since);
                                measured.lock().unwrap().push((f, wait.unwrap_or_default()));
                            }
                        }
                        if s_out.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                    let _ = s_out.shutdown(std::net::Shutdown::Write);
                });
                let (s_in, mut c_out) = (server, client);
                stamp_reads(&s_in);
                let mut buf = [0u8; 16384];
                while let Ok((n, arrived)) = recv_stamped(&s_in, &mut buf) {
                    if n == 0 {
                        break;
                    }
                    *last_down.lock().unwrap() = Some(arrived);
                    if turn.load(Ordering::SeqCst) % 2 == 1 {
                        turn.fetch_add(1, Ordering::SeqCst);
                    }
                    if c_out.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
                let _ = c_out.shutdown(std::net::Shutdown::Write);
                let _ = up.join();
            }
        });
        DelayProxy { port, stop, waits }
    }

    /// The measured wait for the client's `flight`-th flight (2 or later) on the last
    /// connection that reached it.
    pub fn wait_for(&self, flight: u32) -> Option<Duration> {
        let waits = self.waits.lock().unwrap();
        waits
            .iter()
            .rev()
            .find(|(f, _)| *f == flight)
            .map(|(_, d)| *d)
    }
}

/// Runs the calling thread real-time (SCHED_FIFO, the lowest priority): ahead of every
/// ordinary task on its CPU. Root only; without root it says so and runs as it is.
fn real_time() {
    let param = libc::sched_param { sched_priority: 1 };
    // SAFETY: pid 0 is this thread, and the kernel only reads param
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) } != 0 {
        eprintln!(
            "the delay proxy runs as an ordinary thread (no SCHED_FIFO: {}); its ground truth \
             may lag on a busy machine",
            std::io::Error::last_os_error()
        );
    }
}

/// Asks the kernel to stamp every read from `s` with the receive time (SO_TIMESTAMPNS).
fn stamp_reads(s: &TcpStream) {
    use std::os::fd::AsRawFd;
    let on: libc::c_int = 1;
    // SAFETY: a valid socket and an int option of the right size.
    let rc = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_TIMESTAMPNS,
            &on as *const _ as *const libc::c_void,
            std::mem::size_of_val(&on) as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0, "SO_TIMESTAMPNS: {}", std::io::Error::last_os_error());
}

/// One read from a socket set up by `stamp_reads`, with the kernel's receive time of the
/// last bytes read: on loopback, the moment the peer wrote them, however late this thread
/// is scheduled to read them.
fn recv_stamped(s: &TcpStream, buf: &mut [u8]) -> std::io::Result<(usize, SystemTime)> {
    use std::os::fd::AsRawFd;
    let fd = s.as_raw_fd();
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let mut control = [0u64; 16];
    // SAFETY: msghdr is plain data; every pointer in it outlives the call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control) as _;
    // SAFETY: as above.
    let n = unsafe { libc::recvmsg(fd, &mut msg, 0) };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut arrived = SystemTime::now();
    // SAFETY: the CMSG macros walk the control buffer the kernel just filled.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SO_TIMESTAMPNS {
                let ts = std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const libc::timespec);
                arrived =
                    SystemTime::UNIX_EPOCH + Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32);
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    Ok((n as usize, arrived))
}

impl Drop for DelayProxy {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// A TCP proxy on 127.0.0.1 in front of `target` that passes everything through, except
/// that it cuts the body of the client's first record (its ClientHello) into records of
/// `piece` bytes each, sent in one write. Legal TLS: a real client's handshake completes
/// through it. Serves connections one after another until dropped.
pub struct ReframeProxy {
    pub port: u16,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    served: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl ReframeProxy {
    pub fn start(target: u16, piece: usize) -> ReframeProxy {
        use std::sync::{
            atomic::{AtomicBool, AtomicUsize, Ordering},
            Arc,
        };
        let (listener, port) = proxy_listener();
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let served = Arc::new(AtomicUsize::new(0));
        let counted = served.clone();
        thread::spawn(move || {
            real_time();
            while !stopped.load(Ordering::Relaxed) {
                let Ok((client, _)) = listener.accept() else {
                    thread::sleep(Duration::from_millis(5));
                    continue;
                };
                Self::serve(client, target, piece);
                counted.fetch_add(1, Ordering::SeqCst);
            }
        });
        ReframeProxy { port, stop, served }
    }

    /// Connections served and closed so far.
    pub fn served(&self) -> usize {
        self.served.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn serve(mut client: TcpStream, target: u16, piece: usize) {
        {
            client.set_nonblocking(false).unwrap();
            let mut server = TcpStream::connect(("127.0.0.1", target)).unwrap();
            let mut header = [0u8; 5];
            if client.read_exact(&mut header).is_err() {
                return;
            }
            let mut body = vec![0u8; u16::from_be_bytes([header[3], header[4]]) as usize];
            if client.read_exact(&mut body).is_err() {
                return;
            }
            let mut out = Vec::new();
            for chunk in body.chunks(piece.max(1)) {
                out.extend_from_slice(&header[..3]);
                out.extend_from_slice(&(chunk.len() as u16).to_be_bytes());
                out.extend_from_slice(chunk);
            }
            if server.write_all(&out).is_err() {
                return;
            }
            let (mut c_in, mut s_out) = (client.try_clone().unwrap(), server.try_clone().unwrap());
            let up = thread::spawn(move || {
                let _ = std::io::copy(&mut c_in, &mut s_out);
                let _ = s_out.shutdown(std::net::Shutdown::Write);
            });
            let _ = std::io::copy(&mut server, &mut client);
            let _ = client.shutdown(std::net::Shutdown::Write);
            let _ = up.join();
        }
    }
}

impl Drop for ReframeProxy {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// A test proxy's listener on a free loopback port, non-blocking so its accept loop can
/// see that it was stopped.
fn proxy_listener() -> (TcpListener, u16) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    (listener, port)
}
