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

/// The campaign with `sync --atomic --grace 0` in both switch modes, 110 trials each (220 in
/// all) on small trees (150 bulk files): after every SIGKILL, before the next run, the target
/// is nothing (a first sync) or a whole generation equal to `git archive` of the commit it held
/// or of the one being synced to; after the next run it equals that run's commit.
#[test]
fn atomic_syncs_killed_at_random_moments_leave_a_whole_generation() {
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_treesync"));
    let mut total = 0;
    for (switch, seed) in [("symlink", 2027), ("exchange", 2028)] {
        let campaign = treesync_testkit::crash::Campaign::atomic(switch, 150);
        let stats = treesync_testkit::crash::run_campaign(bin, 110, seed, &campaign);
        eprintln!("--switch {switch}: {stats:?}");
        assert!(
            stats.failures.is_empty(),
            "{switch}: {} failures:\n{}",
            stats.failures.len(),
            stats.failures.join("\n")
        );
        assert_eq!(stats.trials, 110);
        assert_eq!(stats.whole_old + stats.whole_new + stats.missing_after_kill, stats.trials, "{stats:?}");
        assert!(stats.killed_mid_sync >= 20, "{switch}: too few kills landed mid-sync to mean anything: {stats:?}");
        assert!(stats.whole_old >= 5, "{switch}: no kill landed before the switch: {stats:?}");
        total += stats.trials;
    }
    assert!(total >= 200);
}
