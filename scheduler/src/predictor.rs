//! Where the pricing loop gets its slowdowns: the `Predictor` trait and its three sources, the
//! duet server over HTTP, the same model in process, and the measured pairs and groups of a
//! dataset (the oracle, which the simulator also uses as ground truth).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::time::Duration;

use anyhow::{Result, anyhow, bail};
use duet_core::api::{
    Features, GroupPrediction, GroupQuery as ApiGroup, JobRef, PairQuery, PredictRequest,
};
use duet_core::dataset::{Dataset, Mode, Status, speed};
pub use duet_model::EngineKind;
use duet_model::group;

use crate::client::PredictClient;

/// How two jobs share a GPU: the mode and each one's MPS share (percent), `None` where the mode
/// has no shares.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sharing {
    pub mode: Mode,
    pub share_a: Option<f64>,
    pub share_b: Option<f64>,
}

impl Sharing {
    /// The same sharing seen from the other job.
    pub fn mirrored(self) -> Sharing {
        Sharing {
            mode: self.mode,
            share_a: self.share_b,
            share_b: self.share_a,
        }
    }

    /// A hashable key (shares by their bits).
    pub fn key(self) -> SharingKey {
        (
            self.mode,
            self.share_a.map(f64::to_bits),
            self.share_b.map(f64::to_bits),
        )
    }

    /// The compute share of `a`: its MPS share, or half the GPU where the mode has none.
    pub fn compute_a(self) -> f64 {
        self.share_a.map_or(0.5, |s| s / 100.0)
    }
}

/// One candidate co-location: workload `a` next to workload `b`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Query<'a> {
    pub a: &'a str,
    pub b: &'a str,
    pub sharing: Sharing,
}

/// What a predictor expects of a pair.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Outlook {
    pub feasible: bool,
    /// Normalised throughputs (1 = as fast as alone).
    pub speed_a: f64,
    pub speed_b: f64,
    /// Conservative speeds: the p10 speed, `1 / p90 slowdown`.
    pub safe_speed_a: f64,
    pub safe_speed_b: f64,
}

/// One candidate group of two or more jobs on one GPU under `mode`, with each job's MPS share
/// in the order of `jobs` (`None` where the mode has no shares).
#[derive(Debug, Clone, PartialEq)]
pub struct GroupQuery<'a> {
    pub jobs: Vec<&'a str>,
    pub mode: Mode,
    pub shares: Option<Vec<f64>>,
}

impl GroupQuery<'_> {
    /// Job `k`'s MPS share.
    pub fn share(&self, k: usize) -> Option<f64> {
        self.shares.as_ref().and_then(|s| s.get(k).copied())
    }

    /// The sharing of jobs `i` and `j` of the group as a pair.
    pub fn sharing(&self, i: usize, j: usize) -> Sharing {
        Sharing {
            mode: self.mode,
            share_a: self.share(i),
            share_b: self.share(j),
        }
    }

    /// The jobs' positions sorted by (workload, share): the order of [`GroupQuery::key`].
    fn sorted(&self) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.jobs.len()).collect();
        order.sort_by(|&x, &y| {
            (self.jobs[x], self.share(x).map(f64::to_bits))
                .cmp(&(self.jobs[y], self.share(y).map(f64::to_bits)))
        });
        order
    }

    /// The same for every order of the jobs: mode and the sorted (workload, share) multiset.
    pub fn key(&self) -> GroupKey {
        let jobs = self
            .sorted()
            .into_iter()
            .map(|k| (self.jobs[k].to_string(), self.share(k).map(f64::to_bits)))
            .collect();
        (self.mode, jobs)
    }
}

/// Where the simulator's truth for a group comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Truth {
    /// The dataset measured this group (or pair).
    Measured,
    /// The dataset has no such group: composed from its measured pairs by the rule duet's model
    /// answers groups with, so a model's figure rather than a measurement.
    Composed,
}

/// A group of jobs as a hashable key, the same for every order: the mode and the sorted
/// (workload, share bits) multiset.
pub type GroupKey = (Mode, Vec<(String, Option<u64>)>);

