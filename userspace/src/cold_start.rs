//! The cold start: what a CPU pays to run a piece of work cold, by how long since it last
//! ran it. A stage of a one-user window runs after the CPU has been away from the server's
//! code for a think time (asleep, or running other work): the caches, the TLB and the branch
//! history it left are gone, and the stage pays to refill them; under load the same stage
//! ran a few milliseconds before and runs warm. The model takes that part of the window's
//! stages out and adds it back by how long each visit had been away (`model::warm::warm`).
//!
//! How much a cold start costs depends on how much code and data the work touches, so two
//! works are timed: a TLS record's (SHA-256 and AES-128-GCM over `WORK_BYTES`), what every
//! visit of a connection does, and a full handshake's first flight's (an X25519 key
//! exchange, an ECDSA P-256 signature and a record), what the visit that answers a
//! ClientHello with a certificate does: after 0.2 s away the second pays three to four
//! times the first's. Both come from the host's OpenSSL libcrypto (the library its TLS servers
//! run), loaded at run time, on one CPU, by the thread's CPU clock, back to back and after
//! each pause of `PAUSES`, the two works in turn. The record source measures them on a CPU
//! the traced servers run on, then times the longest pause again through the run (`RETIMED`:
//! a cold start varies from one moment to the next, by a factor of 3 between runs of a dozen
//! seconds apart, and the stages it is taken out of are a window's means), and the
//! parameters carry the latest (`host.cold_start`); `hstrace model --cold-start measure`
//! measures them once on the model's host.

use std::{
    collections::{BTreeSet, VecDeque},
    sync::{
        atomic::{AtomicBool, Ordering},
        mpsc::{self, Receiver, SyncSender, TryRecvError, TrySendError},
        Arc,
    },
    thread,
    time::Duration,
};

use anyhow::{anyhow, bail, Context, Result};

/// The work: a TLS record's worth of bytes.
const WORK_BYTES: usize = 16 * 1024;

/// The pauses after which each work is timed, and how often: from the gaps between a
/// connection's flights under load (0.2-5 ms) to a one-user think time (0.2 s). About 3.5 s
/// a work.
const PAUSES: [(Duration, u32); 5] = [
    (Duration::from_micros(200), 60),
    (Duration::from_millis(1), 60),
    (Duration::from_millis(5), 60),
    (Duration::from_millis(25), 24),
    (Duration::from_millis(200), 12),
];

/// Back-to-back runs, the warm cost every pause's is measured against.
const WARM_RUNS: u32 = 60;

/// The pause the record source times again through the run, where one run's median moved
/// most: `RETIMED_RUNS` times a round (the first, after the rest, not kept), a round every
/// `REST` and a second: two runs kept every 6 s, for about 2 ms of CPU a second on the test
/// machines (cold runs are the dear ones).
const RETIMED: [Duration; 1] = [Duration::from_millis(200)];
const RETIMED_RUNS: u32 = 3;
const REST: Duration = Duration::from_secs(5);

/// The runs kept at a pause: the latest this many (at the pause timed again, about the last
/// three minutes).
const KEPT: usize = 60;

pub use hstrace_model::cold_start::{ColdRun, ColdStart, ColdWork};

/// The record's work, in words.
fn record_work() -> String {
    format!(
        "SHA-256 and AES-128-GCM over {} KiB (a TLS record's work, libcrypto)",
        WORK_BYTES / 1024
    )
}

/// The handshake's work, in words.
fn handshake_work() -> String {
    format!(
        "an X25519 key exchange, an ECDSA P-256 signature and {} KiB sealed (a full handshake's first flight's work, libcrypto)",
        WORK_BYTES / 1024
    )
}

/// Times the work on the first CPU this process may run on (`hstrace model --cold-start
/// measure`), once, waiting for it.
pub fn measure() -> Result<ColdStart> {
    let (results, _stop) = spawn_on(first_allowed_cpu()?, false)?;
    results
        .recv()
        .unwrap_or_else(|_| Err(anyhow!("the cold start's measuring thread panicked")))
}

