//! Which groups a campaign measures when it measures only some (`--group-budget`): a balanced
//! design over the workload multisets of one size.
//!
//! What measured groups teach duet is each workload's group effect, a shrunk mean of its jobs'
//! residuals (`trainer/src/groups.rs`), so a workload in few chosen groups gets a poor effect
//! and a workload in many adds little. The design takes the groups one at a time, each the one
//! that raises the sum of the workloads' squared job counts least (a group of the least measured
//! workloads, distinct ones before a repeated one), ties in a seeded random order: every
//! workload ends in about as many jobs as any other.
//! `benchmarks/groups/residuals.py` compares it with a random draw on the committed triples.

use duet_core::rng::Rng;

/// How many groups of each size to measure.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum GroupBudget {
    /// This share (above 0, at most 1) of the multisets of each size, rounded, at least one.
    Share(f64),
    /// This many of each size (at most all of them).
    Groups(usize),
}

impl GroupBudget {
    /// In words, for the dataset's description: `25% (a balanced design)`.
    pub fn describe(self) -> String {
        match self {
            GroupBudget::Share(share) => {
                format!("{}% (a balanced design)", (share * 1000.0).round() / 10.0)
            }
            GroupBudget::Groups(n) => format!("{n} (a balanced design)"),
        }
    }

    /// The groups to measure of `all` of one size.
    pub fn count(self, all: usize) -> usize {
        let n = match self {
            #[allow(
                clippy::cast_possible_truncation,
                clippy::cast_sign_loss,
                clippy::cast_precision_loss
            )]
            GroupBudget::Share(share) => ((all as f64) * share).round() as usize,
            GroupBudget::Groups(n) => n,
        };
        n.clamp(all.min(1), all)
    }
}

/// `count` of `groups` (multisets of workload indices below `workloads`), chosen as the balanced
/// design the module describes; their indices in `groups`, in the order chosen.
pub fn balanced(
    groups: &[Vec<usize>],
    workloads: usize,
    count: usize,
    rng: &mut Rng,
) -> Vec<usize> {
    let mut order: Vec<usize> = (0..groups.len()).collect();
    rng.shuffle(&mut order);
    let mut jobs = vec![0usize; workloads];
    let mut chosen = Vec::with_capacity(count.min(groups.len()));
    let mut taken = vec![false; groups.len()];
    for _ in 0..count.min(groups.len()) {
        // The rise of the sum of squared job counts: a group of rarely measured workloads
        // first, and of distinct workloads before one that repeats a workload.
        let rise = |g: usize| {
            let mut members = groups[g].clone();
            members.sort_unstable();
            members
                .chunk_by(|a, b| a == b)
                .map(|run| {
                    let (j, m) = (jobs[run[0]], run.len());
                    2 * j * m + m * m
                })
                .sum::<usize>()
        };
        let Some(&next) = order
            .iter()
            .filter(|&&g| !taken[g])
            .min_by_key(|&&g| rise(g))
        else {
            break;
        };
        taken[next] = true;
        for &w in &groups[next] {
            jobs[w] += 1;
        }
        chosen.push(next);
    }
    chosen
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::campaign::multisets;

    #[test]
    fn a_balanced_quarter_of_the_triples_gives_every_workload_as_many_jobs() {
        // Six workloads: 56 triples, a quarter is 14 (42 jobs, 7 per workload).
        let triples = multisets(6, 3);
        let n = GroupBudget::Share(0.25).count(triples.len());
        assert_eq!(n, 14);
        for seed in 0..20 {
            let chosen = balanced(&triples, 6, n, &mut Rng::new(seed));
            assert_eq!(chosen.len(), 14);
            let mut distinct = chosen.clone();
            distinct.sort_unstable();
            distinct.dedup();
            assert_eq!(distinct.len(), 14, "no group twice");
            let mut jobs = [0; 6];
            for &g in &chosen {
                for &w in &triples[g] {
                    jobs[w] += 1;
                }
            }
            let (lo, hi) = (
                jobs.iter().min().unwrap_or(&0),
                jobs.iter().max().unwrap_or(&0),
            );
            assert!(hi - lo <= 1, "seed {seed}: {jobs:?}");
        }
        // Seeds draw different designs.
        let a = balanced(&triples, 6, n, &mut Rng::new(1));
        let b = balanced(&triples, 6, n, &mut Rng::new(2));
        assert_ne!(a, b);
    }

    #[test]
    fn budgets_count_at_least_one_and_at_most_all() {
        assert_eq!(GroupBudget::Share(0.001).count(56), 1);
        assert_eq!(GroupBudget::Share(1.0).count(56), 56);
        assert_eq!(GroupBudget::Groups(100).count(56), 56);
        assert_eq!(GroupBudget::Groups(3).count(56), 3);
        assert_eq!(GroupBudget::Groups(3).count(0), 0);
    }
}
