//! Where the BPF programs' time goes (`cargo xtask bench --profile`): perf's cpu-clock
//! samples of the whole machine, with call chains, while one workload runs (new TLS 1.2
//! handshakes unless `--workload` says another). A sample in a program's own code is
//! mapped to its source line through the program's jited line info (bpf_prog_info), which
//! is what `bpftool prog dump jited linum` shows where bpftool has libbfd (Debian's has
//! not). A sample in a kernel function that a program called (a helper, a map's lookup,
//! the clock) is counted by that function, the program it returns to and the source line
//! it was called from (the line of the address it returns to). Samples that
//! land on a program's first line are mostly the cost of entering it (the indirect call, a
//! cold instruction cache).

use std::{
    collections::HashMap,
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
    path::Path,
    process::{Command, Stdio},
};

use anyhow::{bail, Context, Result};

use super::{cost::prog_ids, run_load, BenchNginx, Tracer, Workload};

const BPF_PROG_GET_FD_BY_ID: i64 = 13;
const BPF_OBJ_GET_INFO_BY_FD: i64 = 15;
const BPF_BTF_GET_FD_BY_ID: i64 = 19;

/// bpf(2) with an attribute block of `attr` (zero-padded): the syscall's result.
fn bpf(cmd: i64, attr: &[u8]) -> Result<i64> {
    let mut buf = [0u8; 128];
    buf[..attr.len()].copy_from_slice(attr);
    // SAFETY: the kernel reads at most the 128 bytes given and writes only into them and
    // into buffers whose addresses and sizes the attribute block names
    let r = unsafe { libc::syscall(libc::SYS_bpf, cmd, buf.as_mut_ptr(), buf.len()) };
    if r < 0 {
        bail!("bpf({cmd}): {}", std::io::Error::last_os_error());
    }
    Ok(r)
}