/// The measurement on a thread of its own, pinned to `cpu`: each work back to back and
/// after each pause, the two in turn, each run after a pause of its own (about 7 s, mostly
/// asleep; under 0.1 s of CPU); then, if `retime`, the longest pause again in rounds until
/// told to stop (each round's runs pooled with the earlier). Each result on the channel:
/// the first measurement, then one a round (skipped while the last waits unread).
fn spawn_on(cpu: u32, retime: bool) -> Result<(Receiver<Result<ColdStart>>, Arc<AtomicBool>)> {
    // one result waits at most: a round's holds every earlier round's runs
    let (out, results) = mpsc::sync_channel(1);
    let stop = Arc::new(AtomicBool::new(false));
    let told = stop.clone();
    thread::Builder::new()
        .name("cold-start".into())
        .spawn(move || {
            if let Err(e) = run_on(cpu, retime, &told, &out) {
                let _ = out.send(Err(e));
            }
        })
        .context("cannot start the cold start's measuring thread")?;
    Ok((results, stop))
}

/// The measuring thread's work; an error ends it (a send that fails: nobody listens).
fn run_on(
    cpu: u32,
    retime: bool,
    stop: &AtomicBool,
    out: &SyncSender<Result<ColdStart>>,
) -> Result<()> {
    pin(cpu)?;
    let mut probe = Probe::new(cpu)?;
    for (pause, runs) in std::iter::once((Duration::ZERO, WARM_RUNS)).chain(PAUSES) {
        for _ in 0..runs {
            probe.pair(pause, true)?;
        }
    }
    if out.send(Ok(probe.result())).is_err() || !retime {
        return Ok(());
    }
    while !stop.load(Ordering::Relaxed) {
        for pause in RETIMED {
            for i in 0..RETIMED_RUNS {
                if stop.load(Ordering::Relaxed) {
                    return Ok(());
                }
                probe.pair(pause, i > 0)?;
            }
        }
        if let Err(TrySendError::Disconnected(_)) = out.try_send(Ok(probe.result())) {
            return Ok(());
        }
        // the rest in slices: a stop is seen within one
        let rested = std::time::Instant::now();
        while rested.elapsed() < REST && !stop.load(Ordering::Relaxed) {
            thread::sleep(Duration::from_millis(100));
        }
    }
    Ok(())
}

/// The two works, their inputs and what each took after each pause.
struct Probe {
    cpu: u32,
    lib: libcrypto::Lib,
    keys: libcrypto::HandshakeKeys,
    record: Vec<u8>,
    sealed: Vec<u8>,
    /// (pause, the record's runs, the handshake's), back to back first, then `PAUSES`
    took: Vec<(Duration, Took, Took)>,
}

impl Probe {
    fn new(cpu: u32) -> Result<Probe> {
        let lib = libcrypto::Lib::load()?;
        let keys = lib.handshake_keys()?;
        let took = std::iter::once(Duration::ZERO)
            .chain(PAUSES.map(|(p, _)| p))
            .map(|p| (p, Took::default(), Took::default()))
            .collect();
        Ok(Probe {
            cpu,
            lib,
            keys,
            record: vec![7u8; WORK_BYTES],
            sealed: vec![0u8; WORK_BYTES + 64],
            took,
        })
    }

    /// The record's work after `pause`, then the handshake's after another; kept if `keep`.
    fn pair(&mut self, pause: Duration, keep: bool) -> Result<()> {
        pause_for(pause);
        let (lib, record, sealed) = (&self.lib, &self.record, &mut self.sealed);
        let r = timed(self.cpu, || lib.digest_and_seal(record, sealed))?;
        pause_for(pause);
        let keys = &self.keys;
        let h = timed(self.cpu, || lib.handshake_flight(keys, record, sealed))?;
        if keep {
            let (_, rs, hs) = self
                .took
                .iter_mut()
                .find(|(p, _, _)| *p == pause)
                .expect("every pause timed has its runs");
            rs.push(r);
            hs.push(h);
        }
        Ok(())
    }

    fn result(&self) -> ColdStart {
        let runs = |which: fn(&(Duration, Took, Took)) -> &Took| {
            self.took
                .iter()
                .map(|t| which(t).run(t.0))
                .collect::<Vec<_>>()
        };
        ColdStart {
            work: record_work(),
            cpu: self.cpu,
            runs: runs(|t| &t.1),
            handshake: Some(ColdWork {
                work: handshake_work(),
                runs: runs(|t| &t.2),
            }),
        }
    }
}

