//! Git LFS against the real thing: repositories made by `git lfs`, stores filled by `git lfs
//! fetch`, content compared with what `git lfs smudge` writes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};
use treesync_core::lfs::{self, Error, Pointer, Store};
use treesync_core::source::BlobSource;
use treesync_core::{ObjectId, Repo};

/// git with a config of its own: no system or user config (a user's `lfs.*` settings must not
/// change what the tests see).
fn git_command(dir: &Path) -> Command {
    let mut cmd = treesync_testkit::git_command(dir);
    cmd.env_remove("GIT_ALTERNATE_OBJECT_DIRECTORIES").args([
        "-c",
        "user.name=a",
        "-c",
        "user.email=a@b",
        "-c",
        "init.defaultBranch=main",
    ]);
    cmd
}

fn git_bytes(dir: &Path, args: &[&str], stdin: &[u8]) -> Vec<u8> {
    treesync_testkit::run_with_input(git_command(dir).args(args), stdin).stdout
}

fn git(dir: &Path, args: &[&str]) -> String {
    String::from_utf8(git_bytes(dir, args, b"")).expect("utf-8").trim().to_string()
}

/// git-lfs is a real component of these tests: without it they fail, saying how to get it.
fn require_git_lfs() {
    let found = Command::new("git").args(["lfs", "version"]).output().is_ok_and(|out| out.status.success());
    assert!(
        found,
        "git-lfs is missing: apt-get install git-lfs (or run `cargo xtask test` as root, which installs what the tests need)"
    );
}

/// Deterministic bytes that do not compress or repeat.
fn noise(len: usize, mut seed: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        out.extend_from_slice(&seed.to_le_bytes());
    }
    out.truncate(len);
    out
}

fn sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// A repository using Git LFS (`src`, with `git lfs install --local` and `*.bin` tracked) and a
/// bare clone of it (`mirror`) whose LFS store `git lfs fetch --all` filled.
struct Fixture {
    dir: tempfile::TempDir,
    src: PathBuf,
    mirror: PathBuf,
    /// The content of every committed `*.bin`, by path.
    files: BTreeMap<String, Vec<u8>>,
}

/// More than 3 MiB: streamed in several chunks.
const BIG: usize = (3 << 20) + 17;

fn fixture() -> Fixture {
    require_git_lfs();
    let dir = tempfile::tempdir().expect("tempdir");
    let src = dir.path().join("src");
    git(dir.path(), &["init", "-q", "src"]);
    git(&src, &["lfs", "install", "--local"]);
    git(&src, &["lfs", "track", "*.bin"]);
    let files: BTreeMap<String, Vec<u8>> = [
        ("big.bin", noise(BIG, 1)),
        ("small.bin", b"a small file kept in LFS\n".to_vec()),
        ("one.bin", b"x".to_vec()),
        ("empty.bin", Vec::new()),
        ("docs/deep.bin", noise(2000, 2)),
    ]
    .into_iter()
    .map(|(path, content)| (path.to_string(), content))
    .collect();
    for (path, content) in &files {
        let file = src.join(path);
        std::fs::create_dir_all(file.parent().expect("a parent")).expect("mkdir");
        std::fs::write(file, content).expect("write");
    }
    std::fs::write(src.join("readme.txt"), "not in LFS\n").expect("write");
    git(&src, &["add", "."]);
    git(&src, &["commit", "-q", "-m", "lfs files"]);
    let mirror = dir.path().join("mirror.git");
    git(dir.path(), &["clone", "-q", "--bare", "src", "mirror.git"]);
    git(&mirror, &["lfs", "fetch", "--all"]);
    Fixture { dir, src, mirror, files }
}

/// Every blob of `rev`'s tree in `repo`: path → (id, size).
fn tree(repo: &Path, rev: &str) -> BTreeMap<String, (String, u64)> {
    let listing = git_bytes(repo, &["ls-tree", "-r", "-l", "-z", rev], b"");
    listing
        .split(|b| *b == 0)
        .filter(|entry| !entry.is_empty())
        .map(|entry| {
            let entry = std::str::from_utf8(entry).expect("utf-8");
            let (meta, path) = entry.split_once('\t').expect("a tab before the path");
            let fields: Vec<&str> = meta.split_whitespace().collect();
            (path.to_string(), (fields[2].to_string(), fields[3].parse().expect("a size")))
        })
        .collect()
}