fn fd_by_id(cmd: i64, id: u32) -> Result<OwnedFd> {
    let raw = bpf(cmd, &id.to_ne_bytes())? as i32;
    // SAFETY: a new fd of ours, owned (and closed) by this OwnedFd alone
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// BPF_OBJ_GET_INFO_BY_FD into `info` (its size is the info_len given).
fn info(fd: &OwnedFd, info: &mut [u8]) -> Result<()> {
    let mut attr = Vec::with_capacity(16);
    attr.extend_from_slice(&(fd.as_raw_fd() as u32).to_ne_bytes());
    attr.extend_from_slice(&(info.len() as u32).to_ne_bytes());
    attr.extend_from_slice(&(info.as_mut_ptr() as u64).to_ne_bytes());
    bpf(BPF_OBJ_GET_INFO_BY_FD, &attr).map(drop)
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes(b[at..at + 4].try_into().unwrap())
}

fn put(b: &mut [u8], at: usize, v: &[u8]) {
    b[at..at + v.len()].copy_from_slice(v);
}

/// One line-info entry of a loaded program: where its jited code starts, and its source.
#[derive(Clone, Debug, PartialEq)]
pub struct Line {
    pub addr: u64,
    pub prog: String,
    pub file: String,
    pub line: u32,
    pub text: String,
}

// struct bpf_prog_info offsets (include/uapi/linux/bpf.h)
const NAME: usize = 64;
const BTF_ID: usize = 128;
const NR_LINE_INFO: usize = 148;
const LINE_INFO: usize = 152;
const JITED_LINE_INFO: usize = 160;
const NR_JITED_LINE_INFO: usize = 168;
const LINE_INFO_REC_SIZE: usize = 172;
const JITED_LINE_INFO_REC_SIZE: usize = 176;

/// The line table of program `id`: one entry per line-info record, by jited address.
fn prog_lines(id: u32) -> Result<Vec<Line>> {
    let fd = fd_by_id(BPF_PROG_GET_FD_BY_ID, id)?;
    let mut first = vec![0u8; 256];
    info(&fd, &mut first)?;
    let name = String::from_utf8_lossy(&first[NAME..NAME + 16])
        .trim_end_matches('\0')
        .to_string();
    let n = u32_at(&first, NR_LINE_INFO) as usize;
    let (lsize, jsize) = (
        u32_at(&first, LINE_INFO_REC_SIZE) as usize,
        u32_at(&first, JITED_LINE_INFO_REC_SIZE) as usize,
    );
    if n == 0 || n != u32_at(&first, NR_JITED_LINE_INFO) as usize || lsize < 16 || jsize < 8 {
        return Ok(Vec::new());
    }
    let (mut lines, mut jited) = (vec![0u8; n * lsize], vec![0u8; n * jsize]);
    let mut second = vec![0u8; 256];
    put(&mut second, NR_LINE_INFO, &(n as u32).to_ne_bytes());
    put(
        &mut second,
        LINE_INFO,
        &(lines.as_mut_ptr() as u64).to_ne_bytes(),
    );
    put(
        &mut second,
        JITED_LINE_INFO,
        &(jited.as_mut_ptr() as u64).to_ne_bytes(),
    );
    put(&mut second, NR_JITED_LINE_INFO, &(n as u32).to_ne_bytes());
    put(
        &mut second,
        LINE_INFO_REC_SIZE,
        &(lsize as u32).to_ne_bytes(),
    );
    put(
        &mut second,
        JITED_LINE_INFO_REC_SIZE,
        &(jsize as u32).to_ne_bytes(),
    );
    info(&fd, &mut second)?;
    let strings = btf_strings(u32_at(&first, BTF_ID))?;
    let string = |off: u32| -> String {
        let s = strings.get(off as usize..).unwrap_or_default();
        let end = s.iter().position(|&b| b == 0).unwrap_or(s.len());
        String::from_utf8_lossy(&s[..end]).into_owned()
    };
    Ok((0..n)
        .map(|k| {
            let rec = &lines[k * lsize..];
            let file = string(u32_at(rec, 4));
            Line {
                addr: u64::from_ne_bytes(jited[k * jsize..k * jsize + 8].try_into().unwrap()),
                prog: name.clone(),
                file: file.rsplit('/').next().unwrap_or(&file).to_string(),
                line: u32_at(rec, 12) >> 10,
                text: string(u32_at(rec, 8)).trim().to_string(),
            }
        })
        .collect())
}

/// The string section of BTF object `id` (line info names its file and text by offset).
fn btf_strings(id: u32) -> Result<Vec<u8>> {
    let fd = fd_by_id(BPF_BTF_GET_FD_BY_ID, id)?;
    let mut first = vec![0u8; 32];
    info(&fd, &mut first)?;
    let size = u32_at(&first, 8) as usize;
    let mut raw = vec![0u8; size];
    let mut second = vec![0u8; 32];
    put(&mut second, 0, &(raw.as_mut_ptr() as u64).to_ne_bytes());
    put(&mut second, 8, &(size as u32).to_ne_bytes());
    info(&fd, &mut second)?;
    // struct btf_header: magic, version, flags (4 bytes), hdr_len, type_off, type_len,
    // str_off, str_len; the sections start after the header
    let (hdr, off, len) = (
        u32_at(&raw, 4) as usize,
        u32_at(&raw, 16) as usize,
        u32_at(&raw, 20) as usize,
    );
    raw.get(hdr + off..hdr + off + len)
        .map(<[u8]>::to_vec)
        .context("BTF string section out of bounds")
}

/// A source line of a program: (program, file, line, text).
type SourceLine<'a> = (&'a str, &'a str, u32, &'a str);

/// The line-info entry an address in a program's image belongs to: the last at or before
/// it (the next program starts past its last line).
fn line_at(table: &[Line], ip: u64) -> Option<&Line> {
    let at = table.partition_point(|l| l.addr <= ip);
    at.checked_sub(1)
        .map(|i| &table[i])
        .filter(|l| ip - l.addr < 4096)
}

/// Where a sample inside hstrace's programs ran.
#[derive(Debug, PartialEq)]
pub enum InProgram<'a> {
    /// in a program's own code, at this address
    Own(u64),
    /// in kernel function `.1` (or what it called in turn), called from the program
    /// address `.0` returns to
    Called(u64, &'a str),
}

