//! podman as these hosts run it: with Debian's runc (crun fails on their cgroups) and a
//! containers.conf without default ulimits (this sandbox cannot raise RLIMIT_NOFILE, which
//! podman's defaults ask for). A cluster's runtime needs neither.

use std::{
    fs, io,
    path::PathBuf,
    process::{Command, Output},
};

use crate::util::workspace;

/// Write the containers.conf podman and buildah are run with here (`cargo xtask image` and
/// `cargo xtask test` name it in CONTAINERS_CONF); its path.
pub fn containers_conf() -> io::Result<PathBuf> {
    let path = workspace().join("target/package/containers.conf");
    fs::create_dir_all(path.parent().unwrap())?;
    fs::write(
        &path,
        "# written by cargo xtask image: podman's default ulimits cannot be raised here\n\
         [containers]\ndefault_ulimits = []\n",
    )?;
    Ok(path)
}

/// `podman --runtime runc ARGS`, with CONTAINERS_CONF as `cargo xtask test` sets it, or
/// written now when a test is run on its own.
pub fn podman(args: &[&str]) -> Output {
    let mut cmd = Command::new("podman");
    cmd.args(["--runtime", "runc"]).args(args);
    if std::env::var_os("CONTAINERS_CONF").is_none() {
        cmd.env(
            "CONTAINERS_CONF",
            containers_conf().expect("writing target/package/containers.conf"),
        );
    }
    cmd.output().unwrap_or_else(|e| {
        panic!("podman {args:?}: {e} (`cargo xtask test` installs podman and runc)")
    })
}

/// `podman ARGS`, which must succeed: its stdout, trimmed.
pub fn podman_ok(args: &[&str]) -> String {
    let out = podman(args);
    assert!(
        out.status.success(),
        "podman {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}
