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

/// A planting campaign (`what`) that failed no trial, wrote nothing outside, never resolved the
/// target outside its parent and left no run stuck.
fn assert_plants_were_harmless(what: &str, stats: &treesync_testkit::plant::Stats) {
    assert!(stats.failures.is_empty(), "{what}: {} failures:\n{}", stats.failures.len(), stats.failures.join("\n\n"));
    assert_eq!((stats.writes_outside, stats.targets_outside, stats.stuck), (0, 0, 0));
}

/// Issue 29: the planting campaign on a local disk, both switch modes: symlinks, hard links,
/// stray files and renames planted in the generations home at random moments of atomic syncs,
/// leaving and plain syncs. Nothing outside is written, the target never resolves outside its
/// parent, and after the planted entries are removed a rerun and a repair always finish.
#[test]
fn plants_in_the_home_at_random_moments_never_write_outside_nor_redirect_the_target() {
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_treesync"));
    // TREESYNC_PLANT_TRIALS=N runs N trials per mode (a longer campaign by hand).
    let more: Option<u64> = std::env::var("TREESYNC_PLANT_TRIALS").ok().and_then(|v| v.parse().ok());
    for (switch, trials, seed) in [("exchange", more.unwrap_or(120), 2029), ("symlink", more.unwrap_or(60), 2030)] {
        let dir = tempfile::tempdir().expect("tempdir");
        let parent = dir.path().join("srv");
        std::fs::create_dir(&parent).expect("parent");
        let site = treesync_testkit::plant::Site {
            target: parent.join("site").to_string_lossy().into_owned(),
            parent,
            name: "site".into(),
            switch,
        };
        let stats = treesync_testkit::plant::run(bin, &site, &dir.path().join("outside"), trials, seed, 40);
        eprintln!("local, --switch {switch}: {stats:?}");
        assert_plants_were_harmless(switch, &stats);
        assert!(stats.plants.values().sum::<u64>() >= trials / 2, "{switch}: too few plants landed: {stats:?}");
        assert!(stats.refused >= 1 && stats.succeeded >= 1, "{switch}: {stats:?}");
    }
}

/// The planting campaign on the NAS testbed (a FUSE mount; symlink mode, as on every network
/// filesystem) and over `nfs://` (nfs-ganesha; the plants are made in the exported directory,
/// as another client or a user on the server would).
#[test]
fn plants_in_the_home_on_a_nas_and_over_nfs_never_write_outside_nor_redirect_the_target() {
    use treesync_testkit::{ganesha::Ganesha, plant, slowfs};
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_treesync"));
    let fs = slowfs::SlowFs::temp(slowfs::Config {
        meta_latency: std::time::Duration::from_micros(20),
        ..Default::default()
    })
    .expect("mount the slow filesystem");
    let outside = tempfile::tempdir().expect("tempdir");
    let nas = plant::Site {
        target: fs.path().join("site").to_string_lossy().into_owned(),
        parent: fs.backing().to_path_buf(),
        name: "site".into(),
        switch: "symlink",
    };
    let server = Ganesha::shared();
    std::fs::create_dir_all(server.dir().join("plant")).expect("export dir");
    let nfs = plant::Site {
        target: server.url("plant/site"),
        parent: server.dir().join("plant"),
        name: "site".into(),
        switch: "symlink",
    };
    let trials: u64 = std::env::var("TREESYNC_PLANT_TRIALS").ok().and_then(|v| v.parse().ok()).unwrap_or(40);
    for (what, site, seed) in [("NAS", &nas, 2031), ("nfs://", &nfs, 2032)] {
        let stats = plant::run(bin, site, &outside.path().join(what.replace([':', '/'], "")), trials, seed, 20);
        eprintln!("{what}: {stats:?}");
        assert_plants_were_harmless(what, &stats);
        assert!(stats.plants.values().sum::<u64>() >= 15, "{what}: too few plants landed: {stats:?}");
    }
}