/// `work`'s CPU time on this thread, seconds; refused if the thread left `cpu`.
fn timed(cpu: u32, work: impl FnOnce() -> Result<()>) -> Result<f64> {
    let from = crate::clock::thread_cpu_ns()?;
    work()?;
    let took = crate::clock::thread_cpu_ns()?.saturating_sub(from) as f64 / 1e9;
    // SAFETY: no arguments; returns the CPU this thread runs on
    if unsafe { libc::sched_getcpu() } != cpu as i32 {
        bail!("the measuring thread was moved off CPU {cpu} (were hstrace's threads pinned elsewhere while it ran? pin hstrace before it starts, e.g. taskset -c CPUS hstrace ...)");
    }
    Ok(took)
}

/// A work's CPU times after one pause: the latest `KEPT`.
#[derive(Default)]
struct Took {
    runs: VecDeque<f64>,
}

impl Took {
    fn push(&mut self, took: f64) {
        if self.runs.len() == KEPT {
            self.runs.pop_front();
        }
        self.runs.push_back(took);
    }

    fn run(&self, pause: Duration) -> ColdRun {
        let n = self.runs.len().max(1) as f64;
        ColdRun {
            pause_s: pause.as_secs_f64(),
            cpu_s: median(&mut Vec::from(self.runs.clone())),
            runs: self.runs.len() as u32,
            // to the nanosecond, the clock's: what a document's reader parses back
            cpu_mean_s: Some((self.runs.iter().sum::<f64>() / n * 1e9).round() / 1e9),
        }
    }
}

/// Whether the record source measures the cold start (`source::Options::cold_start`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Want {
    /// no (trace, report)
    No,
    /// in the background, and again through the run; a run that ends before the first
    /// measurement goes without it (serve)
    Background,
    /// the same, and a run that ends first waits for the first (export: its document is
    /// all there is)
    BeforeTheEnd,
}

/// The record source's measurement: on a thread of its own, started on the CPU the traced
/// processes are seen on (`cpu_of_most`) when they are first seen, timing the longest pause
/// again until `finish`, dropped, or an error.
#[derive(Default)]
pub enum Background {
    #[default]
    NotStarted,
    Running {
        results: Receiver<Result<ColdStart>>,
        stop: Arc<AtomicBool>,
        /// whether the first measurement came
        measured: bool,
    },
    Over,
}

impl Background {
    /// Start on `cpu` (None: no traced process seen yet); the latest result since the last
    /// call, if any.
    pub fn poll(&mut self, cpu: Option<u32>) -> Option<Result<ColdStart>> {
        if let Background::NotStarted = self {
            match spawn_on(cpu?, true) {
                Ok((results, stop)) => {
                    *self = Background::Running {
                        results,
                        stop,
                        measured: false,
                    }
                }
                Err(e) => {
                    *self = Background::Over;
                    return Some(Err(e));
                }
            }
        }
        self.latest(false)
    }

    /// Whether the first measurement is still under way.
    pub fn first_pending(&self) -> bool {
        matches!(
            self,
            Background::Running {
                measured: false,
                ..
            }
        )
    }

    /// Whether one was ever started.
    pub fn started(&self) -> bool {
        !matches!(self, Background::NotStarted)
    }

    /// The latest result since the last poll, waiting for the first measurement if it is
    /// under way (at most its 7 s); the measurement stops.
    pub fn finish(&mut self) -> Option<Result<ColdStart>> {
        let latest = self.latest(true);
        // (a measurement under way, replaced, is dropped: told to stop)
        *self = Background::Over;
        latest
    }

    /// The latest result on the channel since the last call; with `wait_first`, waiting
    /// for the first if none came yet. Before the first, an error (or the thread's end) is
    /// the result; after it, a warning: the parameters keep the last figures. Either ends
    /// the measurement.
    fn latest(&mut self, wait_first: bool) -> Option<Result<ColdStart>> {
        let Background::Running {
            results, measured, ..
        } = self
        else {
            return None;
        };
        let mut pending = Vec::new();
        if wait_first && !*measured {
            pending.push(results.recv().map_err(|_| ()));
        }
        loop {
            match results.try_recv() {
                Ok(r) => pending.push(Ok(r)),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => {
                    pending.push(Err(()));
                    break;
                }
            }
        }
        let mut latest = None;
        let mut ended = None;
        for r in pending {
            match r {
                Ok(Ok(c)) => {
                    if !*measured {
                        log::info!("cold start: {}", c.words());
                    }
                    *measured = true;
                    latest = Some(c);
                }
                Ok(Err(e)) => {
                    ended = Some(e);
                    break;
                }
                Err(()) => {
                    ended = Some(anyhow!("the cold start's measuring thread ended"));
                    break;
                }
            }
        }
        let Some(e) = ended else {
            return latest.map(Ok);
        };
        let first = !*measured;
        *self = Background::Over;
        if first {
            return Some(Err(e));
        }
        log::warn!("the cold start is no longer timed again: {e:#}");
        latest.map(Ok)
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        if let Background::Running { stop, .. } = self {
            stop.store(true, Ordering::Relaxed);
        }
    }
}

