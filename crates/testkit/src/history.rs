//! Random trees and histories, written into a real repository with `git fast-import`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use crate::Rng;

/// One entry of a [`Model`] tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// A regular file.
    File {
        /// Bytes.
        content: Vec<u8>,
        /// `100755`?
        executable: bool,
    },
    /// A symlink.
    Link {
        /// Target.
        target: String,
    },
    /// A submodule commit (`160000`).
    Gitlink {
        /// The commit id it records.
        commit: String,
    },
}

/// A regular, non-executable file holding `content`.
pub fn file(content: impl AsRef<[u8]>) -> Entry {
    Entry::File { content: content.as_ref().to_vec(), executable: false }
}

/// An executable file (`100755`) holding `content`.
pub fn executable(content: impl AsRef<[u8]>) -> Entry {
    Entry::File { content: content.as_ref().to_vec(), executable: true }
}

/// A tree as a map from `/`-separated path to leaf entry; directories are implied.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Model(pub BTreeMap<String, Entry>);

impl Model {
    /// A tree of regular files: (path, content) pairs.
    pub fn of(files: &[(&str, &str)]) -> Model {
        let mut m = Model::default();
        for (path, content) in files {
            m.insert(path, file(content));
        }
        m
    }

    /// This tree with `changes` put in, one after the other as by [`Model::insert`].
    pub fn with<P: AsRef<str>>(&self, changes: impl IntoIterator<Item = (P, Entry)>) -> Model {
        let mut m = self.clone();
        for (path, entry) in changes {
            m.insert(path.as_ref(), entry);
        }
        m
    }

    /// Put `entry` at `path`, removing whatever is in the way: a leaf at a parent path (the
    /// parent becomes a directory) or anything below `path` (the directory becomes a leaf).
    pub fn insert(&mut self, path: &str, entry: Entry) {
        let mut prefix = String::new();
        for c in path.split('/') {
            if !prefix.is_empty() {
                self.0.remove(&prefix);
                prefix.push('/');
            }
            prefix.push_str(c);
        }
        self.remove_dir(path);
        self.0.insert(path.to_string(), entry);
    }

    /// Remove everything below directory `path`.
    pub fn remove_dir(&mut self, path: &str) {
        let p = format!("{path}/");
        let under: Vec<String> =
            self.0.range(p.clone()..).take_while(|(k, _)| k.starts_with(&p)).map(|(k, _)| k.clone()).collect();
        for k in under {
            self.0.remove(&k);
        }
    }

    /// All directories implied by the entries.
    pub fn dirs(&self) -> Vec<String> {
        let mut out = std::collections::BTreeSet::new();
        for k in self.0.keys() {
            let mut p = k.as_str();
            while let Some(i) = p.rfind('/') {
                p = &p[..i];
                out.insert(p.to_string());
            }
        }
        out.into_iter().collect()
    }
}

const NAMES: &[&str] = &["a", "b", "src", "lib", "docs", "x y", "deep", "Ünï", "-dash", "z.txt", "data"];

fn random_content(rng: &mut Rng) -> Vec<u8> {
    let len = match rng.below(10) {
        0 => 0,
        1 => 20_000 + rng.below(50_000),
        _ => 1 + rng.below(300),
    };
    let seed = rng.next_u64();
    let mut r = Rng::new(seed);
    (0..len).map(|_| b"abcdefghij \n"[r.below(12)]).collect()
}

#[allow(clippy::explicit_auto_deref)] // the suggested form does not compile here
fn random_path(rng: &mut Rng, model: &Model) -> String {
    let dirs = model.dirs();
    let mut path = if !dirs.is_empty() && rng.percent(60) { rng.pick(&dirs).clone() } else { String::new() };
    for _ in 0..rng.below(3) {
        if !path.is_empty() {
            path.push('/');
        }
        path.push_str(*rng.pick(NAMES));
    }
    if !path.is_empty() {
        path.push('/');
    }
    let _ = write!(path, "f{}", rng.below(40));
    path
}

