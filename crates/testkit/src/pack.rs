//! Objects written straight into one pack, handed to `git index-pack`: for hostile shapes of
//! repositories that take too long to build with one git process per object (a chain of
//! 100,000 nested trees), or that git's own builders refuse to make (`git fast-import`
//! overflows its stack on such a chain).

use std::path::Path;

/// The kind of an object in a [`Pack`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A commit.
    Commit,
    /// A tree: entries as `git mktree` would take them, encoded with [`tree_entry`].
    Tree,
    /// A blob.
    Blob,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Commit => "commit",
            Kind::Tree => "tree",
            Kind::Blob => "blob",
        }
    }

    /// The type number of a pack entry's header.
    fn pack_type(self) -> u8 {
        match self {
            Kind::Commit => 1,
            Kind::Tree => 2,
            Kind::Blob => 3,
        }
    }
}

/// One raw tree entry: `MODE NAME\0` and the 20 bytes of `id` (40 hex digits). Entries must be
/// concatenated in git's order for `git fsck` to like the tree; treesync does not mind.
pub fn tree_entry(mode: &str, name: &[u8], id: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(mode.len() + name.len() + 22);
    out.extend_from_slice(mode.as_bytes());
    out.push(b' ');
    out.extend_from_slice(name);
    out.push(0);
    for i in 0..20 {
        out.push(u8::from_str_radix(&id[2 * i..2 * i + 2], 16).expect("a 40-digit hex object id"));
    }
    out
}

/// A pack being built in memory: objects are stored uncompressed (zlib's stored blocks), so
/// building one costs a SHA-1 per object and nothing more.
pub struct Pack {
    body: Vec<u8>,
    count: u32,
}

impl Default for Pack {
    fn default() -> Self {
        Self::new()
    }
}

impl Pack {
    /// An empty pack.
    pub fn new() -> Self {
        Pack { body: Vec::new(), count: 0 }
    }

    /// Add an object; its id (hex).
    pub fn add(&mut self, kind: Kind, data: &[u8]) -> String {
        let mut h = gix_hash::hasher(gix_hash::Kind::Sha1);
        h.update(format!("{} {}\0", kind.name(), data.len()).as_bytes());
        h.update(data);
        let id = h.try_finalize().expect("no SHA-1 collision in test data");
        // Entry header: type and size, 4 bits then 7 bits per byte, low bits first.
        let mut size = data.len();
        let mut byte = (kind.pack_type() << 4) | (size & 0x0f) as u8;
        size >>= 4;
        while size > 0 {
            self.body.push(byte | 0x80);
            byte = (size & 0x7f) as u8;
            size >>= 7;
        }
        self.body.push(byte);
        // A zlib stream of stored (uncompressed) deflate blocks.
        self.body.extend_from_slice(&[0x78, 0x01]);
        let mut chunks = data.chunks(0xffff).peekable();
        if data.is_empty() {
            self.body.extend_from_slice(&[0x01, 0x00, 0x00, 0xff, 0xff]);
        }
        while let Some(chunk) = chunks.next() {
            let last = chunks.peek().is_none();
            let len = chunk.len() as u16;
            self.body.push(u8::from(last));
            self.body.extend_from_slice(&len.to_le_bytes());
            self.body.extend_from_slice(&(!len).to_le_bytes());
            self.body.extend_from_slice(chunk);
        }
        self.body.extend_from_slice(&adler32(data).to_be_bytes());
        self.count += 1;
        id.to_string()
    }

    /// Write the pack into the repository at `repo` (`git index-pack --stdin`).
    pub fn write_to(self, repo: &Path) {
        let mut pack = Vec::with_capacity(self.body.len() + 32);
        pack.extend_from_slice(b"PACK");
        pack.extend_from_slice(&2u32.to_be_bytes());
        pack.extend_from_slice(&self.count.to_be_bytes());
        pack.extend_from_slice(&self.body);
        let mut h = gix_hash::hasher(gix_hash::Kind::Sha1);
        h.update(&pack);
        pack.extend_from_slice(h.try_finalize().expect("no collision").as_slice());
        crate::run::run_with_input(crate::run::git_command(repo).args(["index-pack", "--stdin"]), &pack);
    }
}

fn adler32(data: &[u8]) -> u32 {
    let (mut a, mut b) = (1u32, 0u32);
    for chunk in data.chunks(5552) {
        for &x in chunk {
            a += u32::from(x);
            b += a;
        }
        a %= 65521;
        b %= 65521;
    }
    (b << 16) | a
}

/// A commit of `tree` with a fixed author and date, as raw commit data for [`Pack::add`].
pub fn commit_data(tree: &str) -> Vec<u8> {
    format!("tree {tree}\nauthor T <t@example.com> 0 +0000\ncommitter T <t@example.com> 0 +0000\n\nhostile shape\n")
        .into_bytes()
}

/// A chain of `depth` nested trees `d/d/…/d` holding one file `leaf` at the bottom, in one pack
/// written to `repo`; the commit's id.
pub fn deep_chain(repo: &Path, depth: usize) -> String {
    let mut pack = Pack::new();
    let blob = pack.add(Kind::Blob, b"leaf\n");
    let mut tree = pack.add(Kind::Tree, &tree_entry("100644", b"leaf", &blob));
    for _ in 0..depth {
        tree = pack.add(Kind::Tree, &tree_entry("40000", b"d", &tree));
    }
    let commit = pack.add(Kind::Commit, &commit_data(&tree));
    pack.write_to(repo);
    commit
}

/// A tree bomb: `levels` levels of trees whose two entries `a` and `b` are the same subtree,
/// one file `f` at the bottom; a pack of a few KB that a checkout expands to 2^levels files in
/// 2^(levels+1) - 2 directories. Written to `repo`; the commit's id.
pub fn tree_bomb(repo: &Path, levels: usize) -> String {
    let mut pack = Pack::new();
    let blob = pack.add(Kind::Blob, b"boom\n");
    let mut tree = pack.add(Kind::Tree, &tree_entry("100644", b"f", &blob));
    for _ in 0..levels {
        let mut data = tree_entry("40000", b"a", &tree);
        data.extend_from_slice(&tree_entry("40000", b"b", &tree));
        tree = pack.add(Kind::Tree, &data);
    }
    let commit = pack.add(Kind::Commit, &commit_data(&tree));
    pack.write_to(repo);
    commit
}
