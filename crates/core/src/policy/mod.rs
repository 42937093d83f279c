//! Wrappers that compose over any [`Backend`](crate::Backend): each adds one concern and
//! forwards everything else, so a stack reads like `Limit(4, Count(local:/srv/tree))`.

mod budget;
mod count;
mod fail;
mod latency;
mod limit;

pub use budget::{Adaptive, Budgets, Gate, Ticket};
pub use count::{Count, Record};
pub use fail::{Fail, Fault};
pub use latency::Latency;
pub use limit::Limit;
