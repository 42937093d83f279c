//! `xtask-testbed`: the development tasks that run treesync's test beds (the slow FUSE
//! filesystem, nfs-ganesha, moto): `cargo xtask bench|scale|campaign|slowfs|ganesha|cleanup` come here.
//! `cargo xtask` (no task) lists them.

mod bench;
mod campaign;
mod cleanup;
mod ganesha;
mod measure;
mod repo;
mod scale;
mod slowfs;

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("bench") => bench::run(&args[1..]),
        Some("campaign") => campaign::run(&args[1..]),
        Some("cleanup") => cleanup::run(&args[1..]),
        Some("slowfs") => slowfs::run(&args[1..]),
        Some("scale") => scale::run(&args[1..]),
        Some("ganesha") => ganesha::run(&args[1..]),
        // Internal: children of the tasks above (see repo::make_repo and measure::measure).
        Some("bench-generate") => repo::generate(&args[1..]),
        Some("__measure") => measure::measure_child(&args[1..]),
        other => Err(format!("unknown task {other:?}: run `cargo xtask` for the list")),
    };
    xtask::util::exit_code(result)
}
