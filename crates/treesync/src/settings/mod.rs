//! Every setting of a sync, declared once: a field of one of the groups below, whose doc
//! comment is the flag's help, whose `arg` attribute makes it a flag of the `treesync` binary
//! (with the `clap` feature), and whose `serde` attribute makes it a key of `treesync.toml`.
//!
//! Each field is an `Option`: unset leaves the choice to the next layer. [`Settings::or`] is the
//! one merge order, flag > mirror > defaults (`flags.or(mirror).or(defaults)`); the library's
//! options are made from the merged settings in one place each ([`TargetSettings::options`],
//! [`Settings::sync_options`], [`GenerationSettings::options`], [`HookSettings::options`]).

// The fields' doc comments are the flags' help, printed as written: URLs stay bare.
#![allow(rustdoc::bare_urls)]

pub mod value;

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use treesync_core::lfs::LfsMode;

use crate::open::{BackendKind, Opened, TargetOptions, WriteJobs};

pub use crate::decide::SwitchMode;

/// Declares a group of settings (every field an `Option`) and its merge: a field set here wins
/// over `lower`'s.
macro_rules! group {
    ($(#[$meta:meta])* pub struct $name:ident { $($(#[$fmeta:meta])* pub $field:ident: Option<$ty:ty>,)* }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Default, PartialEq, Deserialize)]
        #[cfg_attr(feature = "clap", derive(clap::Args))]
        pub struct $name {
            $($(#[$fmeta])* pub $field: Option<$ty>,)*
        }

        impl $name {
            /// These settings, with `lower`'s where these are unset.
            #[must_use]
            pub fn or(self, lower: Self) -> Self {
                Self { $($field: self.$field.or(lower.$field),)* }
            }

            /// The keys of a config file these settings take, in the order of the fields: the
            /// names serde's derive reads (without the flags-only fields it skips).
            pub fn keys() -> &'static [&'static str] {
                fields_of::<Self>()
            }
        }
    };
}

group! {
    /// Where a `--repo` URL is mirrored.
    pub struct CacheSettings {
        /// Where a --repo URL is mirrored (one bare repository per URL under DIR/repos) [default:
        /// $TREESYNC_CACHE_DIR, else $XDG_CACHE_HOME/treesync, else ~/.cache/treesync; as root
        /// without $HOME: /var/cache/treesync].
        #[cfg_attr(feature = "clap", arg(long, value_name = "DIR"))]
        #[serde(default, deserialize_with = "value::path")]
        pub cache_dir: Option<PathBuf>,
    }
}

group! {
    /// What of the commit is written, and how.
    pub struct ContentSettings {
        /// Fill each submodule (gitlink) with its tree at the recorded commit, as `git clone
        /// --recurse-submodules` does, nested ones too. Submodule repositories are found as git
        /// finds them: in modules/NAME under the repository's git directory, or at a local URL in
        /// .gitmodules (../lib.git beside a bare repository). Without it, submodules are empty
        /// directories. Turning it on or off fills or empties them.
        #[cfg_attr(feature = "clap", arg(long, num_args = 0, default_missing_value = "true"))]
        #[serde(default, deserialize_with = "value::flag")]
        pub recurse_submodules: Option<bool>,
        /// Sync only paths matching PATTERN (gitignore-style: `docs/`, `*.md`, `/site/**`;
        /// repeat it for more). A directory that matches brings all below it. The target's state
        /// records the patterns: changing them removes what is no longer selected and writes what
        /// now is, without reading the target. See docs/select.md.
        #[cfg_attr(feature = "clap", arg(long, value_name = "PATTERN"))]
        #[serde(default, deserialize_with = "value::patterns")]
        pub include: Option<Vec<String>>,
        /// Leave out paths matching PATTERN (gitignore-style, `!` re-includes; repeat it for more),
        /// after --include.
        #[cfg_attr(feature = "clap", arg(long, value_name = "PATTERN"))]
        #[serde(default, deserialize_with = "value::patterns")]
        pub exclude: Option<Vec<String>>,
        /// `git archive` semantics for deploys: paths with the export-ignore attribute are left
        /// out and export-subst files get their $Format:…$ placeholders expanded, as `git archive`
        /// does. See docs/export.md.
        #[cfg_attr(feature = "clap", arg(long, num_args = 0, default_missing_value = "true"))]
        #[serde(default, deserialize_with = "value::flag")]
        pub export: Option<bool>,
        /// What files stored with Git LFS (filter=lfs in .gitattributes) are written as. content
        /// (the default): their real content, read from the repository's own LFS store
        /// (.git/lfs/objects, or lfs.storage), as `git checkout` with git-lfs writes it; treesync
        /// never downloads, so every object must be there: a missing one stops the sync before
        /// anything is written, and `git -C REPO lfs fetch --all` (or REMOTE REV) brings it.
        /// pointers: the small pointer files git stores (as a checkout with GIT_LFS_SKIP_SMUDGE=1);
        /// needs no LFS store. Changing it rewrites the LFS files.
        #[cfg_attr(feature = "clap", arg(long, value_name = "content|pointers"))]
        #[serde(default, deserialize_with = "value::lfs")]
        pub lfs: Option<LfsMode>,
    }
}

group! {
    /// Which backend serves the target, and how many operations it keeps in flight.
    pub struct TargetSettings {
        /// Storage backend. `auto` infers it from the target: s3 for URLs; for directories nfs on
        /// NFS, SMB/CIFS and FUSE network mounts (from /proc/self/mountinfo), local otherwise
        /// [default: auto].
        #[cfg_attr(feature = "clap", arg(long, value_enum))]
        #[serde(default, deserialize_with = "value::backend")]
        pub backend: Option<BackendKind>,
        /// Operations in flight at once (default: the backend's policy: 8 batches for local,
        /// 32 PUTs for s3, adaptive writes for nfs). On nfs every operation in flight is a write,
        /// so `--jobs N` is also the write budget: alone it fixes N writes in flight, with
        /// `--write-jobs auto` it is the ceiling the adaptive budget grows to, and a fixed
        /// `--write-jobs` other than N is refused.
        #[cfg_attr(feature = "clap", arg(long, value_name = "N", value_parser = value::at_least_one))]
        #[serde(default, deserialize_with = "value::count")]
        pub jobs: Option<usize>,
        /// nfs: directory lookups in flight, each directory looked up once. Default on mounts:
        /// adaptive for a sync's directory probes, starting at 8 within 1..16, and 32 threads for verify's read-only scan (every stat is a
        /// round trip; only many in flight hide it, as git's preloaded index does); nfs:// URLs: 32
        /// for both. Given, N bounds both (1: one directory at a time).
        #[cfg_attr(feature = "clap", arg(long, value_name = "N", value_parser = value::at_least_one, help_heading = "Network filesystems (--backend nfs)"))]
        #[serde(default, deserialize_with = "value::count")]
        pub lookup_jobs: Option<usize>,
        /// nfs: writes (creates, renames, removals) in flight: a number, or `auto` (the default) to
        /// adapt to the latency the server shows (grows while throughput rises, backs off when
        /// latency climbs) up to the backend's ceiling, or up to `--jobs N` when given. A number
        /// must equal `--jobs` when both are given; `sync -vv` logs the budgets decided and
        /// `sync --json` reports them.
        #[cfg_attr(feature = "clap", arg(long, value_name = "N|auto", value_parser = <WriteJobs as std::str::FromStr>::from_str, help_heading = "Network filesystems (--backend nfs)"))]
        #[serde(default, deserialize_with = "value::write_jobs")]
        pub write_jobs: Option<WriteJobs>,
        /// Operations per batch (default: the backend's policy, 64 for local).
        #[cfg_attr(feature = "clap", arg(long, value_name = "N", value_parser = value::at_least_one, hide_short_help = true))]
        #[serde(default, deserialize_with = "value::count")]
        pub batch: Option<usize>,
        /// fsync every file before it is renamed into place (slower; survives power loss).
        #[cfg_attr(feature = "clap", arg(long, num_args = 0, default_missing_value = "true"))]
        #[serde(default, deserialize_with = "value::flag")]
        pub fsync: Option<bool>,
        /// S3 endpoint, e.g. http://127.0.0.1:9000 (default: $AWS_ENDPOINT_URL or AWS).
        #[cfg_attr(feature = "clap", arg(long, value_name = "URL", help_heading = "Object storage"))]
        #[serde(default, deserialize_with = "value::text")]
        pub endpoint: Option<String>,
        /// S3 region (default: $AWS_REGION, else us-east-1).
        #[cfg_attr(feature = "clap", arg(long, value_name = "REGION", help_heading = "Object storage"))]
        #[serde(default, deserialize_with = "value::text")]
        pub region: Option<String>,
        /// Allow a plain-HTTP endpoint (local test servers).
        #[cfg_attr(feature = "clap", arg(long, num_args = 0, default_missing_value = "true", help_heading = "Object storage"))]
        #[serde(default, deserialize_with = "value::flag")]
        pub allow_http: Option<bool>,
    }
}

group! {
    /// How large a plan may get before it is refused (see [`treesync_core::plan::Limits`]).
    pub struct LimitSettings {
        // The help states the defaults the core enforces (`treesync_core::plan::DEFAULT_MAX_*`).
        #[cfg_attr(feature = "clap", arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..), help_heading = "Limits", help = max_entries_help()))]
        #[serde(default, deserialize_with = "value::count")]
        pub max_entries: Option<u64>,
        #[cfg_attr(feature = "clap", arg(long, value_name = "SIZE", value_parser = value::parse_size, help_heading = "Limits", help = max_bytes_help()))]
        #[serde(default, deserialize_with = "value::size")]
        pub max_bytes: Option<u64>,
        /// Stop a filter driver (filter.NAME.smudge) still running after DURATION on one file (its
        /// process group is killed) and fail the sync naming the filter and the file (e.g. 30s,
        /// 1h) [default: 10m].
        #[cfg_attr(feature = "clap", arg(long, value_name = "DURATION", value_parser = value::positive_duration, help_heading = "Limits"))]
        #[serde(default, deserialize_with = "value::filter_timeout")]
        pub filter_timeout: Option<Duration>,
    }
}

group! {
    /// `--atomic` and its settings: whether the target is kept in generations, and how.
    pub struct GenerationSettings {
        /// Keep the target in generations: each sync brings a spare generation up to date (by the
        /// diff between the tree it holds and the commit) and switches the target to it in one
        /// atomic step, so a reader that resolves the target once (cd into it, opens it, resolves
        /// the link) reads one whole commit. Needs a directory or nfs:// target; the generations
        /// live in PARENT/.NAME.treesync. Once on, later syncs keep it on. See docs/atomic.md.
        #[cfg_attr(feature = "clap", arg(long, num_args = 0, default_missing_value = "true", help_heading = "Generations (--atomic)"))]
        #[serde(default, deserialize_with = "value::flag")]
        pub atomic: Option<bool>,
        /// Stop keeping the target in generations: it becomes a plain directory holding the current
        /// generation, synced in place from then on; retired generations are removed once past
        /// --grace.
        // A flag only: the config file says `atomic = false`. [`GenerationSettings::wanted`]
        // reads both.
        #[cfg_attr(feature = "clap", arg(long, num_args = 0, default_missing_value = "true", conflicts_with = "atomic", help_heading = "Generations (--atomic)"))]
        #[serde(skip)]
        pub no_atomic: Option<bool>,
        /// How many generations to keep, the current one included [default: 2].
        #[cfg_attr(feature = "clap", arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..), help_heading = "Generations (--atomic)"))]
        #[serde(default, deserialize_with = "value::count")]
        pub keep: Option<u64>,
        /// A generation is neither reused nor removed until this long after it stopped being
        /// current, so readers that resolved it can finish (e.g. 30s, 10m, 0) [default: 5m]. On
        /// local disks a generation some process still holds open is skipped too.
        #[cfg_attr(feature = "clap", arg(long, value_name = "DURATION", value_parser = treesync_core::duration::parse, help_heading = "Generations (--atomic)"))]
        #[serde(default, deserialize_with = "value::duration")]
        pub grace: Option<Duration>,
        /// The most generations the target may have, the current one included, however fast syncs
        /// come: at the cap, with none past --grace, a sync is refused (exit 3, saying when to
        /// retry) rather than reuse a generation a reader may be in [default: --keep + 8].
        #[cfg_attr(feature = "clap", arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..), help_heading = "Generations (--atomic)"))]
        #[serde(default, deserialize_with = "value::count")]
        pub max_generations: Option<u64>,
        /// How the target is switched: exchange (the target stays a real directory, swapped with
        /// renameat2 RENAME_EXCHANGE; local disks), symlink (the target is a symlink replaced by a
        /// rename; any filesystem, nfs://), or auto: exchange where the filesystem can, else
        /// symlink [default: auto, then what the target uses].
        #[cfg_attr(feature = "clap", arg(long, value_enum, value_name = "auto|symlink|exchange", help_heading = "Generations (--atomic)"))]
        #[serde(default, deserialize_with = "value::switch")]
        pub switch: Option<SwitchMode>,
    }
}

group! {
    /// `--exec-after`, `--webhook` and their settings.
    pub struct HookSettings {
        /// After each sync that changed the target (or was its first), run CMD with `sh -c`, with
        /// TREESYNC_COMMIT (the commit synced to), TREESYNC_PREVIOUS (the one before; empty on a
        /// first sync), TREESYNC_TARGET (--target as given), TREESYNC_CHANGED (paths created,
        /// changed or removed) and TREESYNC_MIRROR (for a mirror) in its environment. stdin is
        /// /dev/null; its output goes to stderr. Exit status 0 is success. See docs/hooks.md.
        /// Example: --exec-after 'systemctl reload nginx'
        #[cfg_attr(feature = "clap", arg(long, value_name = "CMD", help_heading = "Hooks"))]
        #[serde(default, deserialize_with = "value::text")]
        pub exec_after: Option<String>,
        /// After each sync that changed the target (or was its first), POST the JSON document
        /// `sync --json` prints to URL (Content-Type: application/json); any 2xx is success.
        /// Example: --webhook https://deploy.example.com/hooks/site
        #[cfg_attr(feature = "clap", arg(long, value_name = "URL", help_heading = "Hooks"))]
        #[serde(default, deserialize_with = "value::text")]
        pub webhook: Option<String>,
        /// How long one try of a hook may take: a command still running is killed (its process
        /// group), a request still unanswered is dropped, and the try counts as failed (e.g. 30s,
        /// 5m) [default: 60s].
        #[cfg_attr(feature = "clap", arg(long, value_name = "DURATION", value_parser = treesync_core::duration::parse, help_heading = "Hooks"))]
        #[serde(default, deserialize_with = "value::duration")]
        pub hook_timeout: Option<Duration>,
        /// How often a failed hook is tried again, after 1s, 2s, 4s… (doubling); then it gives up
        /// for that sync. A newer sync supersedes the pending retries of an older one. A hook's
        /// failure never fails or undoes the sync: `watch` logs it and goes on, `sync` exits 5
        /// [default: 3].
        #[cfg_attr(feature = "clap", arg(long, value_name = "N", help_heading = "Hooks"))]
        #[serde(default, deserialize_with = "value::tries")]
        pub hook_retries: Option<u32>,
    }
}

group! {
    /// How `watch` follows the ref and checks the target.
    pub struct WatchSettings {
        /// When polling: how often to look at the ref (e.g. 500ms, 5s, 1m) [default: 5s]. Also the
        /// first wait before a failed step is tried again.
        #[cfg_attr(feature = "clap", arg(long, value_name = "DURATION", value_parser = treesync_core::duration::parse))]
        #[serde(default, deserialize_with = "value::interval")]
        pub interval: Option<Duration>,
        /// Look at the ref every --interval instead of being woken by changes to it (inotify).
        /// For a repository that another host writes through a mount the filesystem check does not
        /// recognize. Config: poll = true.
        ///
        /// Example: treesync watch --repo /srv/git/site.git --ref main --target /srv/www/site --poll --interval 1s
        #[cfg_attr(feature = "clap", arg(long, num_args = 0, default_missing_value = "true"))]
        #[serde(default, deserialize_with = "value::flag")]
        pub poll: Option<bool>,
        /// Run `verify` (stat level) this often (e.g. 24h); off by default.
        #[cfg_attr(feature = "clap", arg(long, value_name = "DURATION", value_parser = value::every))]
        #[serde(default, deserialize_with = "value::verify_every")]
        pub verify_every: Option<Duration>,
        /// With --verify-every D: check one slice of the tree every D/N instead of the whole tree
        /// every D (see `verify --slice`), so a full cycle still takes D without a burst of
        /// lookups on the NAS. The position is kept in the target's .treesync/verify-slice.
        /// Config: verify_slices = N.
        ///
        /// Example (one slice an hour, the whole tree a day): treesync watch --repo /srv/git/site.git --ref main --target /mnt/nas/site --verify-every 24h --verify-slices 24
        #[cfg_attr(feature = "clap", arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..)))]
        #[serde(default, deserialize_with = "value::count")]
        pub verify_slices: Option<u32>,
        /// With --verify-every: repair drift that verify finds.
        #[cfg_attr(feature = "clap", arg(long, num_args = 0, default_missing_value = "true"))]
        #[serde(default, deserialize_with = "value::flag")]
        pub repair: Option<bool>,
    }
}

/// The field names `T`'s derived `Deserialize` reads, as it hands them to the deserializer.
fn fields_of<'de, T: Deserialize<'de>>() -> &'static [&'static str] {
    /// A deserializer that only listens for the fields of a struct.
    struct Fields(&'static [&'static str]);
    #[derive(Debug)]
    struct Heard;
    impl fmt::Display for Heard {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("fields heard")
        }
    }
    impl std::error::Error for Heard {}
    impl serde::de::Error for Heard {
        fn custom<M: fmt::Display>(_: M) -> Self {
            Heard
        }
    }
    impl<'de> serde::Deserializer<'de> for &mut Fields {
        type Error = Heard;
        fn deserialize_any<V: serde::de::Visitor<'de>>(self, _: V) -> Result<V::Value, Heard> {
            Err(Heard)
        }
        fn deserialize_struct<V: serde::de::Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Heard> {
            self.0 = fields;
            Err(Heard)
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option unit
            unit_struct newtype_struct seq tuple tuple_struct map enum identifier ignored_any
        }
    }
    let mut fields = Fields(&[]);
    let _ = T::deserialize(&mut fields);
    fields.0
}

