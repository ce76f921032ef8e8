//! Which files a background compaction merges: HBase's ratio-based ("exploring") selection.
//!
//! Merging every file of a store on each compaction rewrites its oldest and largest file again
//! every few flushes, so a store that grows by `n` flushes rewrites on the order of `n²` flushes'
//! worth of data. Instead a compaction merges a run of files adjacent in age in which no file
//! is larger than `ratio` times the others together: a large file waits until newer files add
//! up to about its size, and each byte is rewritten about `log(n)` times. The run must stay
//! adjacent in age so that the files of a store keep covering disjoint spans of time, which is
//! what the next selection's sizes describe.

use std::ops::Range;

/// The knobs of the selection, from [`crate::EngineOptions`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct CompactionPolicy {
    /// Fewest files one compaction merges.
    pub min_files: usize,
    /// Most files one compaction merges.
    pub max_files: usize,
    /// No file of a run may be larger than this times the others together.
    pub ratio: f64,
    /// From this many files on, a store that no run fits merges its smallest `min_files`
    /// adjacent files anyway (all of them, if it holds fewer), before writes wait for it.
    pub stuck_files: usize,
    /// A run of every file of a family may apply the full retention rules (see
    /// [`crate::region::CompactionScope::Selected`]).
    pub major_when_every_file: bool,
}

/// The files to merge, as a range of `sizes` (a store's file sizes, newest first), or `None`
/// when no run is worth merging yet. Of the runs that fit the ratio it takes the one with the
/// most files, and of those the smallest: the most files removed for the fewest bytes written.
pub(crate) fn select(sizes: &[u64], policy: &CompactionPolicy) -> Option<Range<usize>> {
    let min = policy.min_files.max(2);
    let max = policy.max_files.max(min);
    let mut best: Option<(Range<usize>, u64)> = None;
    for start in 0..=sizes.len().saturating_sub(min) {
        for end in start + min..=sizes.len().min(start + max) {
            let run = &sizes[start..end];
            let total: u64 = run.iter().sum();
            if !fits_ratio(run, total, policy.ratio) {
                continue;
            }
            let better = best
                .as_ref()
                .is_none_or(|(b, b_total)| run.len() > b.len() || (run.len() == b.len() && total < *b_total));
            if better {
                best = Some((start..end, total));
            }
        }
    }
    if best.is_none() && sizes.len() >= policy.stuck_files.max(2) {
        // Writes wait beyond this count: merge even where the minimum is larger than the
        // store (a minimum set above the blocking count must not stall them for good).
        let width = min.min(sizes.len());
        best = (0..=sizes.len() - width)
            .map(|start| (start..start + width, sizes[start..start + width].iter().sum::<u64>()))
            .min_by_key(|(_, total)| *total);
    }
    best.map(|(range, _)| range)
}

/// True if no file of `run` is larger than `ratio` times the others together.
fn fits_ratio(run: &[u64], total: u64, ratio: f64) -> bool {
    run.iter().all(|&size| size as f64 <= ratio * (total - size) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: CompactionPolicy =
        CompactionPolicy { min_files: 3, max_files: 10, ratio: 1.2, stuck_files: 16, major_when_every_file: true };

    #[test]
    fn equal_flushes_merge_together() {
        assert_eq!(select(&[10, 10, 10], &POLICY), Some(0..3));
        assert_eq!(select(&[10, 10], &POLICY), None, "fewer files than the minimum");
    }

    /// The point of the policy: a large old file is left alone until the newer ones add up.
    #[test]
    fn a_large_old_file_waits_for_newer_files_to_add_up_to_it() {
        assert_eq!(select(&[10, 10, 10, 300], &POLICY), Some(0..3));
        assert_eq!(select(&[10, 10, 300], &POLICY), None);
        assert_eq!(select(&[100, 100, 100, 300], &POLICY), Some(0..4));
    }

    #[test]
    fn the_run_with_most_files_wins_then_the_smallest() {
        // No run fits across the 1000: four small files beat three.
        assert_eq!(select(&[3, 3, 3, 3, 1000, 1, 1, 1], &POLICY), Some(0..4));
        // Equal counts: the fewer bytes.
        assert_eq!(select(&[50, 50, 50, 1000, 5, 5, 5], &POLICY), Some(4..7));
    }

    #[test]
    fn at_most_max_files_merge() {
        let policy = CompactionPolicy { max_files: 4, ..POLICY };
        assert_eq!(select(&[7; 9], &policy), Some(0..4));
    }

    /// A store whose sizes fit no run (each file far larger than all newer ones) merges its
    /// smallest adjacent files once it is near the count at which writes wait.
    #[test]
    fn a_stuck_store_merges_its_smallest_files() {
        let growing: Vec<u64> = (0..5).map(|i| 10u64.pow(i)).collect();
        assert_eq!(select(&growing, &POLICY), None);
        let policy = CompactionPolicy { stuck_files: 5, ..POLICY };
        assert_eq!(select(&growing, &policy), Some(0..3));
    }

    /// A minimum above the count at which writes wait still lets a stuck store merge.
    #[test]
    fn a_minimum_above_the_blocking_count_does_not_stall_a_store() {
        let policy = CompactionPolicy { min_files: 20, stuck_files: 16, ..POLICY };
        assert_eq!(select(&[5; 15], &policy), None);
        assert_eq!(select(&[5; 17], &policy), Some(0..17));
    }

    #[test]
    fn empty_files_and_tiny_minimums_are_handled() {
        assert_eq!(select(&[], &POLICY), None);
        assert_eq!(select(&[0, 0, 0], &POLICY), Some(0..3));
        let policy = CompactionPolicy { min_files: 0, max_files: 0, ..POLICY };
        assert_eq!(select(&[5, 5], &policy), Some(0..2));
    }
}
