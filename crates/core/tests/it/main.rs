//! The core library's tests, one module per subject, in one test binary (each file in `tests/`
//! used to be its own binary linking every dependency).

mod adopt;
mod generations;
mod lfs;
mod place;
mod plan_cache;
mod plan_reads;
mod stream;
mod submodules;
mod verify_errors;
mod verify_submodules;
mod wrappers;