/// `--max-entries`' help, with the default of [`treesync_core::plan::Limits`].
#[cfg(feature = "clap")]
fn max_entries_help() -> String {
    format!(
        "Refuse a tree that needs more than N ops (directories, files and symlinks to create, change or remove): a tree bomb expands a few KB of shared subtrees into millions of paths. Checked while planning, before anything is written [default: {}]",
        treesync_core::plan::DEFAULT_MAX_ENTRIES
    )
}

/// `--max-bytes`' help, with the default of [`treesync_core::plan::Limits`].
#[cfg(feature = "clap")]
fn max_bytes_help() -> String {
    format!(
        "Refuse a plan that writes more than SIZE of file content, e.g. 500GiB, 2TiB (powers of 1024; KB, MB, GB, TB are powers of 1000) [default: {}]",
        value::size_text(treesync_core::plan::DEFAULT_MAX_BYTES)
    )
}

/// Every setting: the groups, as a mirror of a config file or a command line holds them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Settings {
    /// `cache_dir`.
    pub cache: CacheSettings,
    /// What is written, and how.
    pub content: ContentSettings,
    /// The backend and its budgets.
    pub target: TargetSettings,
    /// The plan's limits.
    pub limits: LimitSettings,
    /// Generations (`atomic`).
    pub generations: GenerationSettings,
    /// Hooks.
    pub hooks: HookSettings,
    /// `watch`.
    pub watch: WatchSettings,
}

