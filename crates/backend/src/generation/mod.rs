//! What a place must do to keep a target in generations (`sync --atomic`): the [`Host`] of the
//! generations next to a target, their on-disk [`Record`], and [`MemoryHost`], the reference
//! host. The operation that uses them (`treesync_core::generation`) lives in core.

pub mod host;
pub mod memory;
pub mod record;

pub use host::{At, AtTarget, CloneHow, Cloned, Host, Switch, Switched};
pub use memory::MemoryHost;
pub use record::{Record, SlotRecord};
