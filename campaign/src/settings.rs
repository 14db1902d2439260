//! The settings space: every (pair, mode, shares) setting a campaign can measure, named the same
//! way whatever order a dataset or a catalog gives the two workloads in.

use std::collections::BTreeSet;
use std::fmt;

use duet_core::dataset::{Dataset, Mode, Pair};
use serde::{Deserialize, Serialize};

/// One co-location setting: two workloads (`a <= b`, a workload with itself included) on one
/// device in one mode at one pair of shares. A pair in two modes or at three shares is two or
/// three settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Setting {
    pub a: String,
    pub b: String,
    pub gpu: String,
    pub mode: Mode,
    /// The share of `a` (MPS active-thread percentage), `None` where the mode has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share_a: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share_b: Option<f64>,
}

/// A setting as a map key: shares by their bits (a setting is never measured at NaN shares:
/// datasets refuse them).
pub type SettingKey = (String, Mode, String, String, Option<u64>, Option<u64>);

/// The context of a setting: device, mode and shares (what the first round spreads picks over).
pub type Context = (String, Mode, Option<u64>, Option<u64>);

impl Setting {
    /// The setting of `a` next to `b`, with the workloads in canonical order (shares follow
    /// their workloads).
    pub fn new(
        a: &str,
        b: &str,
        gpu: &str,
        mode: Mode,
        share_a: Option<f64>,
        share_b: Option<f64>,
    ) -> Setting {
        let (a, b, share_a, share_b) = if a <= b {
            (a, b, share_a, share_b)
        } else {
            (b, a, share_b, share_a)
        };
        Setting {
            a: a.to_string(),
            b: b.to_string(),
            gpu: gpu.to_string(),
            mode,
            share_a,
            share_b,
        }
    }

    /// The setting a dataset row measured.
    pub fn of(pair: &Pair) -> Setting {
        Setting::new(
            &pair.a,
            &pair.b,
            &pair.gpu,
            pair.mode,
            pair.share_a,
            pair.share_b,
        )
    }

    pub fn key(&self) -> SettingKey {
        (
            self.gpu.clone(),
            self.mode,
            self.a.clone(),
            self.b.clone(),
            self.share_a.map(f64::to_bits),
            self.share_b.map(f64::to_bits),
        )
    }

    pub fn context(&self) -> Context {
        (
            self.gpu.clone(),
            self.mode,
            self.share_a.map(f64::to_bits),
            self.share_b.map(f64::to_bits),
        )
    }

    /// Whether `workload` is one of the two.
    pub fn touches(&self, workload: &str) -> bool {
        self.a == workload || self.b == workload
    }

    /// The other workload of the pair (`workload` itself for a self pair).
    pub fn partner(&self, workload: &str) -> &str {
        if self.a == workload { &self.b } else { &self.a }
    }
}

impl fmt::Display for Setting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} + {} ({} {}", self.a, self.b, self.gpu, self.mode)?;
        if let (Some(x), Some(y)) = (self.share_a, self.share_b) {
            write!(f, " {x}/{y}")?;
        }
        f.write_str(")")
    }
}

/// A setting of one of the datasets a campaign grows: `dataset` indexes the known datasets
/// passed to [`crate::choose`] (always 0 for a campaign that writes one dataset).
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    pub dataset: usize,
    pub setting: Setting,
}

impl Candidate {
    /// Settings of the one dataset a campaign grows (dataset 0).
    pub fn of_one(settings: impl IntoIterator<Item = Setting>) -> Vec<Candidate> {
        settings
            .into_iter()
            .map(|setting| Candidate {
                dataset: 0,
                setting,
            })
            .collect()
    }
}

/// The settings of `grid` not yet `taken`, as candidates of the one dataset a campaign grows.
pub fn open_candidates<'a>(
    grid: &[Setting],
    taken: impl IntoIterator<Item = &'a Setting>,
) -> Vec<Candidate> {
    let taken: BTreeSet<SettingKey> = taken.into_iter().map(Setting::key).collect();
    Candidate::of_one(grid.iter().filter(|s| !taken.contains(&s.key())).cloned())
}

/// Every setting `dataset` holds a row of, in row order.
pub fn of_dataset(dataset: &Dataset) -> Vec<Setting> {
    dataset.pairs.iter().map(Setting::of).collect()
}

/// The settings of a full campaign on `workloads`: every unordered pair, each workload with
/// itself included, in every mode, MPS at each of `shares` (both clients at the same share),
/// the other modes without shares. The same settings `duet profile` measures without a budget.
pub fn grid(workloads: &[String], gpu: &str, modes: &[Mode], shares: &[f64]) -> Vec<Setting> {
    let mut out = Vec::new();
    for (i, a) in workloads.iter().enumerate() {
        for b in &workloads[i..] {
            for &mode in modes {
                for share in shares_of(mode, shares) {
                    out.push(Setting::new(a, b, gpu, mode, share, share));
                }
            }
        }
    }
    out
}

/// The shares a setting in `mode` is measured at: each of `shares` for MPS (both clients at
/// the same share), none for the other modes.
pub fn shares_of(mode: Mode, shares: &[f64]) -> Vec<Option<f64>> {
    if mode == Mode::Mps {
        shares.iter().map(|&s| Some(s)).collect()
    } else {
        vec![None]
    }
}

/// The distinct workloads of `settings`, sorted.
pub fn workloads_of<'a>(settings: impl IntoIterator<Item = &'a Setting>) -> BTreeSet<&'a str> {
    settings
        .into_iter()
        .flat_map(|s| [s.a.as_str(), s.b.as_str()])
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_setting_is_named_the_same_in_either_order() {
        let x = Setting::new("m", "c", "v100", Mode::Mps, Some(30.0), Some(70.0));
        let y = Setting::new("c", "m", "v100", Mode::Mps, Some(70.0), Some(30.0));
        assert_eq!(x, y);
        assert_eq!(x.a, "c");
        assert_eq!(x.share_a, Some(70.0));
        assert_eq!(x.key(), y.key());
        assert_eq!(x.partner("c"), "m");
        assert_eq!(x.to_string(), "c + m (v100 mps 70/30)");
    }

    #[test]
    fn the_grid_counts_pairs_modes_and_shares() {
        let w: Vec<String> = ["a", "b", "c"].iter().map(|s| s.to_string()).collect();
        // 6 unordered pairs (3 with themselves), time-slicing once and MPS at two shares.
        let g = grid(&w, "h200", &[Mode::Timeslice, Mode::Mps], &[50.0, 100.0]);
        assert_eq!(g.len(), 6 * 3);
        let keys: BTreeSet<SettingKey> = g.iter().map(Setting::key).collect();
        assert_eq!(keys.len(), g.len());
        assert_eq!(workloads_of(&g).len(), 3);
    }
}
