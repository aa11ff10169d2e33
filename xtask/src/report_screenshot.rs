//! `cargo xtask report-screenshot`: docs/report.png, the top of the page `hstrace report`
//! writes of the demo nginx under the demo's client mix, as headless Chromium draws it.

use std::{
    process::Command,
    thread,
    time::{Duration, Instant},
};

use anyhow::{bail, Result};
use hstrace_tests::chromium::screenshot;

use crate::{
    demo::drive_demo_mix,
    nginx::DemoNginx,
    setup::{setup_test_machine, BROWSER_PACKAGES, DEMO_PACKAGES},
    util::{build, root},
};

/// Trace the demo nginx for 20 s of client mixes into a report, and photograph its top
/// 1280×1600 pixels into docs/report.png.
pub fn report_screenshot() -> Result<()> {
    setup_test_machine(&[DEMO_PACKAGES, BROWSER_PACKAGES].concat())?;
    let bin = build()?;
    let (port, plain_port) = (8443, 8080);
    let nginx = DemoNginx::start("report-screenshot", 2, port, plain_port)?;
    let page = nginx.dir.join("report.html");
    let mut report = Command::new(&bin)
        .args([
            "report",
            "--duration",
            "20",
            "--pid",
            &nginx.pid.to_string(),
            "-o",
        ])
        .arg(&page)
        .spawn()?;
    // attached after a moment; the mixes end a few seconds before the window does, so
    // that their last connections are complete in it
    thread::sleep(Duration::from_secs(3));
    eprintln!("xtask: driving the demo's client mix for 14 s");
    let until = Instant::now() + Duration::from_secs(14);
    while Instant::now() < until {
        drive_demo_mix(port, plain_port, &nginx.dir)?;
    }
    let st = report.wait()?;
    if !st.success() {
        bail!("hstrace report failed ({st})");
    }
    let png = root().join("docs/report.png");
    screenshot(&format!("file://{}", page.display()), &png, 1280, 1600);
    println!(
        "xtask: wrote {} (from {}, {} bytes)",
        png.display(),
        page.display(),
        std::fs::metadata(&png)?.len()
    );
    Ok(())
}
