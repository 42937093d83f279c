//! The commit chain the `--atomic` benchmark syncs along: C0 = tag A of the generated
//! repository ([`crate::repo::make_repo`]), and C1 … Cn, each Ci = C(i-1) with K paths changed
//! (modified, added, deleted), written with `git fast-import` as changes on the parent (not as
//! whole trees: at N = 100,000 a whole tree per commit would be ~100 MB of stream).

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};

use xtask::util::run_quiet;

/// How one step splits its K changed paths: K/7 added, K/7 deleted, the rest modified
/// (K = 14: 10 modified, 2 added, 2 deleted, the shape of the other benchmarks).
pub fn split(changed: usize) -> (usize, usize, usize) {
    let side = changed / 7;
    (changed - 2 * side, side, side)
}

/// Tag `C0` on `A` and write `steps` commits after it, tagged `C1` … `C{steps}`, each changing
/// `changed` paths of its parent; packs the repository.
pub fn extend(repo: &Path, steps: usize, changed: usize) -> Result<(), String> {
    let git = |args: &[&str]| run_quiet(Command::new("git").arg("--git-dir").arg(repo).args(args));
    let a = git(&["rev-parse", "A^{commit}"])?.trim().to_string();
    git(&["update-ref", "refs/tags/C0", &a])?;
    let listing = git(&["ls-tree", "-r", "--name-only", "A"])?;
    let mut live: Vec<String> = listing.lines().map(str::to_string).collect();
    if live.len() < 2 * changed + 2 {
        return Err(format!("{} files are too few to change {changed} per commit", live.len()));
    }
    let (modified, added, deleted) = split(changed);
    let mut stream = String::new();
    for i in 1..=steps {
        let _ = write!(
            stream,
            "commit refs/heads/chain\nmark :{i}\ncommitter T <t@example.com> {} +0000\ndata <<EOF\nstep {i}\nEOF\n",
            1_700_100_000 + i
        );
        if i == 1 {
            let _ = writeln!(stream, "from {a}");
        }
        // Spread the changes over the tree, starting somewhere else at each step.
        let stride = live.len() / (modified + deleted + 1);
        let start = (i * 7919) % stride.max(1);
        let picks: Vec<usize> = (0..modified + deleted).map(|j| (start + j * stride) % live.len()).collect();
        for (j, &p) in picks.iter().take(modified).enumerate() {
            let content = body(&format!("step {i} file {j}\n"), 100 + (i * 131 + j * 977) % 1900);
            let _ = write!(stream, "M 100644 inline {}\ndata {}\n{content}\n", live[p], content.len());
        }
        let gone: BTreeSet<usize> = picks[modified..].iter().copied().collect();
        for &p in &gone {
            let _ = writeln!(stream, "D {}", live[p]);
        }
        // Added next to existing files, in their directories.
        let mut new = Vec::new();
        for j in 0..added {
            let near = &live[(start + j * stride + stride / 2) % live.len()];
            let dir = near.rsplit_once('/').map_or("", |(d, _)| d);
            let path = format!("{dir}/added-{i}-{j}.txt");
            let content = body(&format!("added at step {i}\n"), 300);
            let _ = write!(stream, "M 100644 inline {path}\ndata {}\n{content}\n", content.len());
            new.push(path);
        }
        stream.push('\n');
        live = live.into_iter().enumerate().filter(|(k, _)| !gone.contains(k)).map(|(_, p)| p).collect();
        live.extend(new);
    }
    for i in 1..=steps {
        let _ = writeln!(stream, "get-mark :{i}");
    }
    stream.push_str("done\n");
    let mut child = Command::new("git")
        .arg("--git-dir")
        .arg(repo)
        .args(["fast-import", "--quiet", "--done"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run git fast-import: {e}"))?;
    child
        .stdin
        .take()
        .expect("stdin was piped")
        .write_all(stream.as_bytes())
        .map_err(|e| format!("writing to git fast-import: {e}"))?;
    let out = child.wait_with_output().map_err(|e| format!("git fast-import: {e}"))?;
    if !out.status.success() {
        return Err(format!("git fast-import failed: {}", String::from_utf8_lossy(&out.stderr)));
    }
    let ids: Vec<String> =
        String::from_utf8_lossy(&out.stdout).lines().map(|l| l.trim().to_string()).filter(|l| l.len() == 40).collect();
    if ids.len() != steps {
        return Err(format!("git fast-import gave {} commit ids for {steps} commits", ids.len()));
    }
    for (i, id) in ids.iter().enumerate() {
        git(&["update-ref", &format!("refs/tags/C{}", i + 1), id])?;
    }
    git(&["repack", "-adq"])?;
    Ok(())
}

/// `head` padded to `len` bytes (at least `head`), ending in a newline.
fn body(head: &str, len: usize) -> String {
    let mut s = head.to_string();
    while s.len() + 1 < len {
        s.push('x');
    }
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_split_keeps_every_changed_path() {
        assert_eq!(split(14), (10, 2, 2));
        assert_eq!(split(5), (5, 0, 0));
        for k in 1..100 {
            let (m, a, d) = split(k);
            assert_eq!(m + a + d, k);
        }
    }

    #[test]
    fn each_commit_changes_exactly_k_paths_of_its_parent() {
        let dir = std::env::temp_dir().join(format!("xtask-chain-test-{}", std::process::id()));
        let repo = dir.join("r.git");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&repo).expect("temp dir");
        run_quiet(Command::new("git").args(["init", "-q", "--bare"]).arg(&repo)).expect("git init");
        let ids = treesync_testkit::history::import(&repo, "main", &[treesync_testkit::history::wide_tree(300, 1)]);
        run_quiet(Command::new("git").arg("--git-dir").arg(&repo).args(["update-ref", "refs/tags/A", &ids[0]]))
            .expect("tag A");
        extend(&repo, 3, 14).expect("chain");
        for i in 1..=3 {
            let out = run_quiet(Command::new("git").arg("--git-dir").arg(&repo).args([
                "diff",
                "--name-status",
                "--no-renames",
                &format!("C{}", i - 1),
                &format!("C{i}"),
            ]))
            .expect("diff");
            let kinds: Vec<char> = out.lines().filter_map(|l| l.chars().next()).collect();
            assert_eq!(kinds.len(), 14, "C{i}: {out}");
            assert_eq!(kinds.iter().filter(|&&k| k == 'M').count(), 10, "C{i}: {out}");
            assert_eq!(kinds.iter().filter(|&&k| k == 'A').count(), 2, "C{i}: {out}");
            assert_eq!(kinds.iter().filter(|&&k| k == 'D').count(), 2, "C{i}: {out}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