/// A blob's bytes, read the way the executor reads them.
fn blob(repo: &Repo, id: &str, size: u64) -> Vec<u8> {
    let id = ObjectId::from_hex(id.as_bytes()).expect("an object id");
    let mut out = Vec::new();
    repo.read_blob(&id, size, &mut |chunk| {
        out.extend_from_slice(chunk);
        Ok(())
    })
    .expect("the blob reads");
    out
}

/// The pointers of `rev`'s tree, with their paths.
fn pointers(repo: &Path, rev: &str) -> Vec<(Pointer, String)> {
    let opened = Repo::open(repo).expect("open");
    tree(repo, rev)
        .into_iter()
        .filter_map(|(path, (id, size))| Pointer::parse(&blob(&opened, &id, size)).map(|p| (p, path)))
        .collect()
}

/// What `git lfs smudge` makes of `input` in `repo`.
fn smudge(repo: &Path, path: &str, input: &[u8]) -> Vec<u8> {
    git_bytes(repo, &["lfs", "smudge", path], input)
}

/// The whole content `store` streams for `pointer`, and the sizes of the chunks it came in.
fn stream(store: &Store, pointer: &Pointer) -> Result<(Vec<u8>, Vec<usize>), Error> {
    let (mut out, mut chunks) = (Vec::new(), Vec::new());
    store.stream(pointer, &mut |chunk| {
        out.extend_from_slice(chunk);
        chunks.push(chunk.len());
        Ok(())
    })?;
    Ok((out, chunks))
}

fn object_file(fx: &Fixture, path: &str) -> (Pointer, PathBuf) {
    let (pointer, _) =
        pointers(&fx.mirror, "main").into_iter().find(|(_, p)| p == path).expect("the file is a pointer");
    let file = fx.mirror.join("lfs/objects").join(&pointer.oid[..2]).join(&pointer.oid[2..4]).join(&pointer.oid);
    assert!(file.is_file(), "git lfs fetch put {path}'s object at {}", file.display());
    (pointer, file)
}

/// Put `bytes` in the store's `file` in place of the object. A new file: git-lfs fetched the
/// object from the local `src` by a hard link, so changing it in place would change the
/// source's copy too.
fn replace(file: &Path, bytes: &[u8]) {
    std::fs::remove_file(file).expect("remove the object");
    std::fs::write(file, bytes).expect("write the damaged object");
}

#[test]
fn every_lfs_file_in_the_tree_is_a_pointer_to_its_content() {
    let fx = fixture();
    let repo = Repo::open(&fx.mirror).expect("open");
    for (path, (id, size)) in tree(&fx.mirror, "main") {
        let bytes = blob(&repo, &id, size);
        let parsed = Pointer::parse(&bytes);
        match fx.files.get(&path) {
            Some(content) if content.is_empty() => {
                assert!(bytes.is_empty(), "git-lfs stores an empty file as an empty blob");
                assert_eq!(parsed, None, "{path}: an empty blob is written as it is");
            }
            Some(content) => {
                let pointer = parsed.unwrap_or_else(|| panic!("{path}: not a pointer: {bytes:?}"));
                assert_eq!(pointer, Pointer { oid: sha256(content), size: content.len() as u64 }, "{path}");
            }
            None => assert_eq!(parsed, None, "{path} is not in LFS"),
        }
    }
    assert_eq!(pointers(&fx.mirror, "main").len(), fx.files.len() - 1, "all but the empty file");
}

#[test]
fn streaming_yields_what_git_lfs_smudge_yields_in_chunks_of_at_most_one_mib() {
    let fx = fixture();
    let store = Store::open(&Repo::open(&fx.mirror).expect("open")).expect("the store");
    assert_eq!(store.dir(), fx.mirror.join("lfs/objects"));
    let repo = Repo::open(&fx.mirror).expect("open");
    let tree = tree(&fx.mirror, "main");
    let pointers = pointers(&fx.mirror, "main");
    assert!(!pointers.is_empty());
    lfs::check(&store, pointers.clone()).expect("git lfs fetch --all fetched every object");
    for (pointer, path) in pointers {
        let (id, size) = &tree[&path];
        let smudged = smudge(&fx.mirror, &path, &blob(&repo, id, *size));
        let (streamed, chunks) = stream(&store, &pointer).expect("the object streams");
        assert_eq!(streamed.len(), smudged.len(), "{path}");
        assert!(streamed == smudged, "{path}: the bytes differ from git lfs smudge's");
        assert_eq!(&streamed, &fx.files[&path], "{path}");
        assert!(chunks.iter().all(|n| *n <= 1 << 20), "{path}: {chunks:?}");
        if path == "big.bin" {
            assert_eq!(chunks.len(), 4, "3 MiB and 17 bytes come in 4 chunks: {chunks:?}");
        }
        assert!(store.path_of(&pointer).is_some_and(|p| p.starts_with(store.dir())), "{path}");
    }
}

