//! Replays every kept fuzz input — `fuzz/seeds/<target>/` (the corpus, minimized) and
//! `fuzz/regressions/<target>/` (each crash found, kept once fixed) — through its target's
//! check, on stable. The directories are read from the repository, not copied.

use std::path::{Path, PathBuf};

fn inputs(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries.filter_map(|e| Some(e.ok()?.path())).collect();
    files.sort();
    files
}

#[test]
fn every_kept_input_passes_its_target() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
    let mut total = 0;
    for (name, check) in pdgate_fuzzing::TARGETS {
        let files: Vec<PathBuf> = ["seeds", "regressions"]
            .iter()
            .flat_map(|d| inputs(&root.join(d).join(name)))
            .collect();
        assert!(!files.is_empty(), "no kept inputs for fuzz target {name}");
        for f in &files {
            let data = std::fs::read(f).unwrap();
            let run = std::panic::catch_unwind(|| check(&data));
            assert!(run.is_ok(), "{name}: {} fails", f.display());
        }
        total += files.len();
    }
    assert!(total >= pdgate_fuzzing::TARGETS.len());
}
