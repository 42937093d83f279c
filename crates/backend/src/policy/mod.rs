//! Wrappers that compose over any [`Backend`](crate::Backend): each adds one concern and
//! forwards everything else, so a stack reads like `Budgets(lookups=1, writes=4, Count(local:/srv/tree))`.

mod budget;
mod count;
mod fail;
mod latency;
mod unshare;

pub use budget::{Adaptive, Budgets, Gate, Ticket};
pub use count::{Count, Record};
pub use fail::{Fail, Fault};
pub use latency::Latency;
pub use unshare::RewriteModes;