/// Asleep for `pause` (none back to back: no syscall between two runs).
fn pause_for(pause: Duration) {
    if !pause.is_zero() {
        thread::sleep(pause);
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The CPU that most of the processes (their allowed CPUs, `allowed`) may run on, the
/// lowest of those: where a server's workers are pinned and its master is not, a CPU of
/// the workers'; None without any.
pub fn cpu_of_most(allowed: &[BTreeSet<u32>]) -> Option<u32> {
    let mut count: std::collections::BTreeMap<u32, usize> = Default::default();
    for cpu in allowed.iter().flatten() {
        *count.entry(*cpu).or_default() += 1;
    }
    let most = *count.values().max()?;
    count
        .into_iter()
        .find(|(_, n)| *n == most)
        .map(|(cpu, _)| cpu)
}

/// The lowest CPU this thread may run on.
fn first_allowed_cpu() -> Result<u32> {
    crate::host_cpu::allowed(0)
        .and_then(|cpus| cpus.first().copied())
        .context("cannot read which CPUs hstrace may run on (sched_getaffinity)")
}

/// The calling thread on `cpu` only.
fn pin(cpu: u32) -> Result<()> {
    // SAFETY: an all-zero cpu_set_t is a valid empty set
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: CPU_SET checks cpu against the set's size
    unsafe { libc::CPU_SET(cpu as usize, &mut set) };
    // SAFETY: set is a cpu_set_t of the size given; 0 is this thread
    if unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) } != 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("cannot run the cold start's measuring thread on CPU {cpu} (offline, or outside hstrace's cpuset? `taskset -pc PID` shows the CPUs a process may use): run hstrace where it may use the servers' CPUs"));
    }
    Ok(())
}

/// The few libcrypto calls the work makes, found at run time: hstrace links no OpenSSL.
mod libcrypto {
    use anyhow::{anyhow, bail, Result};
    use std::ffi::{c_char, c_int, c_uchar, c_uint, c_void, CStr};

    type Method = unsafe extern "C" fn() -> *const c_void;
    type Digest = unsafe extern "C" fn(
        *const c_void,
        usize,
        *mut c_uchar,
        *mut c_uint,
        *const c_void,
        *mut c_void,
    ) -> c_int;
    type CtxNew = unsafe extern "C" fn() -> *mut c_void;
    type CtxFree = unsafe extern "C" fn(*mut c_void);
    type Init = unsafe extern "C" fn(
        *mut c_void,
        *const c_void,
        *mut c_void,
        *const c_uchar,
        *const c_uchar,
    ) -> c_int;
    type Update =
        unsafe extern "C" fn(*mut c_void, *mut c_uchar, *mut c_int, *const c_uchar, c_int) -> c_int;
    type PkeyCtxFromName =
        unsafe extern "C" fn(*mut c_void, *const c_char, *const c_char) -> *mut c_void;
    type PkeyCtxNew = unsafe extern "C" fn(*mut c_void, *mut c_void) -> *mut c_void;
    type PkeyOp = unsafe extern "C" fn(*mut c_void) -> c_int;
    type Keygen = unsafe extern "C" fn(*mut c_void, *mut *mut c_void) -> c_int;
    type SetGroup = unsafe extern "C" fn(*mut c_void, *const c_char) -> c_int;
    type SetPeer = unsafe extern "C" fn(*mut c_void, *mut c_void) -> c_int;
    type Derive = unsafe extern "C" fn(*mut c_void, *mut c_uchar, *mut usize) -> c_int;
    type Sign =
        unsafe extern "C" fn(*mut c_void, *mut c_uchar, *mut usize, *const c_uchar, usize) -> c_int;

    /// OpenSSL 3's `OPENSSL_INIT_NO_ATEXIT` (crypto.h).
    const OPENSSL_INIT_NO_ATEXIT: u64 = 0x0008_0000;