impl Settings {
    /// These settings, with `lower`'s where these are unset: the one merge order, used as
    /// `flags.or(mirror).or(defaults)`.
    #[must_use]
    pub fn or(self, lower: Settings) -> Settings {
        Settings {
            cache: self.cache.or(lower.cache),
            content: self.content.or(lower.content),
            target: self.target.or(lower.target),
            limits: self.limits.or(lower.limits),
            generations: self.generations.or(lower.generations),
            hooks: self.hooks.or(lower.hooks),
            watch: self.watch.or(lower.watch),
        }
    }

    /// Every key of a config file, group by group.
    pub fn keys() -> Vec<&'static str> {
        [
            CacheSettings::keys(),
            ContentSettings::keys(),
            TargetSettings::keys(),
            LimitSettings::keys(),
            GenerationSettings::keys(),
            HookSettings::keys(),
            WatchSettings::keys(),
        ]
        .concat()
    }

    /// Read every group from a table of settings; `table` makes a deserializer of it for each
    /// group (keys no group takes are left to the caller, which knows its other keys).
    pub fn from_table<'de, D: serde::Deserializer<'de>>(table: impl Fn() -> D) -> Result<Settings, D::Error> {
        Ok(Settings {
            cache: CacheSettings::deserialize(table())?,
            content: ContentSettings::deserialize(table())?,
            target: TargetSettings::deserialize(table())?,
            limits: LimitSettings::deserialize(table())?,
            generations: GenerationSettings::deserialize(table())?,
            hooks: HookSettings::deserialize(table())?,
            watch: WatchSettings::deserialize(table())?,
        })
    }

    /// The options of a sync of the target `opened` ([`crate::open()`]) with these settings: its
    /// budgets, limits, selection and conversions. The command's own choices (`force`,
    /// `dry_run`, locks) are left at their defaults.
    pub fn sync_options(&self, opened: &Opened) -> Result<treesync_core::sync::Options, treesync_core::select::Error> {
        let p = self.prepare_options()?;
        Ok(treesync_core::sync::Options {
            apply: opened.apply_options(),
            backend_name: opened.label(),
            limits: p.limits,
            recurse_submodules: p.recurse_submodules,
            select: p.select,
            export: p.export,
            lfs: p.lfs,
            ..Default::default()
        })
    }

    /// What a plan of the next sync ([`treesync_core::sync::prepare`]) takes of these
    /// settings: limits, selection and conversions (not a takeover; `force` is the command's).
    pub fn prepare_options(&self) -> Result<treesync_core::sync::PrepareOptions, treesync_core::select::Error> {
        let c = &self.content;
        Ok(treesync_core::sync::PrepareOptions {
            force: false,
            create: false,
            limits: self.limits.limits(),
            recurse_submodules: c.recurse_submodules.unwrap_or_default(),
            select: self.select()?,
            export: c.export.unwrap_or_default(),
            lfs: c.lfs.unwrap_or_default(),
        })
    }

    /// The paths `include` and `exclude` select.
    pub fn select(&self) -> Result<treesync_core::select::Select, treesync_core::select::Error> {
        let (c, none) = (&self.content, Vec::new());
        treesync_core::select::Select::new(c.include.as_ref().unwrap_or(&none), c.exclude.as_ref().unwrap_or(&none))
    }
}

