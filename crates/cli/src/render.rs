//! What the commands print: text for people, and the pieces of JSON output that several
//! commands share.

use serde::Serialize;
use treesync_core::sync;

/// Which backend serves the target now and why: the `backend` and `backend_reason` fields of
/// `sync`, `status` and `status --all` (flattened into their output).
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub(crate) struct BackendInfo {
    /// The backend used.
    #[schemars(with = "BackendName")]
    pub(crate) backend: &'static str,
    /// Why that backend: `--backend NAME` when given, else `auto: …` with what was detected,
    /// e.g. `auto: the target is a URL` or `auto: /srv/site is on ext4 (/dev/sda1 at /), not a
    /// network filesystem`. For people, not for parsing.
    pub(crate) backend_reason: String,
}

/// The backend used: `local` (local disks), `nfs` (network filesystems: NFS, SMB, FUSE network
/// mounts; nfs:// URLs), `s3` (object stores: s3:// and file:// URLs, memory:// with `--backend
/// s3`) or `memory` (memory:// otherwise: the in-memory reference backend, which forgets
/// everything when the process ends).
// The schema of `BackendInfo::backend`.
#[derive(schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
#[allow(dead_code)] // only its schema is used
enum BackendName {
    Local,
    Nfs,
    S3,
    Memory,
}

impl BackendInfo {
    pub(crate) fn of(opened: &treesync::Opened) -> Self {
        BackendInfo { backend: opened.kind.name(), backend_reason: opened.reason.clone() }
    }
}

/// Print `value` as the one pretty-printed JSON document of a command.
pub(crate) fn print_json(value: &impl Serialize) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}

/// An error and its causes, each once (a cause whose text is already in the message is left out).
pub(crate) fn error_text(e: &anyhow::Error) -> String {
    let mut msg = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if !msg.contains(&text) {
            msg.push_str(if msg.is_empty() { "" } else { ": " });
            msg.push_str(&text);
        }
    }
    msg
}

/// [`error_text`] on one line, for logs.
pub(crate) fn one_line(e: &anyhow::Error) -> String {
    error_text(e).replace('\n', " ")
}

/// `secs` as the largest whole unit: `42s`, `5m`, `3h`, `2d`.
pub(crate) fn human_age(secs: u64) -> String {
    match secs {
        0..60 => format!("{secs}s"),
        60..3600 => format!("{}m", secs / 60),
        3600..86400 => format!("{}h", secs / 3600),
        _ => format!("{}d", secs / 86400),
    }
}

/// What a takeover removes and writes over, with the first paths of each.
pub(crate) fn print_replaced(r: &sync::Replaced, dry_run: bool) {
    let list = |n: u64, first: &[Vec<u8>]| {
        let mut s: Vec<String> = first.iter().map(|p| treesync_core::path::quote(p).into_owned()).collect();
        if n > first.len() as u64 {
            s.push("…".into());
        }
        s.join(", ")
    };
    let (removes, overwrites) = if dry_run { ("removes", "writes over") } else { ("removed", "wrote over") };
    if r.removed > 0 {
        println!(
            "takeover {removes} {} entries the tree does not have: {}",
            r.removed,
            list(r.removed, &r.first_removed)
        );
    }
    if r.overwritten > 0 {
        println!(
            "takeover {overwrites} {} files that were there: {}",
            r.overwritten,
            list(r.overwritten, &r.first_overwritten)
        );
    }
}

/// A plan for people: phases, ops, totals.
pub(crate) fn print_plan(plan: &treesync_core::Plan) {
    for phase in &plan.phases {
        println!("{} ({} ops)", phase.name, phase.ops.len());
        for op in phase.ops.iter() {
            match op {
                treesync_core::Op::Write { path, size, executable, .. } => {
                    println!(
                        "  write   {path} ({}{})",
                        human_bytes(*size),
                        if *executable { ", executable" } else { "" }
                    )
                }
                treesync_core::Op::Symlink { path, target } => {
                    println!("  symlink {path} -> {}", String::from_utf8_lossy(target))
                }
                treesync_core::Op::Chmod { path, executable, .. } => {
                    println!("  chmod   {path} ({})", if *executable { "+x" } else { "-x" })
                }
                op => println!("  {:7} {}", op.kind().name(), op.path()),
            }
        }
    }
    println!("total: {}, {}", plan.counts, human_bytes(plan.counts.bytes));
}

/// The first 10 hex digits of an object id.
pub(crate) fn short(id: &treesync_core::ObjectId) -> String {
    id.to_hex_with_len(10).to_string()
}

/// `n` bytes for people: `512 B`, `1.5 KiB`, `2.0 GiB`.
pub(crate) fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 { format!("{n} B") } else { format!("{v:.1} {}", UNITS[u]) }
}