    /// libcrypto's functions, by name.
    pub struct Lib {
        sha256: Method,
        aes_128_gcm: Method,
        digest: Digest,
        ctx_new: CtxNew,
        ctx_free: CtxFree,
        init: Init,
        update: Update,
        pkey_ctx_from_name: PkeyCtxFromName,
        pkey_ctx_new: PkeyCtxNew,
        pkey_ctx_free: CtxFree,
        pkey_free: CtxFree,
        keygen_init: PkeyOp,
        keygen: Keygen,
        set_group: SetGroup,
        derive_init: PkeyOp,
        set_peer: SetPeer,
        derive: Derive,
        sign_init: PkeyOp,
        sign: Sign,
    }

    /// The keys a handshake's work uses again and again: the client's X25519 share and
    /// the server's ECDSA P-256 key, made once; freed with the library's own call.
    pub struct HandshakeKeys {
        peer: *mut c_void,
        signer: *mut c_void,
        free: CtxFree,
    }

    impl Drop for HandshakeKeys {
        fn drop(&mut self) {
            // SAFETY: each key was made by libcrypto for this struct alone (or is null,
            // which EVP_PKEY_free accepts)
            unsafe {
                (self.free)(self.peer);
                (self.free)(self.signer);
            }
        }
    }

    impl Lib {
        /// libcrypto.so.3 (OpenSSL 3); never unloaded.
        pub fn load() -> Result<Lib> {
            // SAFETY: a NUL-terminated name; the handle is kept for the process's life
            let lib = unsafe { libc::dlopen(c"libcrypto.so.3".as_ptr(), libc::RTLD_NOW) };
            if lib.is_null() {
                bail!("the cold start is timed on OpenSSL's libcrypto.so.3, which this host does not have: install libssl3 (or give hstrace model --cold-start SINCE=TIME,... measured on the servers' host)");
            }
            let sym = |name: &CStr| -> Result<*mut c_void> {
                // SAFETY: lib is a live handle, name NUL-terminated
                let f = unsafe { libc::dlsym(lib, name.as_ptr()) };
                (!f.is_null())
                    .then_some(f)
                    .ok_or_else(|| anyhow!("libcrypto.so.3 has no {name:?}: the cold start is timed on OpenSSL 3's (install libssl3)"))
            };
            // no cleanup of libcrypto's at exit: hstrace may exit while the measuring
            // thread is still inside it (a daemon stopped in its first seconds)
            type Init = unsafe extern "C" fn(u64, *const c_void) -> c_int;
            // SAFETY: OPENSSL_init_crypto(uint64_t opts, const OPENSSL_INIT_SETTINGS *)
            let init: Init = unsafe { as_fn(sym(c"OPENSSL_init_crypto")?) };
            // SAFETY: the option is OpenSSL 3's OPENSSL_INIT_NO_ATEXIT; no settings
            if unsafe { init(OPENSSL_INIT_NO_ATEXIT, std::ptr::null()) } != 1 {
                bail!("libcrypto.so.3 would not initialise (OPENSSL_init_crypto)");
            }
            /// A symbol as the function type it is given.
            ///
            /// SAFETY: `T` must be the type of the OpenSSL 3 function the symbol names.
            unsafe fn as_fn<T: Copy>(f: *mut c_void) -> T {
                debug_assert_eq!(std::mem::size_of::<T>(), std::mem::size_of_val(&f));
                // SAFETY: a function pointer and a data pointer have one size here; the
                // caller gives the type
                unsafe { std::mem::transmute_copy(&f) }
            }
            // SAFETY: each symbol is the OpenSSL 3 function of the type it is given
            unsafe {
                Ok(Lib {
                    sha256: as_fn(sym(c"EVP_sha256")?),
                    aes_128_gcm: as_fn(sym(c"EVP_aes_128_gcm")?),
                    digest: as_fn(sym(c"EVP_Digest")?),
                    ctx_new: as_fn(sym(c"EVP_CIPHER_CTX_new")?),
                    ctx_free: as_fn(sym(c"EVP_CIPHER_CTX_free")?),
                    init: as_fn(sym(c"EVP_EncryptInit_ex")?),
                    update: as_fn(sym(c"EVP_EncryptUpdate")?),
                    pkey_ctx_from_name: as_fn(sym(c"EVP_PKEY_CTX_new_from_name")?),
                    pkey_ctx_new: as_fn(sym(c"EVP_PKEY_CTX_new")?),
                    pkey_ctx_free: as_fn(sym(c"EVP_PKEY_CTX_free")?),
                    pkey_free: as_fn(sym(c"EVP_PKEY_free")?),
                    keygen_init: as_fn(sym(c"EVP_PKEY_keygen_init")?),
                    keygen: as_fn(sym(c"EVP_PKEY_keygen")?),
                    set_group: as_fn(sym(c"EVP_PKEY_CTX_set_group_name")?),
                    derive_init: as_fn(sym(c"EVP_PKEY_derive_init")?),
                    set_peer: as_fn(sym(c"EVP_PKEY_derive_set_peer")?),
                    derive: as_fn(sym(c"EVP_PKEY_derive")?),
                    sign_init: as_fn(sym(c"EVP_PKEY_sign_init")?),
                    sign: as_fn(sym(c"EVP_PKEY_sign")?),
                })
            }
        }

