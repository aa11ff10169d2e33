//! `cargo xtask test [CARGO TEST ARGS]`: the whole suite as CI runs it. Installs the test
//! servers and clients, builds, packages, builds the image, then runs every test one at a
//! time, the ones marked `#[ignore = "needs root…"]` included, then (with no arguments)
//! the VM matrix: `vm::TESTS` inside each of Debian's kernels (`cargo xtask vm-test`).

use std::{
    io::{BufRead, BufReader},
    process::{Command, Stdio},
};

use anyhow::{bail, Context, Result};

use crate::{
    image, package,
    setup::{
        install_python_packages, install_runtimes, setup_test_machine, BROWSER_PACKAGES,
        IMAGE_PACKAGES, TEST_PACKAGES,
    },
    util::{build, root},
    validate, vm,
};

/// `extra`: cargo test's arguments (`--test accuracy`, a test's name), and after a `--`
/// the test binaries' own.
pub fn test(extra: &[String]) -> Result<()> {
    setup_test_machine(&[TEST_PACKAGES, IMAGE_PACKAGES, BROWSER_PACKAGES].concat())?;
    install_runtimes()?;
    install_python_packages()?;
    // the OpenTelemetry Collector tests/otlp.rs pushes to, built from its Go modules once
    // for the run (source in tests/src/otelcol/source.rs)
    eprintln!("xtask: the OpenTelemetry Collector for tests/otlp.rs");
    let otelcol = hstrace_tests::otelcol::build();
    let bin = build()?;
    // the load generator of the reduced model validation (xtask/src/validate.rs)
    let hsload = validate::build_hsload()?;
    // the packages and the image as an operator installs them (tests/tests/package.rs,
    // tests/tests/image.rs)
    let packages = package::package()?;
    let image = image::image(&packages)?;
    let (cargo_args, binary_args) = match extra.iter().position(|a| a == "--") {
        Some(at) => (&extra[..at], &extra[at + 1..]),
        None => (extra, &[][..]),
    };
    // one at a time: the tests share the kernel and load BPF programs; every test binary
    // runs even after one fails, so a run reports every failure; the tests that need root
    // (ignored by a plain `cargo test`) run too
    let mut child = Command::new("cargo")
        .args(["test", "--release", "--workspace", "--no-fail-fast"])
        .args(cargo_args)
        .args(["--", "--test-threads=1", "--include-ignored"])
        .args(binary_args)
        .env("HSTRACE_BIN", &bin)
        .env("HSTRACE_HSLOAD", &hsload)
        .env("HSTRACE_OTELCOL", &otelcol)
        .env("HSTRACE_DEB", &packages.deb)
        .env("HSTRACE_DBGSYM_DEB", &packages.dbgsym)
        .env("HSTRACE_IMAGE", &image.name)
        .env("HSTRACE_IMAGE_ARCHIVE", &image.archive)
        .env("CONTAINERS_CONF", image::containers_conf()?)
        .current_dir(root())
        .stdout(Stdio::piped())
        .spawn()
        .context("running cargo test")?;
    // pass the output through, adding up every test binary's result line
    let (mut passed, mut failed) = (0u64, 0u64);
    for line in BufReader::new(child.stdout.take().expect("piped")).lines() {
        let line = line?;
        println!("{line}");
        if let Some(rest) = line.strip_prefix("test result: ") {
            passed += count(rest, "passed");
            failed += count(rest, "failed");
        }
    }
    let status = child.wait()?;
    // then the subset of vm::TESTS inside each of Debian's kernels, unless only some tests
    // were asked for: the programs must load and report right where users run them
    let vm = if extra.is_empty() {
        println!("xtask: the VM matrix (cargo xtask vm-test): Debian's kernels under qemu");
        vm::matrix(&[], vm::Mode::Auto, &[])?
    } else {
        vm::Totals::default()
    };
    // one closing line for the whole suite
    println!(
        "tests: {} passed, {} failed",
        passed + vm.passed,
        failed + vm.failed
    );
    if !status.success() {
        bail!("cargo test failed ({status})");
    }
    if vm.failed > 0 {
        bail!(
            "{} failures in the kernels' VMs: see target/vm/results.json",
            vm.failed
        );
    }
    Ok(())
}

/// The number before `word` in the rest of a "test result: " line.
fn count(rest: &str, word: &str) -> u64 {
    rest.split(';')
        .find_map(|part| {
            part.trim()
                .strip_suffix(word)?
                .trim()
                .rsplit(' ')
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::count;

    #[test]
    fn a_result_line_is_counted() {
        let rest =
            "FAILED. 3 passed; 1 failed; 2 ignored; 0 measured; 0 filtered out; finished in 1.00s";
        assert_eq!((count(rest, "passed"), count(rest, "failed")), (3, 1));
        assert_eq!(count("ok. 7 passed; 0 failed", "failed"), 0);
    }
}
