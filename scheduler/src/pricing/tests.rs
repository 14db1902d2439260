//! The pricing round's tests: tables of predictions, and what the round decides on them.

use super::*;

/// A predictor from a fixed table: (a, b) -> (speed a, speed b, safe a, safe b).
#[derive(Debug)]
struct Table(HashMap<(String, String), (f64, f64, f64, f64)>, usize);

impl Predictor for Table {
    fn describe(&self) -> String {
        "table".into()
    }
    fn predict(&mut self, _gpu: &str, queries: &[Query<'_>]) -> Result<Vec<Outlook>> {
        self.1 += 1;
        Ok(queries
            .iter()
            .map(|q| {
                let (a, b, sa, sb) = self.0[&(q.a.to_string(), q.b.to_string())];
                Outlook {
                    feasible: true,
                    speed_a: a,
                    speed_b: b,
                    safe_speed_a: sa,
                    safe_speed_b: sb,
                }
            })
            .collect())
    }
}

fn table(rows: &[(&str, &str, f64, f64, f64, f64)]) -> Table {
    Table(
        rows.iter()
            .map(|(a, b, x, y, sx, sy)| ((a.to_string(), b.to_string()), (*x, *y, *sx, *sy)))
            .collect(),
        0,
    )
}

fn job(id: usize, workload: &str, weight: f64, slo: Option<f64>) -> Waiting {
    Waiting {
        id,
        workload: workload.into(),
        gpus: 1,
        weight,
        priority: weight,
        slo,
        memory_mib: None,
    }
}

fn resident(gpu: usize, workload: &str) -> Resident {
    Resident {
        gpu,
        mode: None,
        workload: workload.into(),
        weight: 1.0,
        slo: None,
        memory_mib: None,
        share: None,
    }
}

const SPACE: Sharing = Sharing {
    mode: Mode::Space,
    share_a: None,
    share_b: None,
};

/// One round in space sharing with the default configuration; its decisions.
fn decide(
    p: &mut dyn Predictor,
    waiting: &[Waiting],
    free: &[FreeNode],
    residents: &[Resident],
) -> Vec<Decision> {
    round(
        "g",
        waiting,
        free,
        residents,
        &[SPACE],
        p,
        &PricingConfig::default(),
    )
    .expect("round")
    .0
}

#[test]
fn free_gpus_go_first_and_then_the_pairs_that_gain_the_most() {
    // One free GPU, two residents; three waiting jobs.
    let mut p = table(&[
        ("x", "r", 0.9, 0.9, 0.8, 0.8), // gains 0.8
        ("y", "r", 0.5, 0.4, 0.4, 0.3), // loses: never paired
        ("z", "r", 0.7, 0.8, 0.6, 0.7), // gains 0.5
    ]);
    let waiting = [
        job(0, "y", 1.0, None),
        job(1, "x", 1.0, None),
        job(2, "z", 1.0, None),
    ];
    let (decisions, stats) = round(
        "g",
        &waiting,
        &[FreeNode { gpus: vec![7] }],
        &[resident(3, "r"), resident(4, "r")],
        &[SPACE],
        &mut p,
        &PricingConfig::default(),
    )
    .expect("test input");
    assert_eq!(p.1, 1, "one predictor call per round");
    assert_eq!(stats.queries, 3);
    // y can only use the free GPU; x and z take the two residents' GPUs.
    let of = |id| {
        decisions
            .iter()
            .find(|d| d.job == id)
            .map(|d| d.placement.clone())
    };
    assert_eq!(of(0), Some(Placement::Whole { gpus: vec![7] }));
    assert!(matches!(of(1), Some(Placement::Beside { .. })));
    assert!(matches!(of(2), Some(Placement::Beside { .. })));
    let gpus: BTreeSet<usize> = decisions.iter().map(|d| d.placement.gpus()[0]).collect();
    assert_eq!(gpus.len(), 3, "no GPU given twice: {decisions:?}");
}

#[test]
fn the_heavier_job_wins_a_contested_gpu_and_the_other_waits() {
    let mut p = table(&[]);
    let waiting = [job(0, "a", 1.0, None), job(1, "b", 2.0, None)];
    let decisions = decide(&mut p, &waiting, &[FreeNode { gpus: vec![0] }], &[]);
    assert_eq!(decisions.len(), 1);
    assert_eq!(decisions[0].job, 1);
}

#[test]
fn waiting_longer_never_makes_a_losing_pair_worth_forming() {
    // Together the two do 0.8 of one job's work: a loss at any priority.
    let mut p = table(&[("w", "r", 0.4, 0.4, 0.4, 0.4)]);
    let mut aged = job(0, "w", 10.0, None);
    aged.priority = 1.0;
    let decisions = decide(&mut p, &[aged.clone()], &[], &[resident(0, "r")]);
    assert!(decisions.is_empty(), "{decisions:?}");
    // A pair that gains is formed, and the aged job outbids a fresh one for it.
    let mut p = table(&[("w", "r", 0.8, 0.8, 0.8, 0.8)]);
    let decisions = decide(
        &mut p,
        &[job(1, "w", 1.0, None), aged],
        &[],
        &[resident(0, "r")],
    );
    assert_eq!(decisions.len(), 1);
    assert_eq!(decisions[0].job, 0);
}

#[test]
fn a_pair_is_formed_only_where_the_wait_it_saves_outweighs_the_slowdown() {
    // Paired, a typical job of 600 s costs 600 * ((2 - 0.8) / 0.8 - 1) = 300 s.
    let mut p = table(&[("w", "r", 0.8, 0.8, 0.8, 0.8)]);
    let config = |releases_per_s| PricingConfig {
        queue: Some(Queue {
            releases_per_s,
            typical_runtime: 600.0,
        }),
        ..PricingConfig::default()
    };
    // First in line, one GPU free every 100 s: the wait (100 s) is shorter, so it waits.
    // One every 1,000 s: the wait is longer, so it pairs.
    for (rate, pairs) in [(1.0 / 100.0, 0), (1.0 / 1000.0, 1)] {
        let (decisions, _) = round(
            "g",
            &[job(0, "w", 1.0, None)],
            &[],
            &[resident(0, "r")],
            &[SPACE],
            &mut p,
            &config(rate),
        )
        .expect("round");
        assert_eq!(decisions.len(), pairs, "{rate}: {decisions:?}");
    }
    // Far down the line (400th), even the faster rate means a long wait: it pairs.
    let mut line: Vec<Waiting> = (0..400).map(|i| job(i, "x", 1.0, None)).collect();
    line.push(job(400, "w", 1.0, None));
    let mut p = table(&[
        ("w", "r", 0.8, 0.8, 0.8, 0.8),
        ("x", "r", 0.1, 0.1, 0.1, 0.1),
    ]);
    let (decisions, _) = round(
        "g",
        &line,
        &[],
        &[resident(0, "r")],
        &[SPACE],
        &mut p,
        &config(1.0 / 100.0),
    )
    .expect("round");
    assert_eq!(decisions.len(), 1);
    assert_eq!(decisions[0].job, 400);
}

#[test]
fn a_conservative_prediction_below_the_objective_is_never_picked() {
    // The mean speed keeps the objective 0.7, the p10 speed does not.
    let mut p = table(&[("i", "r", 0.9, 0.95, 0.65, 0.9)]);
    let waiting = [job(0, "i", 2.0, Some(0.7))];
    let decisions = decide(&mut p, &waiting, &[], &[resident(0, "r")]);
    assert!(decisions.is_empty(), "{decisions:?}");
    // The resident's objective counts too.
    let mut p = table(&[("t", "r", 0.9, 0.9, 0.9, 0.6)]);
    let mut r = resident(0, "r");
    r.slo = Some(0.7);
    let decisions = decide(&mut p, &[job(0, "t", 1.0, None)], &[], &[r]);
    assert!(decisions.is_empty(), "{decisions:?}");
}

/// Per-sharing predictions: the newcomer's MPS share decides the speeds.
#[derive(Debug)]
struct ByShare;

impl Predictor for ByShare {
    fn describe(&self) -> String {
        "by share".into()
    }
    fn predict(&mut self, _gpu: &str, queries: &[Query<'_>]) -> Result<Vec<Outlook>> {
        Ok(queries
            .iter()
            .map(|q| {
                let share = q.sharing.share_a.unwrap_or(50.0) / 100.0;
                // The newcomer gains with its share, the resident loses a little less.
                let (a, b) = (0.2 + 0.7 * share, 1.0 - 0.5 * share);
                Outlook {
                    feasible: true,
                    speed_a: a,
                    speed_b: b,
                    safe_speed_a: a - 0.05,
                    safe_speed_b: b - 0.05,
                }
            })
            .collect())
    }
}

#[test]
fn the_share_that_adds_the_most_value_is_chosen_within_the_objective() {
    let mps = |a: f64, b: f64| Sharing {
        mode: Mode::Mps,
        share_a: Some(a),
        share_b: Some(b),
    };
    let sharings = [mps(20.0, 80.0), mps(50.0, 50.0), mps(80.0, 20.0)];
    // Values: 20% -> 0.34 - 0.1 = 0.24; 50% -> 0.55 - 0.25 = 0.30; 80% -> 0.76 - 0.4 = 0.36.
    let (decisions, _) = round(
        "g",
        &[job(0, "a", 1.0, None)],
        &[],
        &[resident(5, "r")],
        &sharings,
        &mut ByShare,
        &PricingConfig::default(),
    )
    .expect("round");
    let Placement::Beside { gpu, sharing, .. } = &decisions[0].placement else {
        panic!("{decisions:?}")
    };
    assert_eq!((*gpu, sharing.share_a), (5, Some(80.0)));
    // A resident with an objective of 0.6 keeps at least 0.6 at p10: 80% (0.55) is out.
    let mut r = resident(5, "r");
    r.slo = Some(0.6);
    let (decisions, _) = round(
        "g",
        &[job(0, "a", 1.0, None)],
        &[],
        &[r],
        &sharings,
        &mut ByShare,
        &PricingConfig::default(),
    )
    .expect("round");
    let Placement::Beside { sharing, .. } = &decisions[0].placement else {
        panic!("{decisions:?}")
    };
    assert_eq!(sharing.share_a, Some(50.0));
}

#[test]
fn a_pair_whose_footprints_do_not_fit_the_gpu_is_never_offered() {
    let mut p = table(&[("w", "r", 0.9, 0.9, 0.9, 0.9)]);
    let mut newcomer = job(0, "w", 1.0, None);
    newcomer.memory_mib = Some(50_000.0);
    let mut r = resident(0, "r");
    r.memory_mib = Some(40_000.0);
    let config = |cap| PricingConfig {
        gpu_memory_mib: Some(cap),
        ..PricingConfig::default()
    };
    for (capacity, pairs) in [(80_000.0, 0), (96_000.0, 1)] {
        let (decisions, _) = round(
            "g",
            std::slice::from_ref(&newcomer),
            &[],
            std::slice::from_ref(&r),
            &[SPACE],
            &mut p,
            &config(capacity),
        )
        .expect("round");
        assert_eq!(decisions.len(), pairs, "{capacity}: {decisions:?}");
    }
}

#[test]
fn jobs_of_several_gpus_take_whole_gpus_on_one_node() {
    let mut p = table(&[]);
    let mut big = job(0, "a", 1.0, None);
    big.gpus = 4;
    let (decisions, _) = round(
        "g",
        &[big, job(1, "b", 1.0, None)],
        &[
            FreeNode { gpus: vec![0, 1] },
            FreeNode {
                gpus: vec![2, 3, 4, 5],
            },
        ],
        &[],
        &[SPACE],
        &mut p,
        &PricingConfig::default(),
    )
    .expect("test input");
    assert_eq!(
        decisions[0].placement,
        Placement::Whole {
            gpus: vec![2, 3, 4, 5]
        }
    );
    assert_eq!(decisions.len(), 2);
}

/// Two residents of `workload` sharing `gpu` in space sharing.
fn pair_on(gpu: usize, workload: &str) -> [Resident; 2] {
    let mut r = resident(gpu, workload);
    r.mode = Some(Mode::Space);
    [r.clone(), r]
}

fn up_to(gpu_jobs: usize) -> PricingConfig {
    PricingConfig {
        gpu_jobs,
        ..PricingConfig::default()
    }
}

#[test]
fn a_third_job_joins_a_shared_gpu_only_where_the_gpu_may_hold_three() {
    // x beside r: 0.9 each; r beside r: 0.8 each. Composed (excess), x with the two r's runs
    // at 1 / (1 + 2 (1/0.9 - 1)) = 0.818 and each r at 1 / (1 + 1/9 + 1/4) = 0.735.
    let rows = [
        ("x", "r", 0.9, 0.9, 0.9, 0.9),
        ("r", "r", 0.8, 0.8, 0.8, 0.8),
    ];
    let residents = pair_on(4, "r");
    let waiting = [job(0, "x", 1.0, None)];
    let run = |config: &PricingConfig| {
        let mut p = table(&rows);
        round("g", &waiting, &[], &residents, &[SPACE], &mut p, config).expect("round")
    };
    let (decisions, stats) = run(&PricingConfig::default());
    assert!(decisions.is_empty(), "two jobs fill a GPU by default");
    assert_eq!(stats.queries, 0);
    let (decisions, stats) = run(&up_to(3));
    // One query for the pair as it runs, one for the group with x.
    assert_eq!(stats.queries, 2);
    let [d] = &decisions[..] else {
        panic!("{decisions:?}")
    };
    let Placement::Join {
        gpu,
        mode,
        share,
        speed,
        resident_speeds,
        value,
    } = &d.placement
    else {
        panic!("{d:?}")
    };
    assert_eq!((*gpu, *mode, *share), (4, Mode::Space, None));
    assert!((speed - 1.0 / (1.0 + 2.0 / 9.0)).abs() < 1e-9, "{speed}");
    let indices: BTreeSet<usize> = resident_speeds.iter().map(|(i, _)| *i).collect();
    assert_eq!(indices, BTreeSet::from([0, 1]));
    let each = 1.0 / (1.0 + 1.0 / 9.0 + 0.25);
    for (_, s) in resident_speeds {
        assert!((s - each).abs() < 1e-9, "{s}");
    }
    // Its weighted speed less what each resident loses against the pair as it runs (0.8).
    assert!(
        (value - (speed - 2.0 * (0.8 - each))).abs() < 1e-9,
        "{value}"
    );
    // A GPU already holding three takes nobody at three.
    let mut three = residents.to_vec();
    three.push(three[0].clone());
    let mut p = table(&rows);
    let (decisions, _) =
        round("g", &waiting, &[], &three, &[SPACE], &mut p, &up_to(3)).expect("round");
    assert!(decisions.is_empty(), "{decisions:?}");
}

#[test]
fn a_newcomer_joins_only_where_every_resident_keeps_its_objective_and_the_group_gains() {
    let rows = [
        ("x", "r", 0.9, 0.9, 0.9, 0.9),
        ("r", "r", 0.8, 0.8, 0.8, 0.8),
    ];
    // Each resident would run at 0.735 at p10: an objective of 0.75 refuses the group.
    let [a, mut b] = pair_on(0, "r");
    b.slo = Some(0.75);
    let mut p = table(&rows);
    let (decisions, _) = round(
        "g",
        &[job(0, "x", 1.0, None)],
        &[],
        &[a, b],
        &[SPACE],
        &mut p,
        &up_to(4),
    )
    .expect("round");
    assert!(decisions.is_empty(), "{decisions:?}");
    // A newcomer that slows both residents more than it gains is refused too: y at 0.3 beside
    // r, r at 0.4 beside y.
    let rows = [
        ("y", "r", 0.3, 0.4, 0.3, 0.4),
        ("r", "r", 0.8, 0.8, 0.8, 0.8),
    ];
    let members = pair_on(0, "r");
    let mut p = table(&rows);
    let now = p
        .predict_groups(
            "g",
            &[GroupQuery {
                jobs: vec!["r", "r"],
                mode: Mode::Space,
                shares: None,
            }],
        )
        .expect("now");
    let with = p
        .predict_groups(
            "g",
            &[GroupQuery {
                jobs: vec!["y", "r", "r"],
                mode: Mode::Space,
                shares: None,
            }],
        )
        .expect("with");
    let refs: Vec<&Resident> = members.iter().collect();
    let e = value_among(
        &job(0, "y", 1.0, None),
        &refs,
        &now[0],
        &with[0],
        0,
        &up_to(3),
    )
    .expect_err("must be refused");
    assert!(matches!(e, Refusal::Loses { .. }), "{e}");
    // Footprints add up over the whole group.
    let mut newcomer = job(0, "x", 1.0, None);
    newcomer.memory_mib = Some(30_000.0);
    let mut fat = pair_on(0, "r");
    for r in &mut fat {
        r.memory_mib = Some(30_000.0);
    }
    let refs: Vec<&Resident> = fat.iter().collect();
    let config = PricingConfig {
        gpu_memory_mib: Some(80_000.0),
        ..up_to(3)
    };
    let mut p = table(&[
        ("x", "r", 0.9, 0.9, 0.9, 0.9),
        ("r", "r", 0.8, 0.8, 0.8, 0.8),
    ]);
    let asked = [
        GroupQuery {
            jobs: vec!["r", "r"],
            mode: Mode::Space,
            shares: None,
        },
        GroupQuery {
            jobs: vec!["x", "r", "r"],
            mode: Mode::Space,
            shares: None,
        },
    ];
    let o = p.predict_groups("g", &asked).expect("groups");
    let e = value_among(&newcomer, &refs, &o[0], &o[1], 0, &config).expect_err("must fail");
    assert_eq!(
        e,
        Refusal::Memory {
            need_mib: 90_000.0,
            capacity_mib: 80_000.0
        }
    );
}

#[test]
fn under_mps_a_newcomer_joins_with_its_own_share_and_the_residents_keep_theirs() {
    #[derive(Debug, Default)]
    struct Recorder(Vec<(Vec<String>, Option<Vec<f64>>)>);
    impl Predictor for Recorder {
        fn describe(&self) -> String {
            "recorder".into()
        }
        fn predict(&mut self, _gpu: &str, queries: &[Query<'_>]) -> Result<Vec<Outlook>> {
            Ok(queries
                .iter()
                .map(|_| Outlook {
                    feasible: true,
                    speed_a: 0.9,
                    speed_b: 0.9,
                    safe_speed_a: 0.9,
                    safe_speed_b: 0.9,
                })
                .collect())
        }
        fn predict_groups(
            &mut self,
            gpu: &str,
            groups: &[GroupQuery<'_>],
        ) -> Result<Vec<GroupOutlook>> {
            self.0.extend(groups.iter().map(|g| {
                (
                    g.jobs.iter().map(|j| (*j).to_string()).collect(),
                    g.shares.clone(),
                )
            }));
            crate::predictor::groups_from_pairs(self, gpu, groups)
        }
    }
    let mps = |a: f64, b: f64| Sharing {
        mode: Mode::Mps,
        share_a: Some(a),
        share_b: Some(b),
    };
    let mut residents = pair_on(2, "r");
    residents[0].mode = Some(Mode::Mps);
    residents[1].mode = Some(Mode::Mps);
    residents[0].share = Some(30.0);
    residents[1].share = Some(40.0);
    let mut p = Recorder::default();
    let (decisions, _) = round(
        "g",
        &[job(0, "x", 1.0, None)],
        &[],
        &residents,
        // Space sharing is not how this GPU runs: never offered to join it.
        &[mps(20.0, 80.0), mps(20.0, 50.0), SPACE],
        &mut p,
        &up_to(3),
    )
    .expect("round");
    let asked: Vec<(Vec<String>, Option<Vec<f64>>)> = p.0;
    let names = |v: &[&str]| v.iter().map(|s| (*s).to_string()).collect::<Vec<_>>();
    assert_eq!(
        asked,
        vec![
            (names(&["r", "r"]), Some(vec![30.0, 40.0])),
            (names(&["x", "r", "r"]), Some(vec![20.0, 30.0, 40.0])),
        ],
        "one group per newcomer share, the residents' shares kept"
    );
    let [d] = &decisions[..] else {
        panic!("{decisions:?}")
    };
    assert!(
        matches!(
            d.placement,
            Placement::Join {
                mode: Mode::Mps,
                share: Some(20.0),
                ..
            }
        ),
        "{d:?}"
    );
    // Residents whose shares are unknown are not priced under MPS.
    residents[1].share = None;
    let mut p = Recorder::default();
    let (decisions, _) = round(
        "g",
        &[job(0, "x", 1.0, None)],
        &[],
        &residents,
        &[mps(20.0, 80.0)],
        &mut p,
        &up_to(3),
    )
    .expect("round");
    assert!(decisions.is_empty() && p.0.is_empty(), "{decisions:?}");
}

/// A GPU's residents share it under the mode of those placed to share it; the one placed alone
/// first shares it under theirs; two alone, or two modes, share under none.
#[test]
fn residents_share_under_the_mode_of_those_that_joined() {
    let with = |modes: &[Option<Mode>]| -> Option<Mode> {
        let residents: Vec<Resident> = modes
            .iter()
            .map(|m| Resident {
                mode: *m,
                ..resident(0, "a")
            })
            .collect();
        shared_mode(&residents)
    };
    assert_eq!(
        with(&[Some(Mode::Space), Some(Mode::Space)]),
        Some(Mode::Space)
    );
    assert_eq!(with(&[None, Some(Mode::Mps)]), Some(Mode::Mps));
    assert_eq!(
        with(&[Some(Mode::Mps), None, Some(Mode::Mps)]),
        Some(Mode::Mps)
    );
    assert_eq!(with(&[None]), None);
    assert_eq!(with(&[None, None, Some(Mode::Space)]), None);
    assert_eq!(with(&[Some(Mode::Space), Some(Mode::Mps)]), None);
    assert_eq!(with(&[None, Some(Mode::Space), Some(Mode::Mps)]), None);
}