        /// A new key of algorithm `name` (`X25519`, or `EC` on `group`).
        fn new_key(&self, name: &CStr, group: Option<&CStr>) -> Result<*mut c_void> {
            let mut key = std::ptr::null_mut();
            // SAFETY: NUL-terminated names; the context is made, used and freed here; key
            // is written by EVP_PKEY_keygen only when it returns 1
            let ok = unsafe {
                let ctx = (self.pkey_ctx_from_name)(
                    std::ptr::null_mut(),
                    name.as_ptr(),
                    std::ptr::null(),
                );
                let ok = !ctx.is_null()
                    && (self.keygen_init)(ctx) == 1
                    && group.is_none_or(|g| (self.set_group)(ctx, g.as_ptr()) == 1)
                    && (self.keygen)(ctx, &mut key) == 1;
                (self.pkey_ctx_free)(ctx);
                ok
            };
            if !ok || key.is_null() {
                bail!("libcrypto could not make an {name:?} key");
            }
            Ok(key)
        }

        /// The keys `handshake_flight` uses again.
        pub fn handshake_keys(&self) -> Result<HandshakeKeys> {
            let mut keys = HandshakeKeys {
                peer: std::ptr::null_mut(),
                signer: std::ptr::null_mut(),
                free: self.pkey_free,
            };
            keys.peer = self.new_key(c"X25519", None)?;
            keys.signer = self.new_key(c"EC", Some(c"P-256"))?;
            Ok(keys)
        }

        /// What a full handshake's first flight computes: a key share of its own and the
        /// secret shared with the client's (X25519), a signature (ECDSA P-256, over a
        /// SHA-256 digest) and a record (`digest_and_seal`).
        pub fn handshake_flight(
            &self,
            keys: &HandshakeKeys,
            data: &[u8],
            out: &mut [u8],
        ) -> Result<()> {
            let share = self.new_key(c"X25519", None)?;
            let (mut secret, mut secret_len) = ([0u8; 64], 64usize);
            let (mut sig, mut sig_len) = ([0u8; 128], 128usize);
            let digest = [3u8; 32];
            // SAFETY: the keys are live; each context is made, used and freed here; every
            // buffer is live with the length given with it
            let ok = unsafe {
                let ctx = (self.pkey_ctx_new)(share, std::ptr::null_mut());
                let derived = !ctx.is_null()
                    && (self.derive_init)(ctx) == 1
                    && (self.set_peer)(ctx, keys.peer) == 1
                    && (self.derive)(ctx, secret.as_mut_ptr(), &mut secret_len) == 1;
                (self.pkey_ctx_free)(ctx);
                (self.pkey_free)(share);
                let ctx = (self.pkey_ctx_new)(keys.signer, std::ptr::null_mut());
                let signed = !ctx.is_null()
                    && (self.sign_init)(ctx) == 1
                    && (self.sign)(
                        ctx,
                        sig.as_mut_ptr(),
                        &mut sig_len,
                        digest.as_ptr(),
                        digest.len(),
                    ) == 1;
                (self.pkey_ctx_free)(ctx);
                derived && signed
            };
            if !ok {
                bail!("libcrypto refused X25519 or ECDSA P-256");
            }
            self.digest_and_seal(data, out)
        }

