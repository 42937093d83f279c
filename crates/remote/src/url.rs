//! Telling a URL from a path, and naming a URL's cache repository.

use sha2::{Digest, Sha256};

/// Whether `repo` (a `--repo` value) is a URL that git fetches from rather than a local path:
/// `scheme://…` (`https`, `ssh`, `git`, `file`, …), or scp-like `[user@]host:path` as git reads
/// it (a `:` before any `/`) unless a local path of that name exists.
pub fn is_url(repo: &str) -> bool {
    if let Some((scheme, _)) = repo.split_once("://") {
        let mut chars = scheme.chars();
        if chars.next().is_some_and(|c| c.is_ascii_alphabetic())
            && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
        {
            return true;
        }
    }
    match (repo.find(':'), repo.find('/')) {
        (Some(colon), slash) if colon > 0 && slash.is_none_or(|s| colon < s) => !std::path::Path::new(repo).exists(),
        _ => false,
    }
}

/// The cache repository's name for `url`: its last path component without `.git` (letters,
/// digits, `.`, `_` and `-`; at most 40), a dash and 16 hex digits of the URL's SHA-256, e.g.
/// `site-3f2a…` for `git://host/srv/site.git`.
pub fn readable_name(url: &str) -> String {
    let trimmed = url.trim_end_matches('/');
    let trimmed = trimmed.strip_suffix(".git").unwrap_or(trimmed);
    let last = trimmed.rsplit(['/', ':']).next().unwrap_or_default();
    let mut name: String = last
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') { c } else { '-' })
        .take(40)
        .collect();
    name = name.trim_matches(['-', '.']).to_string();
    if name.is_empty() {
        name = "repo".into();
    }
    let hash = Sha256::digest(url.as_bytes());
    let hex: String = hash.iter().take(8).map(|b| format!("{b:02x}")).collect();
    format!("{name}-{hex}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_and_paths_are_told_apart() {
        for url in [
            "https://h/x.git",
            "ssh://git@h/x",
            "git://127.0.0.1:9418/x.git",
            "file:///srv/x.git",
            "git@h:x.git",
            "h:x",
        ] {
            assert!(is_url(url), "{url}");
        }
        for path in ["/srv/x.git", "x.git", "./a:b", "", ":x", "a/b:c"] {
            assert!(!is_url(path), "{path}");
        }
    }

    #[test]
    fn a_local_path_with_a_colon_is_a_path_when_it_exists() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(dir.path().join("a:b")).expect("mkdir");
        let cwd = std::env::current_dir().expect("cwd");
        // Relative, as a user types it: checked from the current directory.
        std::env::set_current_dir(dir.path()).expect("cd");
        let exists = is_url("a:b");
        std::env::set_current_dir(cwd).expect("cd back");
        assert!(!exists);
        assert!(is_url("nosuchdir-here:b"));
    }

    #[test]
    fn names_are_readable_and_distinct() {
        let a = readable_name("git://127.0.0.1:9418/site.git");
        let b = readable_name("https://example.org/site.git/");
        assert!(a.starts_with("site-") && b.starts_with("site-"), "{a} {b}");
        assert_ne!(a, b);
        assert_eq!(a.len(), "site-".len() + 16);
        assert!(
            readable_name("git@h:team/w eird$.git").starts_with("w-eird-"),
            "{}",
            readable_name("git@h:team/w eird$.git")
        );
        assert!(readable_name("file:///").starts_with("repo-"));
    }
}