impl TargetSettings {
    /// How [`crate::open()`] opens a target with these settings.
    pub fn options(&self) -> TargetOptions {
        TargetOptions {
            backend: self.backend.unwrap_or_default(),
            jobs: self.jobs,
            batch: self.batch,
            write_jobs: self.write_jobs,
            lookup_jobs: self.lookup_jobs,
            fsync: self.fsync.unwrap_or_default(),
            s3: treesync_backend_s3::Config {
                endpoint: self.endpoint.clone(),
                region: self.region.clone(),
                allow_http: self.allow_http.unwrap_or_default(),
                ..Default::default()
            },
        }
    }
}

impl LimitSettings {
    /// The limits, the core's defaults where unset.
    pub fn limits(&self) -> treesync_core::plan::Limits {
        let default = treesync_core::plan::Limits::default();
        treesync_core::plan::Limits {
            max_entries: self.max_entries.unwrap_or(default.max_entries),
            max_bytes: self.max_bytes.unwrap_or(default.max_bytes),
            filter_timeout: self.filter_timeout.unwrap_or(default.filter_timeout),
        }
    }
}

impl GenerationSettings {
    /// `Some(true)`: keep the target in generations, `Some(false)`: stop (`--no-atomic`, or
    /// `atomic = false`), `None`: whatever the target is.
    pub fn wanted(&self) -> Option<bool> {
        match (self.no_atomic, self.atomic) {
            (Some(true), _) => Some(false),
            (_, atomic) => atomic,
        }
    }