        /// SHA-256 of `data`, then `data` sealed with AES-128-GCM into `out` (at least 16
        /// bytes longer).
        pub fn digest_and_seal(&self, data: &[u8], out: &mut [u8]) -> Result<()> {
            if out.len() < data.len() + 16 {
                bail!("no room to seal {} bytes", data.len());
            }
            let (key, iv) = ([1u8; 16], [2u8; 12]);
            let mut md = [0u8; 64];
            let mut md_len: c_uint = 0;
            let mut out_len: c_int = 0;
            // SAFETY: every pointer is to a live buffer of the length given with it (md
            // holds any digest); the context is created, used and freed here only
            let ok = unsafe {
                let digest = (self.digest)(
                    data.as_ptr().cast(),
                    data.len(),
                    md.as_mut_ptr(),
                    &mut md_len,
                    (self.sha256)(),
                    std::ptr::null_mut(),
                );
                let ctx = (self.ctx_new)();
                if ctx.is_null() {
                    bail!("EVP_CIPHER_CTX_new failed");
                }
                let sealed = (self.init)(
                    ctx,
                    (self.aes_128_gcm)(),
                    std::ptr::null_mut(),
                    key.as_ptr(),
                    iv.as_ptr(),
                ) == 1
                    && (self.update)(
                        ctx,
                        out.as_mut_ptr(),
                        &mut out_len,
                        data.as_ptr(),
                        data.len() as c_int,
                    ) == 1;
                (self.ctx_free)(ctx);
                digest == 1 && sealed
            };
            if !ok {
                bail!("libcrypto refused SHA-256 or AES-128-GCM");
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The curve is each pause's cost beyond back to back, never below 0.
    #[test]
    fn the_curve_is_the_cost_beyond_back_to_back() {
        // a document written before the mean was kept: the median
        let p = |pause_s: f64, us: f64| ColdRun {
            pause_s,
            cpu_s: us * 1e-6,
            runs: 10,
            cpu_mean_s: None,
        };
        let c = ColdStart {
            work: record_work(),
            cpu: 0,
            runs: vec![p(0.0, 14.0), p(1e-3, 13.0), p(0.025, 54.0), p(0.2, 72.0)],
            handshake: None,
        };
        c.check().unwrap();
        let got = c.beyond_back_to_back();
        let want = [(0.0, 0.0), (1e-3, 0.0), (0.025, 40e-6), (0.2, 58e-6)];
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(want) {
            assert!(
                (g.0 - w.0).abs() < 1e-12 && (g.1 - w.1).abs() < 1e-12,
                "{got:?}"
            );
        }
        assert!(c
            .words()
            .contains("14.0 µs back to back, 13.0 µs after 1.0 ms"));
        // what no curve can be made of: pauses out of order, none back to back, no time
        let mut bad = c.clone();
        bad.runs.swap(1, 2);
        assert!(bad.check().is_err());
        bad.runs.clear();
        assert!(bad.check().is_err());
        let mut bad = c.clone();
        bad.runs[3].cpu_s = f64::NAN;
        assert!(bad.check().is_err());
        // the handshake's work beside it: its own curve, its own check, both in words
        let mut both = c.clone();
        assert_eq!(both.handshake_beyond_back_to_back(), None);
        both.handshake = Some(ColdWork {
            work: handshake_work(),
            runs: vec![p(0.0, 130.0), p(0.2, 330.0)],
        });
        both.check().unwrap();
        let h = both.handshake_beyond_back_to_back().unwrap();
        assert!(h.len() == 2 && h[0] == (0.0, 0.0) && (h[1].1 - 200e-6).abs() < 1e-12);
        assert_eq!(both.beyond_back_to_back(), got);
        assert!(both.words().contains("; an X25519 key exchange"));
        assert!(both
            .words()
            .contains("130.0 µs back to back, 330.0 µs after 200.0 ms"));
        both.handshake.as_mut().unwrap().runs.reverse();
        let e = both.check().unwrap_err().to_string();
        assert!(e.contains("handshake"), "{e}");
    }

    /// Where the mean was kept, the curve is the mean's (the stages it is taken out of are
    /// means), and the words give it; a mean that is no time is refused.
    #[test]
    fn the_curve_takes_the_mean() {
        let p = |pause_s: f64, median_us: f64, mean_us: f64| ColdRun {
            pause_s,
            cpu_s: median_us * 1e-6,
            runs: 100,
            cpu_mean_s: Some(mean_us * 1e-6),
        };
        let mut c = ColdStart {
            work: record_work(),
            cpu: 0,
            runs: vec![p(0.0, 12.0, 13.0), p(0.2, 90.0, 140.0)],
            handshake: None,
        };
        c.check().unwrap();
        let got = c.beyond_back_to_back();
        assert!(
            got[0] == (0.0, 0.0) && (got[1].1 - 127e-6).abs() < 1e-12,
            "{got:?}"
        );
        assert!(c
            .words()
            .contains("13.0 µs back to back, 140.0 µs after 200.0 ms"));
        c.runs[1].cpu_mean_s = Some(f64::INFINITY);
        assert!(c.check().is_err());
    }

    /// A pause keeps its latest `KEPT` runs: the figures are theirs.
    #[test]
    fn a_pause_keeps_its_latest_runs() {
        let mut t = Took::default();
        for i in 0..KEPT {
            t.push(1.0 + i as f64);
        }
        let r = t.run(Duration::from_millis(200));
        assert_eq!((r.pause_s, r.runs), (0.2, KEPT as u32));
        assert_eq!(r.cpu_mean_s, Some((1.0 + KEPT as f64) / 2.0));
        // as many again, each 1000: the first ones are gone, the count stays
        for _ in 0..KEPT {
            t.push(1000.0);
        }
        let r = t.run(Duration::from_millis(200));
        assert_eq!(
            (r.runs, r.cpu_s, r.cpu_mean_s),
            (KEPT as u32, 1000.0, Some(1000.0))
        );
    }

    /// What the measuring thread sends, as the record source sees it: the latest result;
    /// an error (or the thread's end) before the first is the answer, after it the last
    /// figures stand; either ends the measurement.
    #[test]
    fn the_latest_result_wins_and_the_first_is_never_lost() {
        let c = |runs: u32| ColdStart {
            work: record_work(),
            cpu: 0,
            runs: vec![ColdRun {
                pause_s: 0.0,
                cpu_s: 1e-5,
                runs,
                cpu_mean_s: Some(1e-5),
            }],
            handshake: None,
        };
        let running = |sent: Vec<Result<ColdStart>>, hang_up: bool| {
            let (out, results) = mpsc::sync_channel(8);
            for r in sent {
                out.send(r).unwrap();
            }
            if !hang_up {
                std::mem::forget(out);
            }
            Background::Running {
                results,
                stop: Arc::new(AtomicBool::new(false)),
                measured: false,
            }
        };
        // two rounds waiting: the latest; nothing new: none, still running
        let mut b = running(vec![Ok(c(12)), Ok(c(14))], false);
        assert_eq!(b.poll(None).unwrap().unwrap(), c(14));
        assert!(b.poll(None).is_none() && b.started() && !b.first_pending());
        // the first, then an error in the same look: the first stands, the measurement ends
        let mut b = running(vec![Ok(c(12)), Err(anyhow!("moved"))], false);
        assert_eq!(b.poll(None).unwrap().unwrap(), c(12));
        assert!(matches!(b, Background::Over));
        // an error before any: the answer
        let mut b = running(vec![Err(anyhow!("no libcrypto"))], false);
        let e = b.poll(None).unwrap().unwrap_err().to_string();
        assert_eq!(e, "no libcrypto");
        // the thread gone before its first (a panic): said, not silent; after it: none
        let mut b = running(vec![], true);
        assert!(b.first_pending());
        assert!(b.finish().unwrap().is_err());
        let mut b = running(vec![Ok(c(12))], true);
        assert_eq!(b.poll(None).unwrap().unwrap(), c(12));
        assert!(matches!(b, Background::Over));
    }

    /// The CPU most processes may run on, the lowest of those.
    #[test]
    fn the_cpu_is_where_most_processes_may_run() {
        let set = |cpus: &[u32]| cpus.iter().copied().collect::<BTreeSet<u32>>();
        assert_eq!(cpu_of_most(&[]), None);
        // nginx's master unpinned, its workers on CPUs 2 and 3
        let workers = [set(&[0, 1, 2, 3]), set(&[2]), set(&[3])];
        assert_eq!(cpu_of_most(&workers), Some(2));
        // all unpinned
        assert_eq!(cpu_of_most(&[set(&[0, 1]), set(&[0, 1])]), Some(0));
        // pinned to CPU 1
        assert_eq!(cpu_of_most(&[set(&[1]), set(&[1])]), Some(1));
    }
}
