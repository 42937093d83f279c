//! treesync as a library: open any target as the binary would, look at the plan, then sync.
//!
//! ```sh
//! cargo run -p treesync --example library -- REPO REV TARGET [auto|local|nfs|s3|memory]
//! cargo run -p treesync --example library -- . HEAD /tmp/treesync-example
//! cargo run -p treesync --example library -- . HEAD nfs://127.0.0.1/export/site
//! ```
//!
//! [`treesync::open`] takes the target as a person writes it (a directory, an NFS mount,
//! `nfs://`, `s3://`, `file://`, `memory://`) and chooses the backend and its policy the way
//! the binary does. The backend is an ordinary value: wrap it in policies (`Count` here
//! records every op and state call) and hand it to `sync::prepare` (plan only) or `sync::sync`
//! (plan, journal, apply).

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use treesync::core::policy::Count;
use treesync::core::{Backend, MemoryBackend};
use treesync::{BackendKind, OpenOptions, Repo, sync};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [repo, rev, target, rest @ ..] = args.as_slice() else {
        eprintln!("usage: library REPO REV TARGET [auto|local|nfs|s3|memory]");
        std::process::exit(2);
    };
    let kind = rest.first().map(String::as_str).unwrap_or("auto");

    // 1. Open the storage. Each backend has its own policy (local: wide batches; nfs:
    //    serialized lookups and adaptive writes; s3: concurrent PUTs); `memory` is for tests.
    let (backend, label): (Arc<dyn Backend>, String) = if kind == "memory" {
        (Arc::new(MemoryBackend::new()), "memory".into())
    } else {
        let backend = match kind {
            "auto" => BackendKind::Auto,
            "local" => BackendKind::Local,
            "nfs" => BackendKind::Nfs,
            "s3" => BackendKind::S3,
            other => return Err(format!("unknown backend {other:?} (auto, local, nfs, s3 or memory)").into()),
        };
        let opened = treesync::open(target, &OpenOptions { backend, ..Default::default() })?;
        println!("backend: {}", opened.label());
        let label = opened.label();
        (opened.backend, label)
    };
    // 2. Compose policies around it.
    let counted = Count::new(backend);
    let record = counted.record();

    let repo = Repo::open(repo)?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;

    // 3. Look before leaping: the plan, without writing anything.
    let prepared = runtime.block_on(sync::prepare(&repo, rev, &counted, &Default::default()))?;
    println!("plan: {} ({} phases)", prepared.main.counts, prepared.main.phases.len());
    for phase in &prepared.main.phases {
        println!("  {}: {} ops", phase.name, phase.ops.len());
    }

    // 4. Sync: lock, journal, apply the plan phase by phase, record the new state.
    let options = sync::Options { backend_name: format!("library example: {label}"), ..Default::default() };
    let outcome = runtime.block_on(sync::sync(&repo, rev, &counted, &options, &|_| {}, &AtomicBool::new(false)))?;
    let r = record.lock().map_err(|_| "record lock")?.clone();
    println!(
        "synced {} in {:.3}s: {} ({} calls on the target, {} state writes)",
        outcome.commit,
        outcome.elapsed.as_secs_f64(),
        outcome.applied,
        r.total_calls(),
        r.state_writes
    );
    Ok(())
}