#[test]
fn a_corrupted_object_is_an_error_naming_the_oid_and_its_hint_repairs_it() {
    let fx = fixture();
    let (pointer, file) = object_file(&fx, "big.bin");
    let mut bytes = std::fs::read(&file).expect("read the object");
    bytes[BIG / 2] ^= 0x40;
    replace(&file, &bytes);

    let store = Store::open(&Repo::open(&fx.mirror).expect("open")).expect("the store");
    assert!(store.contains(&pointer), "the size is right: only reading it shows the damage");
    let err = stream(&store, &pointer).expect_err("a corrupt object");
    let Error::Corrupt { oid, path, what } = &err else { panic!("expected Corrupt, got {err}") };
    assert_eq!((oid, path), (&pointer.oid, &file));
    assert!(what.contains("hashes to sha256:"), "{what}");
    let text = err.to_string();
    assert!(text.contains(&pointer.oid) && text.contains(&file.display().to_string()), "{text}");

    // The hint: `git lfs fsck --objects` moves it aside (it exits non-zero: it found damage),
    // `git lfs fetch` downloads it again.
    assert!(text.contains("hint: `git lfs fsck --objects` in the repository"), "{text}");
    let fsck = git_command(&fx.mirror).args(["lfs", "fsck", "--objects"]).output().expect("git lfs fsck runs");
    assert!(!fsck.status.success(), "fsck finds the corrupt object");
    assert!(!file.exists(), "fsck moved {} aside", file.display());
    git(&fx.mirror, &["lfs", "fetch", "origin", "main"]);
    assert_eq!(stream(&store, &pointer).expect("fetched again").0, fx.files["big.bin"]);
}

#[test]
fn a_truncated_object_is_an_error_naming_the_oid() {
    let fx = fixture();
    let (pointer, file) = object_file(&fx, "big.bin");
    let bytes = std::fs::read(&file).expect("read the object");
    replace(&file, &bytes[..BIG - 1000]);

    let store = Store::open(&Repo::open(&fx.mirror).expect("open")).expect("the store");
    assert_eq!(store.path_of(&pointer), None, "an object of the wrong size is not there, as for git-lfs");
    let err = stream(&store, &pointer).expect_err("a truncated object");
    let Error::Corrupt { oid, path, what } = &err else { panic!("expected Corrupt, got {err}") };
    assert_eq!((oid, path), (&pointer.oid, &file));
    assert!(what.contains(&format!("ends after {} of the pointer's {BIG} bytes", BIG - 1000)), "{what}");
    assert!(err.to_string().contains(&pointer.oid), "{err}");

    // The check before writing reports it as missing: `git lfs fetch` replaces it.
    let err = lfs::check(&store, [(pointer.clone(), "big.bin".to_string())]).expect_err("not there");
    let Error::Missing { missing, .. } = &err else { panic!("expected Missing, got {err}") };
    assert_eq!(missing[0].oid, pointer.oid);
    git(&fx.mirror, &["lfs", "fetch", "origin", "main"]);
    lfs::check(&store, [(pointer.clone(), "big.bin".to_string())]).expect("fetched again");
    assert_eq!(stream(&store, &pointer).expect("whole again").0, fx.files["big.bin"]);
}

#[test]
fn a_longer_object_is_an_error_before_the_extra_bytes_reach_the_sink() {
    let fx = fixture();
    let (pointer, file) = object_file(&fx, "small.bin");
    let mut longer = fx.files["small.bin"].clone();
    longer.extend_from_slice(b"more");
    replace(&file, &longer);
    let store = Store::open(&Repo::open(&fx.mirror).expect("open")).expect("the store");
    let mut seen = 0;
    let err = store
        .stream(&pointer, &mut |chunk| {
            seen += chunk.len();
            Ok(())
        })
        .expect_err("a longer object");
    assert!(matches!(&err, Error::Corrupt { oid, .. } if *oid == pointer.oid), "{err}");
    assert_eq!(seen, 0, "no byte of an object longer than its pointer says is handed on");
}

