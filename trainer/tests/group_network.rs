//! The network that learns measured groups, on the committed triples: trained with every pair
//! and the groups, one row per job (its spec one column wider than the pairs' network's), it
//! answers each held-out fold's groups, and a size with fewer than `MIN_NETWORK_GROUPS`
//! measured groups is left to the composition whatever the folds say (its p90 would rest on
//! too few groups), unless `--group-network always` forces it.

use std::path::Path;

use duet_core::dataset::Dataset;
use duet_model::network::{GroupNetwork, TrainConfig};
use duet_trainer::corpus::Corpus;
use duet_trainer::groups::{MIN_NETWORK_GROUPS, calibrate, network};

fn triples(keep: usize) -> Corpus {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../datasets/cpu-dev2c-triples");
    let mut dataset = Dataset::read(&dir).expect("the committed triples");
    dataset.groups.truncate(keep);
    Corpus::new(vec![dataset])
}

fn quick(group_network: GroupNetwork) -> TrainConfig {
    TrainConfig {
        hidden: vec![16, 16],
        max_epochs: 40,
        patience: 40,
        ensemble: 1,
        group_network,
        ..TrainConfig::default()
    }
}

#[test]
fn too_few_groups_stay_composed_unless_the_network_is_forced() {
    let corpus = triples(MIN_NETWORK_GROUPS - 6);
    let all: Vec<usize> = (0..corpus.examples.len()).collect();
    let config = quick(GroupNetwork::Auto);
    let pairs = corpus.fit(&all, &config, 1).expect("pairs");
    assert!(!pairs.spec.groups);
    let composed = calibrate(&corpus, &pairs, config.seed);
    let (learned, sizes) = network(&corpus, &pairs, &composed, &config, 1).expect("network");
    assert!(learned.is_none());
    assert_eq!(sizes.len(), 1);
    assert_eq!(sizes[0].groups, MIN_NETWORK_GROUPS - 6);
    assert!(!sizes[0].chosen, "{:?}", sizes[0]);
    assert!(sizes[0].mape_network > 0.0 && sizes[0].mape_network.is_finite());

    let forced = quick(GroupNetwork::Always);
    let (learned, sizes) = network(&corpus, &pairs, &composed, &forced, 1).expect("network");
    assert!(sizes[0].chosen);
    let learned = learned.expect("the network, forced");
    assert!(learned.spec.groups);
    assert_eq!(learned.spec.pair_width(), pairs.spec.pair_width() + 1);

    let never = quick(GroupNetwork::Never);
    let (learned, sizes) = network(&corpus, &pairs, &composed, &never, 1).expect("network");
    assert!(learned.is_none() && sizes.is_empty());
}