/// The samples of `perf script -F ip,sym` over a recording with call chains (each frame
/// on a line of its own, address then symbol, innermost first; a blank line after each
/// sample) that ran inside a BPF program or below one.
pub fn in_programs(script: &str) -> Vec<InProgram<'_>> {
    let mut out = Vec::new();
    let mut frames: Vec<(u64, &str)> = Vec::new();
    for line in script.lines().chain([""]) {
        let mut w = line.split_whitespace();
        match (w.next().map(|ip| u64::from_str_radix(ip, 16)), w.next()) {
            (Some(Ok(ip)), Some(sym)) => frames.push((ip, sym.split('+').next().unwrap_or(sym))),
            _ => {
                out.extend(in_program(&frames));
                frames.clear();
            }
        }
    }
    out
}

/// One sample's frames, innermost first: inside a program or below one?
fn in_program<'a>(frames: &[(u64, &'a str)]) -> Option<InProgram<'a>> {
    let i = frames
        .iter()
        .position(|(_, s)| s.starts_with("bpf_prog_"))?;
    Some(match i {
        0 => InProgram::Own(frames[0].0),
        _ => InProgram::Called(frames[i].0, frames[i - 1].1),
    })
}

/// Samples per program and per source line (a line can have several entries: inlined
/// into several places, or split by the compiler), from sample addresses: a sample in a
/// program belongs to the last entry at or before its address.
pub fn attribute(
    table: &[Line],
    samples: impl Iterator<Item = u64>,
) -> (HashMap<&str, u64>, HashMap<SourceLine<'_>, u64>) {
    let (mut progs, mut lines) = (HashMap::new(), HashMap::new());
    for ip in samples {
        if let Some(l) = line_at(table, ip) {
            *progs.entry(l.prog.as_str()).or_insert(0) += 1;
            let key = (l.prog.as_str(), l.file.as_str(), l.line, l.text.as_str());
            *lines.entry(key).or_insert(0) += 1;
        }
    }
    (progs, lines)
}

/// Counts, the largest first.
fn most_first<K>(counts: HashMap<K, u64>) -> Vec<(K, u64)> {
    let mut v: Vec<_> = counts.into_iter().collect();
    v.sort_by_key(|&(_, n)| std::cmp::Reverse(n));
    v
}