/// Mutate `model` by one random change of many kinds (add, modify, delete, rename, chmod,
/// symlinks, file↔dir↔symlink type changes, whole-directory removal, gitlinks).
pub fn mutate(rng: &mut Rng, model: &mut Model) {
    let keys: Vec<String> = model.0.keys().cloned().collect();
    let dirs = model.dirs();
    let pick_key = |rng: &mut Rng| if keys.is_empty() { None } else { Some(rng.pick(&keys).clone()) };
    match rng.below(14) {
        0..=2 => {
            let p = random_path(rng, model);
            let executable = rng.percent(20);
            model.insert(&p, Entry::File { content: random_content(rng), executable });
        }
        3 | 4 => {
            if let Some(k) = pick_key(rng) {
                let executable = matches!(model.0.get(&k), Some(Entry::File { executable: true, .. }));
                model.insert(&k, Entry::File { content: random_content(rng), executable });
            }
        }
        5 => {
            if let Some(k) = pick_key(rng) {
                model.0.remove(&k);
            }
        }
        6 => {
            if let Some(k) = pick_key(rng) {
                let e = model.0.remove(&k).expect("present");
                let p = random_path(rng, model);
                model.insert(&p, e);
            }
        }
        7 => {
            if let Some(k) = pick_key(rng)
                && let Some(Entry::File { executable, .. }) = model.0.get_mut(&k)
            {
                *executable = !*executable;
            }
        }
        8 => {
            let p = if rng.percent(50) {
                pick_key(rng).unwrap_or_else(|| random_path(rng, model))
            } else {
                random_path(rng, model)
            };
            let target = match rng.below(4) {
                0 => "../outside".to_string(),
                1 => "/etc/hostname".to_string(),
                2 => format!("t{}", rng.below(100)),
                _ => keys.first().cloned().unwrap_or_else(|| "nowhere".into()),
            };
            model.insert(&p, Entry::Link { target });
        }
        9 => {
            // A leaf becomes a directory.
            if let Some(k) = pick_key(rng) {
                let child = format!("{k}/{}", *rng.pick(NAMES));
                model.insert(&child, Entry::File { content: random_content(rng), executable: false });
            }
        }
        10 => {
            // A directory becomes a file or a symlink.
            if !dirs.is_empty() {
                let d = rng.pick(&dirs).clone();
                if rng.percent(50) {
                    model.insert(&d, Entry::File { content: random_content(rng), executable: false });
                } else {
                    model.insert(&d, Entry::Link { target: "somewhere".into() });
                }
            }
        }
        11 => {
            // A whole directory goes away (its parents may become empty and vanish too).
            if !dirs.is_empty() {
                let d = rng.pick(&dirs).clone();
                model.remove_dir(&d);
            }
        }
        12 => {
            if rng.percent(50) {
                let p = random_path(rng, model);
                let commit = format!("{:040x}", rng.next_u64() as u128 * 7919 + 1);
                model.insert(&p, Entry::Gitlink { commit: commit[..40].to_string() });
            } else if let Some(k) = keys.iter().find(|k| matches!(model.0.get(*k), Some(Entry::Gitlink { .. }))) {
                let k = k.clone();
                model.insert(&k, Entry::File { content: b"was a submodule\n".to_vec(), executable: false });
            }
        }
        _ => {
            // A deep path.
            let mut p = String::from("deep");
            for i in 0..(5 + rng.below(10)) {
                let _ = write!(p, "/d{}", i % 3);
            }
            p.push_str("/leaf");
            model.insert(&p, Entry::File { content: random_content(rng), executable: false });
        }
    }
}

/// A random history of `commits` trees, each a few changes from the one before.
pub fn random_history(seed: u64, commits: usize) -> Vec<Model> {
    let mut rng = Rng::new(seed);
    let mut model = Model::default();
    for _ in 0..30 {
        mutate(&mut rng, &mut model);
    }
    let mut out = vec![model.clone()];
    while out.len() < commits {
        for _ in 0..(1 + rng.below(6)) {
            mutate(&mut rng, &mut model);
        }
        if model.0.is_empty() {
            model.insert("keep", Entry::File { content: b"x\n".to_vec(), executable: false });
        }
        out.push(model.clone());
    }
    out
}

/// Write `trees` as a chain of commits on `branch` with `git fast-import`; returns the commit ids.
pub fn import(repo: &Path, branch: &str, trees: &[Model]) -> Vec<String> {
    let mut stream = Vec::new();
    for (i, model) in trees.iter().enumerate() {
        let msg = format!("commit {i}");
        let _ = write!(
            Stream(&mut stream),
            "commit refs/heads/{branch}\nmark :{}\ncommitter T <t@example.com> {} +0000\ndata {}\n{msg}\n",
            i + 1,
            1_700_000_000 + i,
            msg.len() + 1
        );
        if i > 0 {
            let _ = writeln!(Stream(&mut stream), "from :{i}");
        }
        stream.extend_from_slice(b"deleteall\n");
        for (path, e) in &model.0 {
            let quoted = quote(path);
            match e {
                Entry::File { content, executable } => {
                    let mode = if *executable { "100755" } else { "100644" };
                    let _ = write!(Stream(&mut stream), "M {mode} inline {quoted}\ndata {}\n", content.len());
                    stream.extend_from_slice(content);
                    stream.push(b'\n');
                }
                Entry::Link { target } => {
                    let _ = write!(Stream(&mut stream), "M 120000 inline {quoted}\ndata {}\n{target}\n", target.len());
                }
                Entry::Gitlink { commit } => {
                    let _ = writeln!(Stream(&mut stream), "M 160000 {commit} {quoted}");
                }
            }
        }
        stream.push(b'\n');
    }
    for i in 0..trees.len() {
        let _ = writeln!(Stream(&mut stream), "get-mark :{}", i + 1);
    }
    let out = crate::git_stdin(
        repo,
        &["fast-import", "--quiet", "--done", "--force"],
        &[stream, b"done\n".to_vec()].concat(),
    );
    out.lines().map(|l| l.trim().to_string()).filter(|l| l.len() == 40).collect()
}

