//! Least privilege: hstrace as a non-root user holding only the capabilities the README
//! and deploy/ list. Root only (to hand them out); run with `cargo xtask test`.

use std::{fs, process::Command};

use hstrace_tests::{
    assert::{assert_accounted, check_stages},
    clients::s_client,
    hstrace::{hstrace_bin, Hstrace},
    servers::Nginx,
};

/// The capabilities README and deploy/hstrace.service grant, in setpriv's spelling, and
/// their bits: CAP_DAC_READ_SEARCH 2, CAP_SYS_PTRACE 19, CAP_SYS_ADMIN 21, CAP_PERFMON 38,
/// CAP_BPF 39.
const CAPS: &str = "+bpf,+perfmon,+sys_ptrace,+dac_read_search,+sys_admin";
const CAP_BITS: u64 = 1 << 2 | 1 << 19 | 1 << 21 | 1 << 38 | 1 << 39;

/// A `Cap…:` line of /proc/PID/status.
fn caps(pid: u32, which: &str) -> u64 {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let hex = status
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{which}:")))
        .unwrap_or_else(|| panic!("no {which} in /proc/{pid}/status"));
    u64::from_str_radix(hex.trim(), 16).unwrap()
}

/// As uid 65534 with exactly those capabilities (ambient, so they survive the exec), with
/// the SSL_do_handshake uprobes: full and resumed handshakes are reported right, the
/// uprobes fired, and once attached the tracer holds no capability beyond them.
#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn a_non_root_user_with_the_listed_capabilities_traces() {
    let nginx = Nginx::start("least-privilege", 1);
    let master = nginx.master_pid().to_string();
    let mut cmd = Command::new("setpriv");
    cmd.args([
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        &format!("--inh-caps=-all,{CAPS}"),
        &format!("--ambient-caps=-all,{CAPS}"),
        &format!("--bounding-set=-all,{CAPS}"),
        "--",
    ])
    .arg(hstrace_bin())
    .args(["trace", "--format", "json", "--pid", &master]);
    let tracer = Hstrace::start_command(cmd);
    let pid = tracer.pid();
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    assert!(
        status.lines().any(|l| l.starts_with("Uid:\t65534")),
        "{status}"
    );
    let eff = caps(pid, "CapEff");
    assert_eq!(eff & !CAP_BITS, 0, "holds more than listed: {eff:#x}");
    assert_eq!(caps(pid, "CapBnd") & !CAP_BITS, 0, "bounding set");

    let sess = nginx.dir.join("lp.sess").display().to_string();
    let new = s_client(nginx.port, &["-tls1_2", "-sess_out", &sess]);
    assert!(new.contains("New, TLS"), "{new}");
    let again = s_client(nginx.port, &["-tls1_2", "-sess_in", &sess]);
    assert!(again.contains("Reused, TLS"), "{again}");
    let out = tracer.stop();
    assert!(out.success, "{}", out.stderr);
    let kinds: Vec<&str> = out
        .records
        .iter()
        .map(|r| r["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["full", "resumed"], "{}", out.stderr);
    for r in &out.records {
        assert!(r["ssl_calls"].as_u64() > Some(0), "no uprobe fired: {r}");
        check_stages(r);
    }
    assert_accounted(&out.health, true);
}
