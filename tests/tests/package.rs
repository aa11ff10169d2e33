//! The Debian package as an operator uses it, on this machine: `dpkg -i`, a real nginx
//! traced by /usr/bin/hstrace with every connection accounted for, the man pages and
//! completions where man and the shells find them, the unit as systemd reads it, the debug
//! info found by build id, then `dpkg --purge`, after which none of its files is left.
//! `cargo xtask test` builds the packages first (`cargo xtask package`) and names them in
//! HSTRACE_DEB and HSTRACE_DBGSYM_DEB.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use hstrace_tests::{
    assert::assert_accounted,
    clients::drive_mix,
    hstrace::Hstrace,
    servers::Nginx,
    util::{installed, run_ok},
};

fn deb(var: &str) -> PathBuf {
    let p = std::env::var_os(var).map(PathBuf::from).unwrap_or_else(|| {
        panic!("{var} is not set: run the tests with `cargo xtask test`, which builds the package")
    });
    assert!(p.exists(), "{} missing", p.display());
    p
}

/// Run `cmd`; its stdout, or a panic with what it said.
fn ok(cmd: &mut Command) -> String {
    String::from_utf8_lossy(&run_ok(cmd).stdout).into_owned()
}

/// The files and directories a package holds, as `dpkg-deb -c` lists them (absolute).
fn contents(deb: &Path) -> Vec<(PathBuf, bool)> {
    ok(Command::new("dpkg-deb").arg("-c").arg(deb))
        .lines()
        .filter_map(|l| {
            let path = l.split_whitespace().last()?;
            let path = path.strip_prefix('.')?;
            (path != "/").then(|| {
                (
                    PathBuf::from(path.trim_end_matches('/')),
                    l.starts_with('d'),
                )
            })
        })
        .collect()
}

/// Purges the packages even when the test panics half way.
struct Purge;

impl Drop for Purge {
    fn drop(&mut self) {
        let _ = Command::new("dpkg")
            .args(["--purge", "hstrace-dbgsym", "hstrace"])
            .output();
    }
}

