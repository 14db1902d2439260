//! Splits a dataset's groups in two, for training with a share of them and scoring on the rest
//! (BENCHMARKS.md, "Groups of three or more"): both new datasets keep every solo and every pair;
//! `<train>` holds `<share>` of the groups (drawn with `<seed>`), `<test>` the others.
//!
//! Usage: split_groups <dataset> <share, 0..1> <seed> <train out> <test out>

use std::path::PathBuf;

use duet_core::dataset::Dataset;
use duet_core::rng::Rng;

const USAGE: &str = "usage: split_groups <dataset> <share, 0..1> <seed> <train out> <test out>";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [dataset, share, seed, train, test] = args.as_slice() else {
        return Err(USAGE.into());
    };
    let share: f64 = share.parse().map_err(|_| USAGE)?;
    if !(0.0..=1.0).contains(&share) {
        return Err(format!("{USAGE}: the share {share} is outside 0..1").into());
    }
    let seed: u64 = seed.parse().map_err(|_| USAGE)?;
    let d = Dataset::read(&PathBuf::from(dataset))?;
    let mut order: Vec<usize> = (0..d.groups.len()).collect();
    Rng::new(seed).shuffle(&mut order);
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss
    )]
    let kept = (d.groups.len() as f64 * share).round() as usize;
    let (mut first, mut rest) = (order[..kept].to_vec(), order[kept..].to_vec());
    first.sort_unstable();
    rest.sort_unstable();
    for (out, part, what) in [(train, first, "train"), (test, rest, "test")] {
        let mut part_set = d.clone();
        part_set.groups = part.iter().map(|&g| d.groups[g].clone()).collect();
        part_set.meta.name = format!("{}-{what}", d.meta.name);
        part_set.meta.modes = duet_core::dataset::modes_of(&part_set.pairs, &part_set.groups);
        part_set.write(&PathBuf::from(out))?;
        println!("{out}: {} groups", part_set.groups.len());
    }
    Ok(())
}