/// What a predictor expects of a group: each job's speed and conservative (p10) speed, in the
/// order of the query's jobs.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupOutlook {
    pub feasible: bool,
    pub speeds: Vec<f64>,
    pub safe_speeds: Vec<f64>,
}

impl GroupOutlook {
    /// The outlook of a pair as a group of two.
    pub fn of_pair(o: &Outlook) -> GroupOutlook {
        GroupOutlook {
            feasible: o.feasible,
            speeds: vec![o.speed_a, o.speed_b],
            safe_speeds: vec![o.safe_speed_a, o.safe_speed_b],
        }
    }

    /// A group from the outlooks of its pairs in `duet_model::group::pairs_of` order, composed
    /// by the rule the server answers groups with (each co-runner's excess slowdown added).
    pub fn composed(size: usize, pairs: &[Outlook]) -> GroupOutlook {
        let mut speeds: Vec<Vec<f64>> = vec![Vec::new(); size];
        let mut safe: Vec<Vec<f64>> = vec![Vec::new(); size];
        for (&(i, j), o) in group::pairs_of(size).iter().zip(pairs) {
            speeds[i].push(o.speed_a);
            speeds[j].push(o.speed_b);
            safe[i].push(o.safe_speed_a);
            safe[j].push(o.safe_speed_b);
        }
        let feasible = pairs.len() == group::pairs_in(size)
            && pairs
                .iter()
                .all(|o| o.feasible && o.speed_a > 0.0 && o.speed_b > 0.0);
        if !feasible {
            return GroupOutlook::infeasible(size);
        }
        GroupOutlook {
            feasible,
            speeds: speeds.iter().map(|s| group::RULE.speed(s)).collect(),
            safe_speeds: safe.iter().map(|s| group::RULE.speed(s)).collect(),
        }
    }

    fn infeasible(size: usize) -> GroupOutlook {
        GroupOutlook {
            feasible: false,
            speeds: vec![0.0; size],
            safe_speeds: vec![0.0; size],
        }
    }

    /// What a server's prediction says of a group.
    pub fn of(p: &GroupPrediction) -> GroupOutlook {
        GroupOutlook {
            feasible: p.feasible,
            speeds: p.jobs.iter().map(|j| f64::from(j.speed)).collect(),
            safe_speeds: p
                .jobs
                .iter()
                .map(|j| 1.0 / f64::from(j.slowdown_p90))
                .collect(),
        }
    }
}

/// The distinct pairs of `groups` (each asked once, in the order first met) and, per group, where
/// each of its pairs (in `duet_model::group::pairs_of` order) is among them.
fn distinct_pairs<'q>(groups: &[GroupQuery<'q>]) -> (Vec<Query<'q>>, Vec<Vec<usize>>) {
    let mut index: HashMap<(&str, &str, SharingKey), usize> = HashMap::new();
    let mut queries: Vec<Query<'q>> = Vec::new();
    let mut asked: Vec<Vec<usize>> = Vec::with_capacity(groups.len());
    for g in groups {
        let mut own = Vec::new();
        for (i, j) in group::pairs_of(g.jobs.len()) {
            let q = Query {
                a: g.jobs[i],
                b: g.jobs[j],
                sharing: g.sharing(i, j),
            };
            let at = *index.entry((q.a, q.b, q.sharing.key())).or_insert_with(|| {
                queries.push(q);
                queries.len() - 1
            });
            own.push(at);
        }
        asked.push(own);
    }
    (queries, asked)
}

