//! A slow FUSE passthrough filesystem: the test bed for backends that write to a NAS.
//!
//! [`SlowFs`] mirrors a backing directory through a FUSE mount and sleeps a configurable
//! latency before serving each request, so a local directory behaves like an NFS mount on a
//! slow network. The kernel's entry and attribute caches are off (TTL 0, like NFS with
//! `actimeo=0`), so every `lstat` is a round trip to the daemon. Requests are served
//! concurrently by a worker pool, as a NAS serves many calls at once; `max_concurrent` models
//! a server with few threads or one big lock. Every request is counted by kind, with the most
//! in flight at once, and optionally recorded with the path it touched, so tests can assert
//! how many round trips a sync costs and that unchanged paths were left alone.
//!
//! Mounting needs `/dev/fuse` and root (as root the mount is a direct `mount(2)` call; other
//! users go through `fusermount3`). The mount shows in `/proc/self/mountinfo` with fstype
//! `fuse.treesync-slowfs`, which is how treesync's detection sees a network filesystem.
//!
//! The modules follow the request's way: `lifecycle` mounts and unmounts, `fuse` is the
//! adapter fuser calls, `pool` runs each request on a worker under the service limit,
//! `passthrough` does it on the backing directory, `stats` counts it, `control` serves the
//! counts on a unix socket, and `config` says how slow it all is.

mod config;
mod control;
mod fuse;
mod lifecycle;
mod passthrough;
mod pool;
mod stats;

pub use config::Config;
pub use control::query;
pub use lifecycle::{SlowFs, check, mount_fstype, require};
pub use stats::{Op, OpStats, Stats};

/// fsname and subtype of the mount: `/proc/self/mountinfo` shows fstype `fuse.treesync-slowfs`.
pub const FS_NAME: &str = "treesync-slowfs";