#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn the_package_installs_traces_a_real_nginx_and_purges_leaving_nothing() {
    let (deb, dbgsym) = (deb("HSTRACE_DEB"), deb("HSTRACE_DBGSYM_DEB"));
    let purge = Purge;
    // a package left by an earlier run that was killed
    drop(Purge);

    ok(Command::new("dpkg").arg("-i").arg(&deb).arg(&dbgsym));
    assert!(installed("hstrace") && installed("hstrace-dbgsym"));
    let bin = Path::new("/usr/bin/hstrace");

    // the product binary: stripped, small, its debug info in the dbgsym package by build id
    let size = std::fs::metadata(bin).unwrap().len();
    assert!(size <= 17 * 1024 * 1024, "/usr/bin/hstrace is {size} bytes");
    let sections = ok(Command::new("readelf").args(["-S", "-W"]).arg(bin));
    assert!(
        !sections.contains(".debug_info"),
        "debug info left in the binary"
    );
    let notes = ok(Command::new("readelf").arg("-n").arg(bin));
    let id = notes
        .lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: "))
        .expect("a build id");
    let debug = PathBuf::from(format!(
        "/usr/lib/debug/.build-id/{}/{}.debug",
        &id[..2],
        &id[2..]
    ));
    let debug_sections = ok(Command::new("readelf").args(["-S", "-W"]).arg(&debug));
    assert!(
        debug_sections.contains(".debug_info"),
        "{}",
        debug.display()
    );
    let version = ok(Command::new(bin).arg("--version"));
    assert!(version.starts_with("hstrace "), "{version}");

    // man pages and completions where man and the shells look
    for page in [
        "hstrace",
        "hstrace-trace",
        "hstrace-serve",
        "hstrace-export",
        "hstrace-model",
    ] {
        let path = ok(Command::new("man").args(["-w", page]));
        assert!(
            path.trim().ends_with(&format!("/man1/{page}.1.gz")),
            "{page}: {path}"
        );
    }
    let text = ok(Command::new("man")
        .args(["-P", "cat", "hstrace-trace"])
        .env("MANWIDTH", "100"));
    assert!(text.contains("--comm"), "{text}");
    let complete = ok(Command::new("bash").args([
        "-c",
        ". /usr/share/bash-completion/completions/hstrace && complete -p hstrace",
    ]));
    assert!(complete.contains("hstrace"), "{complete}");
    for f in [
        "/usr/share/zsh/vendor-completions/_hstrace",
        "/usr/share/fish/vendor_completions.d/hstrace.fish",
    ] {
        assert!(std::fs::read_to_string(f).unwrap().contains("serve"), "{f}");
    }

    // the unit as systemd reads it, its options from the conffile; not enabled by the install
    ok(Command::new("systemd-analyze").args(["verify", "/lib/systemd/system/hstrace.service"]));
    let default = std::fs::read_to_string("/etc/default/hstrace").unwrap();
    assert!(default.contains("HSTRACE_ARGS="), "{default}");
    assert!(
        !Path::new("/etc/systemd/system/multi-user.target.wants/hstrace.service").exists(),
        "the install enabled the service"
    );
    // the operator's files
    for f in [
        "/usr/share/hstrace/dashboards/hstrace.json",
        "/usr/share/hstrace/grafana/provisioning/dashboards.yaml",
        "/usr/share/hstrace/grafana/provisioning/datasource.yaml",
        "/usr/share/hstrace/prometheus/rules.yml",
        "/usr/share/hstrace/prometheus/scrape.yml",
        "/usr/share/hstrace/kubernetes/daemonset.yaml",
        "/usr/share/hstrace/web-config.yml",
        "/usr/share/doc/hstrace/copyright",
        "/usr/share/doc/hstrace/README.md",
    ] {
        assert!(Path::new(f).is_file(), "{f} missing");
    }
    let provider =
        std::fs::read_to_string("/usr/share/hstrace/grafana/provisioning/dashboards.yaml").unwrap();
    assert!(
        provider.contains("path: /usr/share/hstrace/dashboards"),
        "{provider}"
    );

    // the installed binary traces a real nginx, every connection accounted for
    let nginx = Nginx::start("package", 2);
    let mut cmd = Command::new(bin);
    cmd.args([
        "trace",
        "--format",
        "json",
        "--pid",
        &nginx.master_pid().to_string(),
    ]);
    let tracer = Hstrace::start_command(cmd);
    let mix = drive_mix(&nginx, 1);
    let traced = tracer.stop();
    assert!(traced.success, "{}", traced.stderr);
    let kinds = |k: &str| traced.records.iter().filter(|r| r["kind"] == k).count() as u64;
    assert_eq!(
        (
            kinds("full"),
            kinds("resumed"),
            kinds("plain"),
            kinds("failed")
        ),
        (mix.full, mix.resumed, mix.plain, mix.failed),
        "{:#?}",
        traced.records
    );
    assert_accounted(&traced.health, true);
    drop(nginx);

    // purge: nothing of the packages is left, the conffile included
    let every: Vec<(PathBuf, bool)> = contents(&deb)
        .into_iter()
        .chain(contents(&dbgsym))
        .collect();
    assert!(
        every
            .iter()
            .any(|(p, _)| p == Path::new("/usr/bin/hstrace")),
        "{every:?}"
    );
    ok(Command::new("dpkg").args(["--purge", "hstrace-dbgsym", "hstrace"]));
    assert!(!installed("hstrace") && !installed("hstrace-dbgsym"));
    // a directory another package also holds (/usr/share/man/man1) stays, as it should
    let owned_by_another = |p: &Path| {
        Command::new("dpkg-query")
            .arg("-S")
            .arg(p)
            .output()
            .is_ok_and(|o| o.status.success())
    };
    let left: Vec<&PathBuf> = every
        .iter()
        .filter(|(p, dir)| p.exists() && !(*dir && owned_by_another(p)))
        .map(|(p, _)| p)
        .collect();
    assert!(left.is_empty(), "left after purge: {left:?}");
    for gone in [
        "/usr/share/hstrace",
        "/usr/share/doc/hstrace",
        "/etc/default/hstrace",
    ] {
        assert!(!Path::new(gone).exists(), "{gone} left after purge");
    }
    drop(purge);
}
