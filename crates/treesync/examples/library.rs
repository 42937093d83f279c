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
//! mount, `nfs://`, `s3://`, `file://`, `memory://`); the options are [`treesync::Settings`],
//! the binary's flags as fields. [`treesync::Place::open`] chooses the backend and decides its
//! budgets the way the binary does, and says why, and what kind of place the target is (plain,
//! or kept in generations); [`treesync::Place::sync`] then syncs it (plan, journal, apply) and
//! [`treesync::Place::verify`] compares it with the tree.

use std::sync::atomic::AtomicBool;

use treesync::{Intent, Place, Repo, Settings, Target, verify};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (Some(repo), Some(rev), Some(target)) = (args.next(), args.next(), args.next()) else {
        eprintln!(
            "usage: library REPO REV TARGET [--backend KIND] [--jobs N] [--write-jobs N|auto] [--endpoint URL] [--allow-http]"
        );
        std::process::exit(2);
    };
    let mut settings = Settings::default();
    let s = &mut settings.target;
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--backend" => s.backend = Some(value()?.parse()?),
            "--jobs" => s.jobs = Some(value()?.parse()?),
            "--write-jobs" => s.write_jobs = Some(value()?.parse()?),
            "--endpoint" => s.endpoint = Some(value()?),
            "--allow-http" => s.allow_http = Some(true),
            other => return Err(format!("unknown option {other:?}").into()),
        }
    }

    // 1. Open the target: the backend the binary would choose, with its policy and budgets,
    //    and whether it is kept in generations (what it is already: Intent::Write(None)).
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let target = Target::parse(&target)?;
    let place = runtime.block_on(Place::open(&target, &settings.target.options(), Intent::Write(None)))?;
    println!("backend: {}", place.opened.label());
    println!("budgets: {}", place.opened.budgets);

    // 2. Sync: lock, journal, apply the plan phase by phase, record the new state. The
    //    options come from the settings and what `open` decided (budgets, backend name).
    let repo = Repo::open(&repo)?;
    let options = settings.generations.options(settings.sync_options(&place.opened)?);
    let synced = runtime.block_on(place.sync(&repo, &rev, &options, &|_| {}, &AtomicBool::new(false)))?;
    let outcome = synced.outcome;
    println!("synced {} to {}: {}", outcome.commit, place.opened.backend, outcome.applied);

    // 3. Verify: compare what the target holds with the tree.
    let verify_options =
        verify::Options { limits: settings.limits.limits(), ..verify::Options::at(verify::Level::Full) };
    let report = runtime.block_on(place.verify(&repo, &verify_options, &|_| {}, &AtomicBool::new(false)))?;
    if !report.is_clean() {
        return Err(format!("the target differs from {}: {report:?}", outcome.commit).into());
    }
    println!("verified: {} entries, clean", report.expected);
    Ok(())
}
