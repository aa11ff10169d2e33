//! `hstrace-docgen OUT_DIR`: hstrace's man pages and shell completions, generated from the
//! clap definitions of the command line (userspace/src/cli.rs), so that `--help`, the man
//! pages and the completions cannot disagree. `cargo xtask package` ships what it writes:
//!   OUT_DIR/man/hstrace.1, hstrace-trace.1, hstrace-serve.1, hstrace-export.1, hstrace-model.1
//!   OUT_DIR/completions/hstrace.bash, _hstrace (zsh), hstrace.fish

use std::{fs, path::Path};

use anyhow::{Context, Result};
use clap::CommandFactory;
use clap_complete::Shell;
use hstrace::cli::Cli;

fn main() {
    let Some(out) = std::env::args().nth(1) else {
        eprintln!("usage: hstrace-docgen OUT_DIR");
        std::process::exit(2);
    };
    if let Err(e) = generate(Path::new(&out)) {
        eprintln!("hstrace-docgen: {e:#}");
        std::process::exit(1);
    }
}

fn generate(out: &Path) -> Result<()> {
    let man = out.join("man");
    fs::create_dir_all(&man).with_context(|| man.display().to_string())?;
    // hstrace.1, and hstrace-<command>.1 for each command but `help`
    clap_mangen::generate_to(Cli::command(), &man).context("writing the man pages")?;
    let completions = out.join("completions");
    fs::create_dir_all(&completions).with_context(|| completions.display().to_string())?;
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        clap_complete::generate_to(shell, &mut Cli::command(), "hstrace", &completions)
            .with_context(|| format!("writing the {shell} completions"))?;
    }
    Ok(())
}