    /// The generations' options, around `sync`.
    pub fn options(&self, sync: treesync_core::sync::Options) -> treesync_core::generation::Options {
        use treesync_core::generation::{self, Switch};
        generation::Options {
            sync,
            keep: self.keep.map_or(generation::DEFAULT_KEEP, |k| usize::try_from(k).unwrap_or(usize::MAX)),
            grace: self.grace.unwrap_or(generation::DEFAULT_GRACE),
            max_generations: self.max_generations.map(|m| usize::try_from(m).unwrap_or(usize::MAX)),
            switch: match self.switch {
                None | Some(SwitchMode::Auto) => None,
                Some(SwitchMode::Symlink) => Some(Switch::Symlink),
                Some(SwitchMode::Exchange) => Some(Switch::Exchange),
            },
        }
    }
}

impl HookSettings {
    /// The hooks' options.
    pub fn options(&self) -> treesync_watch::hook::Options {
        use treesync_watch::hook;
        hook::Options {
            exec: self.exec_after.clone(),
            webhook: self.webhook.clone(),
            timeout: self.hook_timeout.unwrap_or(hook::DEFAULT_TIMEOUT),
            retries: self.hook_retries.unwrap_or(hook::DEFAULT_RETRIES),
            ..Default::default()
        }
    }
}

impl WatchSettings {
    /// `verify_every`, `None` when off (unset, `"off"` or 0).
    pub fn verify_every(&self) -> Option<Duration> {
        self.verify_every.filter(|d| !d.is_zero())
    }
}