/// Groups answered from their pairs by one `predict` call (each distinct pair asked once),
/// composed by [`GroupOutlook::composed`].
pub fn groups_from_pairs(
    predictor: &mut (impl Predictor + ?Sized),
    gpu: &str,
    groups: &[GroupQuery<'_>],
) -> Result<Vec<GroupOutlook>> {
    let (queries, asked) = distinct_pairs(groups);
    let outlooks = predictor.predict(gpu, &queries)?;
    if outlooks.len() != queries.len() {
        bail!(
            "the predictor answered {} of {} pairs",
            outlooks.len(),
            queries.len()
        );
    }
    Ok(groups
        .iter()
        .zip(asked)
        .map(|(g, own)| {
            let pairs: Vec<Outlook> = own.iter().map(|&k| outlooks[k]).collect();
            GroupOutlook::composed(g.jobs.len(), &pairs)
        })
        .collect())
}

/// A source of pair slowdowns. One call per pricing round carries every candidate pair (and one
/// more every candidate group of three or more, where a GPU may hold more than two jobs).
pub trait Predictor: std::fmt::Debug {
    /// What it is, for the report: `oracle datasets/gavel-v100`, `duet http://...`.
    fn describe(&self) -> String;
    /// One outlook per query, in order, for pairs on device `gpu`.
    fn predict(&mut self, gpu: &str, queries: &[Query<'_>]) -> Result<Vec<Outlook>>;

    /// One outlook per group of two or more jobs, in order, on device `gpu`; by default composed
    /// from [`Predictor::predict`]'s pairs.
    fn predict_groups(
        &mut self,
        gpu: &str,
        groups: &[GroupQuery<'_>],
    ) -> Result<Vec<GroupOutlook>> {
        groups_from_pairs(self, gpu, groups)
    }

    /// Whether its slowdowns are the measured ones (the oracle), not predictions.
    fn is_measured(&self) -> bool {
        false
    }

    /// One outlook per query, in order, for pairs on the devices given with them: one call per
    /// device here; a source that takes a device per pair (the server) answers in one.
    fn predict_on(&mut self, queries: &[(&str, Query<'_>)]) -> Result<Vec<Outlook>> {
        let mut by_device: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
        for (i, (device, _)) in queries.iter().enumerate() {
            by_device.entry(device).or_default().push(i);
        }
        let mut out = vec![None; queries.len()];
        for (device, indices) in by_device {
            let asked: Vec<Query<'_>> = indices.iter().map(|&i| queries[i].1).collect();
            for (i, o) in indices.into_iter().zip(self.predict(device, &asked)?) {
                out[i] = Some(o);
            }
        }
        out.into_iter()
            .map(|o| o.ok_or_else(|| anyhow!("the predictor answered fewer pairs than asked")))
            .collect()
    }
}

/// The measured pairs of a dataset, both directions, averaged over repeated rows.
#[derive(Debug, Clone)]
pub struct Oracle {
    pub name: String,
    pub gpu: String,
    /// `a` -> `b` -> sharing -> outcome (nested, so that a lookup by `&str` allocates nothing).
    table: HashMap<String, HashMap<String, HashMap<SharingKey, Outlook>>>,
    /// Measured groups of three or more by (mode, hash of the sorted jobs): each setting's sorted
    /// jobs and each job's speed in that order (averaged over repeated rows; `None` where a run
    /// failed).
    groups: HashMap<(Mode, u64), Vec<MeasuredGroup>>,
    sharings: Vec<Sharing>,
}

/// A `Sharing` as a hashable key.
pub type SharingKey = (Mode, Option<u64>, Option<u64>);
/// Workload `a` next to workload `b` under a sharing.
pub type PairKey = (String, String, SharingKey);

impl Oracle {
    /// The oracle of `dataset` (read from `dir`): refuses a dataset with no successful pair.
    pub fn new(dir: &Path, dataset: &Dataset) -> Result<Oracle> {
        let solo: HashMap<&str, f64> = dataset
            .workloads
            .iter()
            .map(|w| (w.workload.as_str(), w.solo_throughput))
            .collect();
        let mut sums: HashMap<PairKey, (f64, f64, u32, bool)> = HashMap::new();
        let mut sharings = BTreeSet::new();
        let gpus: BTreeSet<&str> = dataset.pairs.iter().map(|p| p.gpu.as_str()).collect();
        if gpus.len() > 1 {
            bail!(
                "{}: pairs on several devices ({}); simulate one device's dataset",
                dir.display(),
                gpus.into_iter().collect::<Vec<_>>().join(", ")
            );
        }
        for pair in &dataset.pairs {
            let sharing = Sharing {
                mode: pair.mode,
                share_a: pair.share_a,
                share_b: pair.share_b,
            };
            let ok = pair.status == Status::Ok;
            let (sa, sb) = match (solo.get(pair.a.as_str()), solo.get(pair.b.as_str())) {
                (Some(x), Some(y)) if ok => {
                    (speed(pair.throughput_a, *x), speed(pair.throughput_b, *y))
                }
                _ => (0.0, 0.0),
            };
            for (a, b, s, va, vb) in [
                (&pair.a, &pair.b, sharing, sa, sb),
                (&pair.b, &pair.a, sharing.mirrored(), sb, sa),
            ] {
                let entry = sums
                    .entry((a.clone(), b.clone(), s.key()))
                    .or_insert((0.0, 0.0, 0, true));
                entry.0 += va;
                entry.1 += vb;
                entry.2 += 1;
                entry.3 &= ok;
                if a == b && s.key() == s.mirrored().key() {
                    break;
                }
            }
            sharings.insert(sharing.key());
            sharings.insert(sharing.mirrored().key());
        }
        if !dataset.pairs.iter().any(|p| p.status == Status::Ok) {
            bail!(
                "{}: the dataset has no successful pair, so there is no ground truth to simulate with",
                dir.display()
            );
        }
        let mut table: HashMap<String, HashMap<String, HashMap<SharingKey, Outlook>>> =
            HashMap::new();
        for ((a, b, sharing), (sum_a, sum_b, n, ok)) in sums {
            let n = f64::from(n);
            let (sa, sb) = (sum_a / n, sum_b / n);
            let o = Outlook {
                feasible: ok && sa > 0.0 && sb > 0.0,
                speed_a: sa,
                speed_b: sb,
                safe_speed_a: sa,
                safe_speed_b: sb,
            };
            table
                .entry(a)
                .or_default()
                .entry(b)
                .or_default()
                .insert(sharing, o);
        }
        let groups = measured_groups(dataset, &solo);
        let sharings = sharings
            .into_iter()
            .map(|(mode, a, b)| Sharing {
                mode,
                share_a: a.map(f64::from_bits),
                share_b: b.map(f64::from_bits),
            })
            .collect();
        Ok(Oracle {
            name: dir.display().to_string(),
            gpu: gpus.into_iter().next().unwrap_or_default().to_string(),
            table,
            groups,
            sharings,
        })
    }

    /// Every way of sharing the dataset measured (each also mirrored).
    pub fn sharings(&self) -> &[Sharing] {
        &self.sharings
    }

    /// The measured outcome of `a` next to `b`; `None` where the pair was never measured.
    pub fn lookup(&self, a: &str, b: &str, sharing: Sharing) -> Option<Outlook> {
        self.table.get(a)?.get(b)?.get(&sharing.key()).copied()
    }

    /// How many groups of three or more the dataset measured (distinct settings).
    pub fn measured_groups(&self) -> usize {
        self.groups.values().map(Vec::len).sum()
    }

    /// The outcome of group `q` and where it comes from: measured where the dataset has the
    /// pair or group, else composed from its measured pairs; `None` where a pair of it was
    /// never measured.
    pub fn lookup_group(&self, q: &GroupQuery<'_>) -> Option<(GroupOutlook, Truth)> {
        let size = q.jobs.len();
        if size == 2 {
            let o = self.lookup(q.jobs[0], q.jobs[1], q.sharing(0, 1))?;
            return Some((GroupOutlook::of_pair(&o), Truth::Measured));
        }
        let order = q.sorted();
        let measured = self
            .groups
            .get(&(
                q.mode,
                jobs_hash(order.iter().map(|&k| (q.jobs[k], q.share(k)))),
            ))
            .and_then(|bucket| {
                bucket.iter().find(|m| {
                    m.jobs.len() == order.len()
                        && m.jobs.iter().zip(&order).all(|((w, s), &k)| {
                            w == q.jobs[k] && *s == q.share(k).map(f64::to_bits)
                        })
                })
            });
        if let Some(measured) = measured {
            let Some(sorted_speeds) = &measured.speeds else {
                return Some((GroupOutlook::infeasible(size), Truth::Measured));
            };
            let mut speeds = vec![0.0; size];
            for (k, &at) in order.iter().enumerate() {
                speeds[at] = sorted_speeds[k];
            }
            let o = GroupOutlook {
                feasible: speeds.iter().all(|s| *s > 0.0),
                safe_speeds: speeds.clone(),
                speeds,
            };
            return Some((o, Truth::Measured));
        }
        let pairs: Option<Vec<Outlook>> = group::pairs_of(size)
            .into_iter()
            .map(|(i, j)| self.lookup(q.jobs[i], q.jobs[j], q.sharing(i, j)))
            .collect();
        Some((GroupOutlook::composed(size, &pairs?), Truth::Composed))
    }
}

/// One measured group setting: its jobs sorted by (workload, share bits), each one's speed in
/// that order.
#[derive(Debug, Clone)]
struct MeasuredGroup {
    jobs: Vec<(String, Option<u64>)>,
    speeds: Option<Vec<f64>>,
}

/// A hash of sorted (workload, share) jobs, the same for owned and borrowed names.
fn jobs_hash<'a>(jobs: impl Iterator<Item = (&'a str, Option<f64>)>) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for (w, s) in jobs {
        w.hash(&mut h);
        s.map(f64::to_bits).hash(&mut h);
    }
    h.finish()
}

/// The dataset's groups of three or more by setting: each job's speed in sorted order, averaged
/// over repeated rows, `None` where any run of the setting failed.
fn measured_groups(
    dataset: &Dataset,
    solo: &HashMap<&str, f64>,
) -> HashMap<(Mode, u64), Vec<MeasuredGroup>> {
    let mut sums: HashMap<GroupKey, Option<(Vec<f64>, f64)>> = HashMap::new();
    for g in &dataset.groups {
        let mut jobs: Vec<(&str, Option<u64>, f64)> = g
            .jobs
            .iter()
            .map(|j| {
                let s = solo
                    .get(j.workload.as_str())
                    .map_or(0.0, |x| speed(j.throughput, *x));
                (j.workload.as_str(), j.share.map(f64::to_bits), s)
            })
            .collect();
        jobs.sort_by(|x, y| (x.0, x.1).cmp(&(y.0, y.1)));
        let key: GroupKey = (
            g.mode,
            jobs.iter()
                .map(|(w, s, _)| ((*w).to_string(), *s))
                .collect(),
        );
        let ok = g.status == Status::Ok && jobs.iter().all(|j| j.2 > 0.0);
        let entry = sums
            .entry(key)
            .or_insert_with(|| Some((vec![0.0; jobs.len()], 0.0)));
        match (entry.as_mut(), ok) {
            (Some((total, n)), true) => {
                for (t, j) in total.iter_mut().zip(&jobs) {
                    *t += j.2;
                }
                *n += 1.0;
            }
            _ => *entry = None,
        }
    }
    let mut out: HashMap<(Mode, u64), Vec<MeasuredGroup>> = HashMap::new();
    for ((mode, jobs), v) in sums {
        let hash = jobs_hash(
            jobs.iter()
                .map(|(w, s)| (w.as_str(), s.map(f64::from_bits))),
        );
        out.entry((mode, hash)).or_default().push(MeasuredGroup {
            jobs,
            speeds: v.map(|(total, n)| total.iter().map(|t| t / n).collect()),
        });
    }
    out
}

impl Predictor for Oracle {
    fn describe(&self) -> String {
        format!("oracle (measured pairs of {})", self.name)
    }

    fn is_measured(&self) -> bool {
        true
    }

    fn predict(&mut self, _gpu: &str, queries: &[Query<'_>]) -> Result<Vec<Outlook>> {
        Ok(queries
            .iter()
            .map(|q| {
                self.lookup(q.a, q.b, q.sharing).unwrap_or(Outlook {
                    feasible: false,
                    speed_a: 0.0,
                    speed_b: 0.0,
                    safe_speed_a: 0.0,
                    safe_speed_b: 0.0,
                })
            })
            .collect())
    }

    fn predict_groups(
        &mut self,
        _gpu: &str,
        groups: &[GroupQuery<'_>],
    ) -> Result<Vec<GroupOutlook>> {
        Ok(groups
            .iter()
            .map(|q| {
                self.lookup_group(q)
                    .map_or_else(|| GroupOutlook::infeasible(q.jobs.len()), |(o, _)| o)
            })
            .collect())
    }
}

/// Jobs a predictor is given by their features rather than a registered id: id -> device ->
/// features (`solo_throughput` included).
pub type InlineJobs = HashMap<String, BTreeMap<String, Features>>;

/// Job `id` as a request names it on device `gpu`: by its features where `inline` has them
/// for that device, else by its registered id.
pub fn job_ref(id: &str, gpu: &str, inline: &InlineJobs) -> JobRef {
    match inline.get(id).and_then(|profiles| profiles.get(gpu)) {
        Some(features) => JobRef {
            workload: None,
            features: Some(features.clone()),
        },
        None => JobRef::workload(id),
    }
}

fn request(gpu: &str, queries: &[Query<'_>], inline: &InlineJobs) -> PredictRequest {
    let job = |id: &str| job_ref(id, gpu, inline);
    PredictRequest {
        gpu: Some(gpu.to_string()),
        pairs: queries
            .iter()
            .map(|q| PairQuery {
                a: job(q.a),
                b: job(q.b),
                mode: q.sharing.mode,
                share_a: q.sharing.share_a,
                share_b: q.sharing.share_b,
                gpu: None,
            })
            .collect(),
        groups: Vec::new(),
    }
}

/// The request for `groups` on `gpu`: a group of two as a pair, larger ones as groups.
fn group_request(gpu: &str, groups: &[GroupQuery<'_>], inline: &InlineJobs) -> PredictRequest {
    let job = |id: &str| job_ref(id, gpu, inline);
    let mut request = PredictRequest {
        gpu: Some(gpu.to_string()),
        ..PredictRequest::default()
    };
    for g in groups {
        if let [a, b] = g.jobs[..] {
            let sharing = g.sharing(0, 1);
            request.pairs.push(PairQuery {
                a: job(a),
                b: job(b),
                mode: sharing.mode,
                share_a: sharing.share_a,
                share_b: sharing.share_b,
                gpu: None,
            });
        } else {
            request.groups.push(ApiGroup {
                jobs: g.jobs.iter().map(|w| job(w)).collect(),
                mode: g.mode,
                shares: g.shares.clone(),
                gpu: None,
            });
        }
    }
    request
}

/// The answers to [`group_request`]'s pairs and groups, back in the order of `groups`.
fn group_outlooks(
    groups: &[GroupQuery<'_>],
    pairs: &[duet_core::api::Prediction],
    answered: &[GroupPrediction],
) -> Result<Vec<GroupOutlook>> {
    let (mut pairs, mut answered) = (pairs.iter(), answered.iter());
    groups
        .iter()
        .map(|g| {
            let o = if g.jobs.len() == 2 {
                pairs.next().map(|p| GroupOutlook::of_pair(&Outlook::of(p)))
            } else {
                answered.next().map(GroupOutlook::of)
            };
            o.ok_or_else(|| anyhow!("the predictor answered fewer groups than asked"))
        })
        .collect()
}

impl Outlook {
    /// What a server's prediction says of a pair.
    pub fn of(p: &duet_core::api::Prediction) -> Outlook {
        Outlook {
            feasible: p.feasible,
            speed_a: f64::from(p.speed_a),
            speed_b: f64::from(p.speed_b),
            safe_speed_a: 1.0 / f64::from(p.slowdown_a_p90),
            safe_speed_b: 1.0 / f64::from(p.slowdown_b_p90),
        }
    }
}

fn outlooks(predictions: &[duet_core::api::Prediction]) -> Vec<Outlook> {
    predictions.iter().map(Outlook::of).collect()
}

/// The duet server: one `POST /v1/predict` per call; a refused connection or a 5xx is retried
/// with back-off, then the error names the URL. Never falls back to another predictor.
#[derive(Debug)]
pub struct HttpPredictor {
    client: PredictClient,
    /// `/v1/predict` calls made (each with its retries).
    pub calls: u64,
    /// Jobs sent by their features (a query names them by these ids).
    pub inline: InlineJobs,
}

impl HttpPredictor {
    /// A client of the server at `base` (`http://host:port`).
    pub fn new(base: &str, token: Option<String>, timeout: Duration) -> HttpPredictor {
        HttpPredictor {
            client: PredictClient::new(base, token, timeout)
                .with_retries(5, Duration::from_millis(100)),
            calls: 0,
            inline: InlineJobs::new(),
        }
    }

    /// A predictor that posts with `client` (its retry policy as it is).
    pub fn from_client(client: PredictClient) -> HttpPredictor {
        HttpPredictor {
            client,
            calls: 0,
            inline: InlineJobs::new(),
        }
    }

    /// The client it posts with.
    pub fn client(&self) -> &PredictClient {
        &self.client
    }

    /// One `/v1/predict` call (with its retries), counted.
    fn post(&mut self, body: &PredictRequest) -> Result<duet_core::api::PredictResponse> {
        self.calls += 1;
        self.client
            .predict(body)
            .map_err(|e| anyhow!("predictor {e:#}"))
    }

    /// Changes the retry policy: `attempts` tries, waiting `first_backoff`, then twice that ...
    #[must_use]
    pub fn with_retries(mut self, attempts: u32, first_backoff: Duration) -> HttpPredictor {
        self.client = self.client.with_retries(attempts, first_backoff);
        self
    }
}

impl Predictor for HttpPredictor {
    fn describe(&self) -> String {
        format!("duet server {}", self.client.url())
    }

    fn predict(&mut self, gpu: &str, queries: &[Query<'_>]) -> Result<Vec<Outlook>> {
        if queries.is_empty() {
            return Ok(Vec::new());
        }
        let answer = self.post(&request(gpu, queries, &self.inline))?;
        if answer.predictions.len() != queries.len() {
            bail!(
                "predictor {} answered {} predictions for {} pairs",
                self.client.url(),
                answer.predictions.len(),
                queries.len()
            );
        }
        Ok(outlooks(&answer.predictions))
    }

    fn predict_groups(
        &mut self,
        gpu: &str,
        groups: &[GroupQuery<'_>],
    ) -> Result<Vec<GroupOutlook>> {
        if groups.is_empty() {
            return Ok(Vec::new());
        }
        let answer = self.post(&group_request(gpu, groups, &self.inline))?;
        group_outlooks(groups, &answer.predictions, &answer.groups)
            .map_err(|e| anyhow!("predictor {}: {e}", self.client.url()))
    }

    fn predict_on(&mut self, queries: &[(&str, Query<'_>)]) -> Result<Vec<Outlook>> {
        if queries.is_empty() {
            return Ok(Vec::new());
        }
        let body = PredictRequest {
            gpu: None,
            pairs: queries
                .iter()
                .map(|(device, q)| PairQuery {
                    a: job_ref(q.a, device, &self.inline),
                    b: job_ref(q.b, device, &self.inline),
                    mode: q.sharing.mode,
                    share_a: q.sharing.share_a,
                    share_b: q.sharing.share_b,
                    gpu: Some((*device).to_string()),
                })
                .collect(),
            groups: Vec::new(),
        };
        let answer = self.post(&body)?;
        if answer.predictions.len() != queries.len() {
            bail!(
                "predictor {} answered {} predictions for {} pairs",
                self.client.url(),
                answer.predictions.len(),
                queries.len()
            );
        }
        Ok(outlooks(&answer.predictions))
    }
}

mod in_process;
pub use in_process::ModelPredictor;

#[cfg(test)]
mod tests;
