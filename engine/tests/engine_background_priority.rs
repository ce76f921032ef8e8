//! Flushes and compactions give way to the application's threads: the background workers run
//! at the niceness `EngineOptions::background_nice` adds. A test binary of its own, so no other
//! test's engine has workers running meanwhile.

#![cfg(target_os = "linux")]

use std::time::{Duration, Instant};

use cellar_engine::{Engine, EngineOptions};

/// The niceness of each thread of this process whose name starts with `prefix`.
fn niceness_of_threads(prefix: &str) -> Vec<i64> {
    let mut nice = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if comm.trim_end().starts_with(prefix) {
            // Niceness is the 19th field of `stat`, the 17th after the name in parentheses.
            let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
            let Some(name_end) = stat.rfind(')') else { continue };
            if let Some(n) = stat[name_end + 1..].split_whitespace().nth(16).and_then(|n| n.parse().ok()) {
                nice.push(n);
            }
        }
    }
    nice
}

#[test]
fn background_threads_run_at_the_niceness_the_options_add() {
    let own = niceness_of_threads("")[0];
    for (nice, want) in [(5u8, own + 5), (0, own), (30, 19)] {
        let dir = tempfile::tempdir().unwrap();
        let opts = EngineOptions::default().background_nice(nice).background_threads(2);
        let engine = Engine::open(dir.path(), opts).unwrap();
        // The workers lower their own priority as they start.
        let started = Instant::now();
        let mut seen = niceness_of_threads("cellar-bg-");
        while seen != [want.min(19); 2] && started.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(10));
            seen = niceness_of_threads("cellar-bg-");
        }
        assert_eq!(seen, [want.min(19); 2], "background_nice {nice}");
        drop(engine);
        // The workers are joined when the engine goes.
        assert!(niceness_of_threads("cellar-bg-").is_empty());
    }
}
