//! treesync as a library: pick a backend in code, look at the plan, then sync.
//!
//! ```sh
//! cargo run -p treesync-cli --example library -- REPO REV TARGET [local|nfs|memory]
//! cargo run -p treesync-cli --example library -- . HEAD /tmp/treesync-example nfs
//! ```
//!
//! The backend is an ordinary value: wrap it in policies (`Count` here records every op and
//! state call) and hand it to `sync::prepare` (plan only) or `sync::sync` (plan, journal, apply).

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use treesync_core::policy::Count;
use treesync_core::{Backend, MemoryBackend, Repo, sync};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [repo, rev, target, rest @ ..] = args.as_slice() else {
        eprintln!("usage: library REPO REV TARGET [local|nfs|memory]");
        std::process::exit(2);
    };
    let kind = rest.first().map(String::as_str).unwrap_or("local");

    // 1. Choose the storage. Each backend has its own policy (local: wide batches; nfs:
    //    serialized lookups and adaptive writes; memory: for tests).
    let backend: Arc<dyn Backend> = match kind {
        "local" => Arc::new(treesync_backend_local::LocalBackend::new(target, Default::default())),
        "nfs" => Arc::new(treesync_backend_nfs::open(target, treesync_backend_nfs::Options::default())),
        "memory" => Arc::new(MemoryBackend::new()),
        other => return Err(format!("unknown backend {other:?} (local, nfs or memory)").into()),
    };
    // 2. Compose policies around it.
    let counted = Count::new(backend);
    let record = counted.record();

    let repo = Repo::open(repo)?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;

    // 3. Look before leaping: the plan, without writing anything.
    let prepared = runtime.block_on(sync::prepare(&repo, rev, &counted, false, false))?;
    println!("plan: {} ({} phases)", prepared.main.counts, prepared.main.phases.len());
    for phase in &prepared.main.phases {
        println!("  {}: {} ops", phase.name, phase.ops.len());
    }

    // 4. Sync: lock, journal, apply the plan phase by phase, record the new state.
    let options = sync::Options { backend_name: format!("library example ({kind})"), ..Default::default() };
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
