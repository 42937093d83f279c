//! What a person writes as a target, parsed: a directory or a URL.

use std::fmt;
use std::path::{Path, PathBuf};

use treesync_backend_nfs::client::NfsUrl;

/// A target as a person writes it, parsed ([`Target::parse`]). It names a place; which backend
/// serves it, with what budgets, is decided by [`open()`](crate::open()) (or
/// [`check()`](crate::check()) without opening).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Target {
    /// A directory: a local disk or a network mount (told apart when opened, from the mount
    /// table).
    Dir(PathBuf),
    /// `nfs://HOST[:PORT]/EXPORT/PATH[?…]`: an NFS export reached by the built-in NFSv3 client.
    Nfs {
        /// The parsed URL.
        url: NfsUrl,
        /// The URL as written (with its query).
        text: String,
    },
    /// `s3://BUCKET/PREFIX` (or `s3a://`): object storage.
    S3(String),
    /// `file:///DIR`: a directory through the object-store interface.
    File(String),
    /// `memory://`: the core's in-memory reference backend ([`MemoryBackend`](crate::core::MemoryBackend)),
    /// for tests and examples; it forgets everything when the process ends.
    Memory(String),
}

/// A target string that names no place treesync can write to.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TargetError {
    /// The target string is empty.
    #[error(
        "the target is empty\n  hint: give a directory (/srv/site) or a URL (s3://BUCKET/PREFIX, nfs://HOST/EXPORT/PATH)"
    )]
    Empty,
    /// An `nfs://` URL that does not parse; the message says why and shows the form.
    #[error("{0}")]
    Nfs(String),
    /// `s3://` without a bucket.
    #[error("target {0:?} has no bucket name\n  hint: write s3://BUCKET/PREFIX")]
    NoBucket(String),
    /// A URL scheme no backend serves.
    #[error(
        "unsupported target scheme {scheme:?} in {target:?}\n  hint: targets are directories or s3://BUCKET/PREFIX, file:///DIR, memory://, nfs://HOST/EXPORT/PATH URLs"
    )]
    Scheme {
        /// The scheme, e.g. `sftp`.
        scheme: String,
        /// The target as written.
        target: String,
    },
}

impl Target {
    /// Parse a target: anything with `://` is a URL (`nfs`, `s3`, `s3a`, `file`, `memory`),
    /// anything else a directory. An `nfs://` URL is parsed in full here, so a bad one is found
    /// before anything is opened; object-storage URLs are checked for a bucket here and in full
    /// when opened.
    pub fn parse(target: &str) -> Result<Target, TargetError> {
        if target.is_empty() {
            return Err(TargetError::Empty);
        }
        let Some((scheme, rest)) = target.split_once("://") else {
            return Ok(Target::Dir(PathBuf::from(target)));
        };
        match scheme {
            "nfs" => Ok(Target::Nfs { url: NfsUrl::parse(target).map_err(TargetError::Nfs)?, text: target.into() }),
            "s3" | "s3a" if rest.split('/').next().is_none_or(str::is_empty) => {
                Err(TargetError::NoBucket(target.into()))
            }
            "s3" | "s3a" => Ok(Target::S3(target.into())),
            "file" => Ok(Target::File(target.into())),
            "memory" => Ok(Target::Memory(target.into())),
            other => Err(TargetError::Scheme { scheme: other.into(), target: target.into() }),
        }
    }

    /// The target as written (a directory that is not UTF-8, which [`Target::parse`] never
    /// makes, lossily: [`Target::dir`] has its path).
    pub fn as_str(&self) -> std::borrow::Cow<'_, str> {
        match self {
            Target::Dir(p) => p.to_string_lossy(),
            Target::Nfs { text, .. } => text.into(),
            Target::S3(t) | Target::File(t) | Target::Memory(t) => t.into(),
        }
    }

    /// The directory, for a [`Target::Dir`].
    pub fn dir(&self) -> Option<&Path> {
        match self {
            Target::Dir(p) => Some(p),
            _ => None,
        }
    }

    /// The local directory the target names, whatever its spelling: a directory, or the
    /// directory of a `file:///DIR` URL. `None` for targets that are not local paths.
    pub fn local_dir(&self) -> Option<PathBuf> {
        match self {
            Target::Dir(p) => Some(p.clone()),
            Target::File(url) => treesync_backend_s3::file_path(url),
            _ => None,
        }
    }

    /// Whether the target is a URL (everything but a directory).
    pub fn is_url(&self) -> bool {
        !matches!(self, Target::Dir(_))
    }
}

impl std::str::FromStr for Target {
    type Err = TargetError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Target::parse(s)
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Dir(p) => write!(f, "{}", p.display()),
            other => f.write_str(&other.as_str()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_form_parses_to_its_kind() {
        let t = |s: &str| Target::parse(s).expect(s);
        assert_eq!(t("/srv/site"), Target::Dir("/srv/site".into()));
        assert_eq!(t("site").dir(), Some(Path::new("site")));
        assert!(matches!(t("nfs://nas/export/site?uid=1000"), Target::Nfs { url, .. } if url.uid == 1000));
        assert_eq!(t("s3://bucket/prefix"), Target::S3("s3://bucket/prefix".into()));
        assert_eq!(t("s3a://bucket"), Target::S3("s3a://bucket".into()));
        assert_eq!(t("file:///srv/export"), Target::File("file:///srv/export".into()));
        assert_eq!(t("memory://"), Target::Memory("memory://".into()));
        assert_eq!(t("nfs://nas/export/site?uid=1000").to_string(), "nfs://nas/export/site?uid=1000");
        assert!(t("memory://").is_url() && !t("/x").is_url());
    }

    #[test]
    fn targets_that_name_no_place_say_what_to_write() {
        let e = |s: &str| Target::parse(s).expect_err(s).to_string();
        assert!(e("").starts_with("the target is empty\n  hint: "));
        assert!(
            e("s3:///docs").starts_with("target \"s3:///docs\" has no bucket name\n  hint: write s3://BUCKET/PREFIX")
        );
        assert!(e("sftp://h/d").starts_with("unsupported target scheme \"sftp\" in \"sftp://h/d\"\n  hint: "));
        assert!(e("nfs://[::1/x").contains("is not closed with ]\n  hint: the form is nfs://"));
    }
}
