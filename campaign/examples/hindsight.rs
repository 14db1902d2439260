//! How far any choice of settings could go: for each seed, a random test set (20%) of a
//! complete dataset, the full data's fit on every other setting, and `DRAWS` random subsets of
//! a share of those settings, each fitted with the same recipe (the replay's uncalibrated
//! fit, every solo run known). Printed per seed: the full data's test MAPE; the subsets'
//! test MAPE (mean, sd, smallest); and the test MAPE of the subset a hindsight oracle would
//! have picked, the one with the smallest MAPE on the settings it left out of the pool (what
//! no campaign can know before measuring them). BENCHMARKS.md, "Budgeted campaigns".
//!
//! Usage: `hindsight DATASET [SHARE=0.25] [DRAWS=40] [SEEDS=7,8,9]`, built by `cargo test
//! --workspace --no-run` (so its features are the workspace's) as
//! `$CARGO_TARGET_DIR/debug/examples/hindsight`.

use std::collections::BTreeSet;
use std::path::PathBuf;

use duet_campaign::audit::{draw, errors};
use duet_campaign::scoring::Scorer;
use duet_campaign::settings::{Candidate, Setting};
use duet_core::dataset::Dataset;
use duet_model::accuracy::{mean_of, sd_of};
use duet_model::network::TrainConfig;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(path) = args.first() else {
        return Err("usage: hindsight DATASET [SHARE=0.25] [DRAWS=40] [SEEDS=7,8,9]".into());
    };
    let share: f64 = args.get(1).map_or(Ok(0.25), |s| s.parse())?;
    let draws: usize = args.get(2).map_or(Ok(40), |s| s.parse())?;
    let seeds: Vec<u64> = args
        .get(3)
        .map_or("7,8,9", String::as_str)
        .split(',')
        .map(str::parse)
        .collect::<Result<_, _>>()?;
    let data = Dataset::read(&PathBuf::from(path))?;
    let n = data.pairs.len();
    let workers = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    println!("{path}: {n} settings, share {share}, {draws} draws per seed");
    let mut ratios = (Vec::new(), Vec::new(), Vec::new());
    for &seed in &seeds {
        let test = draw(n, n / 5, seed);
        let in_test: BTreeSet<usize> = test.iter().copied().collect();
        let selectable: Vec<usize> = (0..n).filter(|i| !in_test.contains(i)).collect();
        let config = TrainConfig {
            seed,
            ..TrainConfig::default()
        };
        let full = mape(&data, &selectable, &test, &config, workers)?;
        #[allow(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            clippy::cast_precision_loss
        )]
        let k = (share * selectable.len() as f64).round() as usize;
        let mut outcomes = Vec::with_capacity(draws);
        for d in 0..draws {
            let picks: Vec<usize> = draw(selectable.len(), k, seed ^ (0xD1CE << 16) ^ d as u64)
                .into_iter()
                .map(|j| selectable[j])
                .collect();
            let chosen: BTreeSet<usize> = picks.iter().copied().collect();
            let rest: Vec<usize> = selectable
                .iter()
                .copied()
                .filter(|i| !chosen.contains(i))
                .collect();
            let scorer = fit(&data, &picks, &config, workers)?;
            outcomes.push((score(&data, &scorer, &rest), score(&data, &scorer, &test)));
        }
        let tests: Vec<f64> = outcomes.iter().map(|o| o.1).collect();
        let smallest = tests.iter().copied().fold(f64::INFINITY, f64::min);
        let hindsight = outcomes
            .iter()
            .min_by(|a, b| a.0.total_cmp(&b.0))
            .map_or(f64::NAN, |o| o.1);
        println!(
            "seed {seed}: full data {:.2}%; {k} settings: mean {:.2}% (sd {:.2}), smallest {:.2}% \
             ({:.2}x), hindsight's pick {:.2}% ({:.2}x)",
            100.0 * full,
            100.0 * mean_of(&tests),
            100.0 * sd_of(&tests),
            100.0 * smallest,
            smallest / full,
            100.0 * hindsight,
            hindsight / full
        );
        ratios.0.push(mean_of(&tests) / full);
        ratios.1.push(smallest / full);
        ratios.2.push(hindsight / full);
    }
    println!(
        "mean over seeds, ratio to the full data: random {:.2}x, smallest {:.2}x, hindsight's \
         pick {:.2}x",
        mean_of(&ratios.0),
        mean_of(&ratios.1),
        mean_of(&ratios.2)
    );
    Ok(())
}

/// The fit on every solo run and the pairs `rows` of `data`.
fn fit(
    data: &Dataset,
    rows: &[usize],
    config: &TrainConfig,
    workers: usize,
) -> Result<Scorer, Box<dyn std::error::Error>> {
    let mut rows = rows.to_vec();
    rows.sort_unstable();
    let known = data.with_pairs(rows.iter().map(|&r| data.pairs[r].clone()).collect());
    Scorer::fit(&[known], &[], config, false, workers)?.ok_or_else(|| "too few settings".into())
}

/// MAPE of speed of `scorer` on the settings `rows` of `data` (the audit's errors, every
/// feasible direction of every setting, averaged).
fn score(data: &Dataset, scorer: &Scorer, rows: &[usize]) -> f64 {
    let candidates = Candidate::of_one(rows.iter().map(|&r| Setting::of(&data.pairs[r])));
    mean_of(&errors(scorer, std::slice::from_ref(data), &candidates).concat())
}

/// Test MAPE of the fit on `train`.
fn mape(
    data: &Dataset,
    train: &[usize],
    test: &[usize],
    config: &TrainConfig,
    workers: usize,
) -> Result<f64, Box<dyn std::error::Error>> {
    Ok(score(data, &fit(data, train, config, workers)?, test))
}