/// The hint's command for `repo`, with `<remote> <rev>` filled in (or `--all` instead).
fn hinted_command(message: &str, remote_rev: &[&str]) -> Vec<String> {
    let hint = message.lines().find_map(|l| l.trim().strip_prefix("hint: ")).expect("a hint line");
    let command = hint.split('`').nth(1).expect("a command in backticks");
    let mut words: Vec<String> = command.split_whitespace().map(String::from).collect();
    assert_eq!(words[words.len() - 2..], ["<remote>", "<rev>"], "{command}");
    words.truncate(words.len() - 2);
    words.extend(remote_rev.iter().map(|s| s.to_string()));
    words
}

#[test]
fn missing_objects_fail_the_check_all_at_once_and_the_hinted_command_fetches_them() {
    let fx = fixture();
    let base = fx.dir.path();
    // A bare clone and a clone with a working tree (checked out as pointers): their stores are
    // empty, nothing fetched the objects.
    git(base, &["clone", "-q", "--bare", "src", "bare.git"]);
    git(base, &["clone", "-q", "src", "work"]);
    for (repo, fetch) in [(base.join("bare.git"), ["origin", "main"].as_slice()), (base.join("work"), &["--all"])] {
        let store = Store::open(&Repo::open(&repo).expect("open")).expect("the store");
        let wanted = pointers(&repo, "HEAD");
        let mut wanted_twice = wanted.clone();
        wanted_twice.push((wanted[0].0.clone(), "copy/of/the/first.bin".into()));
        let err = lfs::check(&store, wanted_twice).expect_err("nothing is fetched");
        let Error::Missing { store: dir, missing, repo: at } = &err else { panic!("expected Missing, got {err}") };
        assert_eq!((dir.as_path(), at), (store.dir(), &repo));
        assert_eq!(missing.len(), wanted.len(), "every object, once: {missing:?}");
        assert_eq!(missing[0].paths, [wanted[0].1.clone(), "copy/of/the/first.bin".into()]);
        let text = err.to_string();
        for (pointer, path) in &wanted {
            let unit = if pointer.size == 1 { "byte" } else { "bytes" };
            assert!(text.contains(&format!("{} ({} {unit}) for {path}", pointer.oid, pointer.size)), "{text}");
        }
        let err = stream(&store, &wanted[0].0).expect_err("not there");
        assert!(matches!(&err, Error::Missing { missing, .. } if missing[0].oid == wanted[0].0.oid), "{err}");

        let command = if fetch == ["--all"] {
            let mut c = hinted_command(&text, &[]);
            c.push("--all".into());
            c
        } else {
            hinted_command(&text, fetch)
        };
        assert_eq!(command[..4], ["git", "-C", &repo.display().to_string(), "lfs"], "{command:?}");
        let out = git_command(base).args(&command[1..]).output().expect("the hinted command runs");
        assert!(out.status.success(), "{command:?}: {}", String::from_utf8_lossy(&out.stderr));

        lfs::check(&store, wanted.clone()).expect("the hinted command fetched every object");
        for (pointer, path) in &wanted {
            assert_eq!(&stream(&store, pointer).expect("streams").0, &fx.files[path], "{path}");
        }
    }
}

#[test]
fn lfs_storage_is_honoured_relative_to_the_git_dir_or_absolute() {
    let fx = fixture();
    let base = fx.dir.path();
    git(base, &["clone", "-q", "--bare", "src", "bare.git"]);
    let bare = base.join("bare.git");
    git(&bare, &["config", "lfs.storage", "../elsewhere"]);
    git(&bare, &["lfs", "fetch", "--all"]);
    assert!(base.join("elsewhere/objects").is_dir(), "git lfs fetch stored the objects in lfs.storage");
    assert!(!bare.join("lfs/objects").exists(), "and not in the default place");

    let store = Store::open(&Repo::open(&bare).expect("open")).expect("the store");
    assert_eq!(store.dir(), bare.join("../elsewhere/objects"));
    let wanted = pointers(&bare, "main");
    lfs::check(&store, wanted.clone()).expect("every object is in lfs.storage");
    for (pointer, path) in &wanted {
        assert_eq!(&stream(&store, pointer).expect("streams").0, &fx.files[path], "{path}");
    }

    let absolute = base.join("elsewhere").canonicalize().expect("canonical");
    git(&bare, &["config", "lfs.storage", absolute.to_str().expect("utf-8")]);
    let store = Store::open(&Repo::open(&bare).expect("open")).expect("the store");
    assert_eq!(store.dir(), absolute.join("objects"));
    lfs::check(&store, wanted).expect("the same objects");

    // The default store of a repository without them is where git-lfs puts them, and empty.
    let store = Store::open(&Repo::open(&fx.src).expect("open")).expect("the store");
    assert_eq!(store.dir(), fx.src.join(".git/lfs/objects"));
}

