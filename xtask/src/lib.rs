//! `cargo xtask`: development tasks for treesync. This library holds what the `xtask` binary
//! (dist, test: no test bed needed to build it) shares with `xtask-testbed` (the tasks that run
//! the FUSE and NFS test beds: bench, scale, campaign, slowfs, ganesha).

pub mod util;
