//! Link the `treesync` binary as a position-dependent executable (`-no-pie`) on Linux.
//!
//! An incremental sync takes a few milliseconds, and process start was a third of it: a PIE
//! binary is relocated by the dynamic loader at every start, which writes (and so copies) every
//! page of its 1.2 MB RELRO segment (vtables, string tables, the S3 and TLS stacks' statics),
//! even with packed relative relocations (`.cargo/config.toml`). A position-dependent binary is
//! linked at its load address: nothing to relocate, and the pages a run does not touch are never
//! read. BENCHMARKS.md ("where the time goes") has the figures.
//!
//! The cost is address-space randomisation of the binary's own code and data (libraries, heap
//! and stack are still randomised). Distributions whose policy requires PIE build with
//! `TREESYNC_LINK_PIE=1`.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=TREESYNC_LINK_PIE");
    let linux = std::env::var("CARGO_CFG_TARGET_OS").is_ok_and(|os| os == "linux");
    let pie_wanted = std::env::var_os("TREESYNC_LINK_PIE").is_some_and(|v| !v.is_empty() && v != "0");
    if linux && !pie_wanted {
        // Passed after rustc's own `-pie`; the C compiler driver that links takes the last one.
        println!("cargo:rustc-link-arg-bin=treesync=-no-pie");
    }
}
