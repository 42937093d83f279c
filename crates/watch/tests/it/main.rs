//! The watch crate's tests, one module per subject, in one test binary.

mod watch;
mod watch_events;
mod watch_many;
