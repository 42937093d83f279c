//! Open any target as the `treesync` binary would, sync a revision to it, and verify it.
//!
//! ```sh
//! cargo run -p treesync --example library -- REPO REV TARGET [--backend auto|local|nfs|s3|memory]
//!     [--jobs N] [--write-jobs N|auto] [--endpoint URL] [--allow-http]
//! cargo run -p treesync --example library -- . HEAD /tmp/treesync-example
//! cargo run -p treesync --example library -- . HEAD nfs://127.0.0.1/export/site
//! cargo run -p treesync --example library -- . HEAD s3://bucket/site --endpoint http://127.0.0.1:9000 --allow-http
//! cargo run -p treesync --example library -- . HEAD memory://
//! ```
//!
//! [`treesync::Target::parse`] takes the target as a person writes it (a directory, an NFS
//! mount, `nfs://`, `s3://`, `file://`, `memory://`); [`treesync::open`] chooses the backend and
//! decides its budgets the way the binary does, and says why. The backend is an ordinary value:
//! hand it to `sync::sync` (plan, journal, apply) and `verify::verify`.

use std::sync::atomic::AtomicBool;

use treesync::{Repo, Target, TargetOptions, sync, verify};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (Some(repo), Some(rev), Some(target)) = (args.next(), args.next(), args.next()) else {
        eprintln!(
            "usage: library REPO REV TARGET [--backend KIND] [--jobs N] [--write-jobs N|auto] [--endpoint URL] [--allow-http]"
        );
        std::process::exit(2);
    };
    let mut options = TargetOptions::default();
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--backend" => options.backend = value()?.parse()?,
            "--jobs" => options.jobs = Some(value()?.parse()?),
            "--write-jobs" => options.write_jobs = Some(value()?.parse()?),
            "--endpoint" => options.s3.endpoint = Some(value()?),
            "--allow-http" => options.s3.allow_http = true,
            other => return Err(format!("unknown option {other:?}").into()),
        }
    }

    // 1. Open the target: the backend the binary would choose, with its policy and budgets.
    let opened = treesync::open(&Target::parse(&target)?, &options)?;
    println!("backend: {}", opened.label());
    println!("budgets: {}", opened.budgets);

    // 2. Sync: lock, journal, apply the plan phase by phase, record the new state.
    let repo = Repo::open(&repo)?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let sync_options =
        sync::Options { backend_name: opened.label(), apply: opened.apply_options(), ..Default::default() };
    let outcome =
        runtime.block_on(sync::sync(&repo, &rev, &*opened.backend, &sync_options, &|_| {}, &AtomicBool::new(false)))?;
    println!("synced {} to {}: {}", outcome.commit, opened.backend, outcome.applied);

    // 3. Verify: compare what the target holds with the tree.
    let report = runtime.block_on(verify::verify(
        &repo,
        &*opened.backend,
        &verify::Options::at(verify::Level::Full),
        &|_| {},
        &std::sync::atomic::AtomicBool::new(false),
    ))?;
    if !report.is_clean() {
        return Err(format!("the target differs from {}: {report:?}", outcome.commit).into());
    }
    println!("verified: {} entries, clean", report.expected);
    Ok(())
}
