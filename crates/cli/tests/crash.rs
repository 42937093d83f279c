//! SIGKILL at random moments (24 trials in CI; `cargo xtask campaign` runs hundreds): after
//! each kill the next sync completes and the target equals `git archive`.

#[test]
fn syncs_killed_at_random_moments_are_finished_by_the_next_run() {
    let stats = treesync_testkit::crash::run(std::path::Path::new(env!("CARGO_BIN_EXE_treesync")), 24, 2026);
    eprintln!("{stats:?}");
    assert!(stats.failures.is_empty(), "{} failures:\n{}", stats.failures.len(), stats.failures.join("\n"));
    assert!(stats.killed_mid_sync >= 4, "too few kills landed mid-sync to mean anything: {stats:?}");
    assert!(stats.reported_interrupted >= 1, "status never saw an interrupted sync: {stats:?}");
}