/// C-style quoting as fast-import reads it: `\\`, `\"` and octal escapes for control bytes;
/// everything else (UTF-8 included) verbatim.
fn quote(path: &str) -> String {
    let mut bytes = vec![b'"'];
    for b in path.bytes() {
        match b {
            b'\\' => bytes.extend_from_slice(b"\\\\"),
            b'"' => bytes.extend_from_slice(b"\\\""),
            0..=0x1f | 0x7f => bytes.extend_from_slice(format!("\\{b:03o}").as_bytes()),
            _ => bytes.push(b),
        }
    }
    bytes.push(b'"');
    String::from_utf8(bytes).expect("escaping keeps UTF-8 valid")
}

struct Stream<'a>(&'a mut Vec<u8>);

impl std::fmt::Write for Stream<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

/// A wide deterministic tree: `files` files of 100–2,000 bytes spread over about `files / 100`
/// directories two levels deep (the benchmark shape).
pub fn wide_tree(files: usize, seed: u64) -> Model {
    let mut rng = Rng::new(seed);
    let dirs = (files / 100).max(1);
    let mut m = Model::default();
    for i in 0..files {
        let d = i % dirs;
        let path = format!("dir{:03}/sub{:02}/file{i:06}.txt", d / 10, d % 10);
        let len = 100 + rng.below(1900);
        let mut content = format!("file {i}\n").into_bytes();
        content.resize(len, b'a' + (i % 26) as u8);
        m.0.insert(path, Entry::File { content, executable: i % 50 == 0 });
    }
    m
}

/// `base` with `modified` files changed, `added` files added and `deleted` files removed, spread
/// over the tree. Returns the new tree and the changed paths.
pub fn change_some(base: &Model, modified: usize, added: usize, deleted: usize, seed: u64) -> (Model, Vec<String>) {
    let mut rng = Rng::new(seed);
    let keys: Vec<String> = base.0.keys().cloned().collect();
    let mut m = base.clone();
    let mut changed = Vec::new();
    let step = keys.len() / (modified + deleted + 1).max(1);
    let mut idx = rng.below(step.max(1));
    for _ in 0..modified {
        let k = &keys[idx % keys.len()];
        m.0.insert(
            k.clone(),
            Entry::File { content: format!("modified {}\n", rng.next_u64()).into_bytes(), executable: false },
        );
        changed.push(k.clone());
        idx += step;
    }
    for _ in 0..deleted {
        let k = &keys[idx % keys.len()];
        m.0.remove(k);
        changed.push(k.clone());
        idx += step;
    }
    for i in 0..added {
        let k = format!("dir000/sub00/added{i}.txt");
        m.0.insert(k.clone(), Entry::File { content: b"added\n".to_vec(), executable: false });
        changed.push(k);
    }
    (m, changed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_history_covers_every_kind_of_change() {
        let mut seen_exec = false;
        let mut seen_link = false;
        let mut seen_gitlink = false;
        let mut seen_file_to_dir = false;
        let mut seen_dir_to_leaf = false;
        for seed in 1..=3 {
            let h = random_history(seed, 24);
            for w in h.windows(2) {
                let (a, b) = (&w[0], &w[1]);
                for (k, e) in &b.0 {
                    seen_exec |= matches!(e, Entry::File { executable: true, .. });
                    seen_link |= matches!(e, Entry::Link { .. });
                    seen_gitlink |= matches!(e, Entry::Gitlink { .. });
                    seen_dir_to_leaf |= a.dirs().contains(k);
                }
                for d in b.dirs() {
                    seen_file_to_dir |= a.0.contains_key(&d);
                }
            }
        }
        assert!(seen_exec && seen_link && seen_gitlink && seen_file_to_dir && seen_dir_to_leaf);
    }

    #[test]
    fn change_some_changes_what_it_says() {
        let base = wide_tree(1000, 1);
        let (b, changed) = change_some(&base, 10, 2, 2, 2);
        assert_eq!(changed.len(), 14);
        assert_eq!(b.0.len(), 1000);
        let differing = base.0.iter().filter(|(k, v)| b.0.get(*k) != Some(v)).count()
            + b.0.keys().filter(|k| !base.0.contains_key(*k)).count();
        assert_eq!(differing, 14);
    }
}
