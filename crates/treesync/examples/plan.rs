//! Plan the change between two revisions of a repository and print it, writing nothing.
//!
//! ```sh
//! cargo run -p treesync --example plan -- REPO TO [FROM]
//! cargo run -p treesync --example plan -- . HEAD HEAD~3
//! ```
//!
//! A plan is small, printable data: phases of independent ops (removals deepest first,
//! directories parents first, file writes, symlinks last). A `Write` carries the blob id, not
//! the content, so planning a large tree reads only trees from the object database.

use treesync::{Op, Repo, plan};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [repo, to, rest @ ..] = args.as_slice() else {
        eprintln!("usage: plan REPO TO [FROM]");
        std::process::exit(2);
    };
    let repo = Repo::open(repo)?;
    let to = repo.resolve(to)?;
    let from = rest.first().map(|rev| repo.resolve(rev)).transpose()?;
    // Without FROM, the plan is a full checkout into an empty target.
    let plan = repo.with_objects(|odb| plan::plan(odb, from.as_ref().map(|f| f.tree), to.tree))?;
    for phase in &plan.phases {
        println!("{} ({} ops)", phase.name, phase.ops.len());
        for op in phase.ops.iter() {
            match op {
                Op::Write { path, blob, .. } => println!("  write   {path} ({})", blob.to_hex_with_len(7)),
                op => println!("  {:7} {}", op.kind().name(), op.path()),
            }
        }
    }
    println!("total: {}", plan.counts);
    Ok(())
}