#[test]
fn objects_of_an_alternate_repository_are_read_as_git_lfs_reads_them() {
    let fx = fixture();
    let base = fx.dir.path();
    git(base, &["clone", "-q", "--bare", "--shared", "mirror.git", "shared.git"]);
    let shared = base.join("shared.git");
    assert!(shared.join("objects/info/alternates").is_file());
    assert!(!shared.join("lfs").exists(), "the shared clone has no LFS objects of its own");

    let store = Store::open(&Repo::open(&shared).expect("open")).expect("the store");
    assert_eq!(store.references().len(), 1, "{:?}", store.references());
    assert!(store.references()[0].starts_with(&fx.mirror), "{:?}", store.references());
    let wanted = pointers(&shared, "main");
    lfs::check(&store, wanted.clone()).expect("the alternate has every object");
    let repo = Repo::open(&shared).expect("open");
    let tree = tree(&shared, "main");
    for (pointer, path) in &wanted {
        let (streamed, _) = stream(&store, pointer).expect("streams from the alternate");
        let (id, size) = &tree[path];
        assert!(streamed == smudge(&shared, path, &blob(&repo, id, *size)), "{path}: git lfs smudge agrees");
    }
}

#[test]
fn blobs_that_are_not_pointers_parse_as_none_and_git_lfs_passes_them_through() {
    let fx = fixture();
    let (pointer, _) = object_file(&fx, "small.bin");
    let good =
        format!("version https://git-lfs.github.com/spec/v1\noid sha256:{}\nsize {}\n", pointer.oid, pointer.size);
    let short_oid = good.replace(&pointer.oid, &pointer.oid[..63]);
    let mut long = good.clone().into_bytes();
    long.extend(std::iter::repeat_n(b"more text\n".as_slice(), 120).flatten());
    let cases: [(&str, Vec<u8>); 4] = [
        ("random text", noise(300, 3)),
        ("plain text", b"just a text file\nwith two lines\n".to_vec()),
        ("an oid of 63 digits", short_oid.into_bytes()),
        ("more than 1024 bytes", long),
    ];
    let repo = Repo::open(&fx.mirror).expect("open");
    for (what, content) in cases {
        let id = String::from_utf8(git_bytes(&fx.mirror, &["hash-object", "-w", "--stdin"], &content))
            .expect("utf-8")
            .trim()
            .to_string();
        let stored = blob(&repo, &id, content.len() as u64);
        assert_eq!(Pointer::parse(&stored), None, "{what}");
        assert!(smudge(&fx.mirror, "x.bin", &stored) == stored, "{what}: git lfs smudge writes it as it is");
    }
    assert_eq!(Pointer::parse(good.as_bytes()), Some(pointer), "the well-formed pointer these are made from");
}

#[test]
fn a_failing_sink_is_its_own_error() {
    let fx = fixture();
    let (pointer, _) = object_file(&fx, "big.bin");
    let store = Store::open(&Repo::open(&fx.mirror).expect("open")).expect("the store");
    let err = store
        .stream(&pointer, &mut |_| Err(std::io::Error::new(std::io::ErrorKind::StorageFull, "disk full")))
        .expect_err("the sink fails");
    assert!(matches!(&err, Error::Sink(e) if e.kind() == std::io::ErrorKind::StorageFull), "{err}");
}

#[test]
fn a_repository_that_is_gone_has_no_store() {
    let fx = fixture();
    let repo = Repo::open(&fx.mirror).expect("open");
    std::fs::remove_dir_all(&fx.mirror).expect("remove the repository");
    let err = Store::open(&repo).expect_err("gone");
    assert!(matches!(&err, Error::Io { path, .. } if *path == fx.mirror), "{err}");
    assert!(err.to_string().contains("hint:"), "{err}");
}