/// Profile the tracer (wire only) under new TLS 1.2 handshakes for `secs`: print the
/// samples by program, split between their own code and the kernel functions they call,
/// those functions, and the hottest source lines.
pub fn run(bin: &Path, nginx: &BenchNginx, w: &Workload, secs: u32, out: &Path) -> Result<()> {
    let tracer = Tracer::start(bin, nginx.master, &["--uprobes", "none"])?;
    let mut table = Vec::new();
    for id in prog_ids(tracer.child.id())? {
        table.extend(prog_lines(id as u32)?);
    }
    table.sort_by_key(|l| l.addr);
    let mut perf = Command::new("perf")
        .args(["record", "-a", "-g", "-e", "cpu-clock", "-F", "5000", "-o"])
        .arg(out)
        .args(["--", "sleep", &secs.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("perf (Debian: apt-get install linux-perf)")?;
    let cmd = w.cmd(nginx);
    let mut loaded = Ok(());
    while loaded.is_ok() && perf.try_wait()?.is_none() {
        loaded = run_load(&cmd).map(drop);
    }
    let _ = perf.wait();
    tracer.stop();
    loaded?;
    let script = Command::new("perf")
        .args(["script", "-F", "ip,sym", "-i"])
        .arg(out)
        .output()
        .context("perf script")?;
    let text = String::from_utf8_lossy(&script.stdout);
    let samples = in_programs(&text);
    let own = samples.iter().filter_map(|s| match s {
        InProgram::Own(ip) => Some(*ip),
        InProgram::Called(..) => None,
    });
    let (mut progs, lines) = attribute(&table, own);
    let own_total: u64 = progs.values().sum();
    let (mut calls, mut called_by) = (HashMap::new(), HashMap::<&str, u64>::new());
    let mut call_sites = HashMap::<(&str, &str, u32, &str), u64>::new();
    for s in &samples {
        if let InProgram::Called(ip, f) = s {
            if let Some(l) = line_at(&table, *ip) {
                *calls.entry(*f).or_insert(0u64) += 1;
                *call_sites
                    .entry((l.prog.as_str(), l.file.as_str(), l.line, *f))
                    .or_insert(0) += 1;
                *called_by.entry(l.prog.as_str()).or_insert(0) += 1;
                *progs.entry(l.prog.as_str()).or_insert(0) += 1;
            }
        }
    }
    let total: u64 = progs.values().sum();
    if total == 0 {
        bail!("no samples in hstrace's programs: was the load running?");
    }
    let pct = |n: u64| 100.0 * n as f64 / total as f64;
    println!(
        "samples in hstrace's programs: {total} ({} s of {}): {:.1} % in their own code, {:.1} % in the kernel functions they call",
        secs,
        w.name,
        pct(own_total),
        pct(total - own_total)
    );
    let progs = most_first(progs);
    for (p, n) in &progs {
        let c = called_by.get(p).copied().unwrap_or(0);
        println!(
            "  {:5.1} %  {p} (own code {:.1} %, calls {:.1} %)",
            pct(*n),
            pct(n - c),
            pct(c)
        );
    }
    let calls = most_first(calls);
    println!("kernel functions the programs call (with what they call in turn):");
    for (f, n) in calls.iter().take(20) {
        println!("  {:5.1} %  {f}", pct(*n));
    }
    let call_sites = most_first(call_sites);
    println!("where the programs call them (the program, then file:line, then the function):");
    for ((prog, file, line, f), n) in call_sites.iter().take(20) {
        println!("  {:5.1} %  {prog:<15} {file}:{line}  {f}", pct(*n));
    }
    let lines = most_first(lines);
    println!("hottest lines of the programs' own code (the program, then file:line):");
    for ((prog, file, line, text), n) in lines.iter().take(40) {
        println!(
            "  {:5.1} %  {prog:<15} {file}:{line}  {}",
            pct(*n),
            text.chars().take(80).collect::<String>()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{attribute, in_programs, InProgram, Line};

    fn line(addr: u64, prog: &str, n: u32) -> Line {
        Line {
            addr,
            prog: prog.into(),
            file: "f.c".into(),
            line: n,
            text: String::new(),
        }
    }

    #[test]
    fn a_sample_belongs_to_the_line_at_or_before_it() {
        let table = vec![
            line(100, "a", 1),
            line(120, "a", 2),
            line(140, "a", 1),
            line(10_000, "b", 7),
        ];
        let samples = [99, 100, 119, 120, 130, 140, 10_001, 20_000];
        let (progs, lines) = attribute(&table, samples.into_iter());
        assert_eq!(progs["a"], 5);
        assert_eq!(progs["b"], 1);
        // line 1 of "a" has two entries: their samples add up
        assert_eq!(lines[&("a", "f.c", 1, "")], 3);
        assert_eq!(lines[&("a", "f.c", 2, "")], 2);
        assert_eq!(lines[&("b", "f.c", 7, "")], 1);
        assert_eq!(lines.len(), 3);
    }

    #[test]
    fn a_sample_is_the_program_s_own_or_the_function_it_called() {
        let script = "\
\tffffffffc0001234 bpf_prog_6deef7357e7b4530_sock_recv+0x34
\tffffffff81000010 __traceiter_sock_recv_length+0x10

\tffffffff81200000 lookup_nulls_elem_raw+0x20
\tffffffff81200100 __htab_map_lookup_elem+0x40
\tffffffffc0002000 bpf_prog_aaaa_sock_send+0x80
\tffffffff81000020 __traceiter_sock_send_length+0x10

\tffffffff81300000 rsa_ossl_mod_exp+0x1
\tffffffff81300100 ossl_bn_mul+0x2

\tffffffffc0003000 bpf_prog_bbbb_walk_step+0x8
";
        assert_eq!(
            in_programs(script),
            vec![
                InProgram::Own(0xffffffffc0001234),
                InProgram::Called(0xffffffffc0002000, "__htab_map_lookup_elem"),
                InProgram::Own(0xffffffffc0003000),
            ]
        );
    }
}
