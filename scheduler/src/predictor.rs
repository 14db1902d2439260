//! Where the pricing loop gets its slowdowns: the `Predictor` trait and its three sources, the
//! duet server over HTTP, the same model in process, and the measured pairs of a dataset (the
//! oracle, which the simulator also uses as ground truth).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::time::Duration;

use anyhow::{Result, anyhow, bail};
use duet_core::api::{Features, JobRef, PairQuery, PredictRequest, WorkloadBody};
use duet_core::dataset::{Dataset, Mode, Status, speed};
pub use duet_model::EngineKind;
use duet_model::{LoadedModel, Registry, predict};

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

/// A source of pair slowdowns. One call per pricing round carries every candidate pair.
pub trait Predictor: std::fmt::Debug {
    /// What it is, for the report: `oracle datasets/gavel-v100`, `duet http://...`.
    fn describe(&self) -> String;
    /// One outlook per query, in order, for pairs on device `gpu`.
    fn predict(&mut self, gpu: &str, queries: &[Query<'_>]) -> Result<Vec<Outlook>>;

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
    table: HashMap<PairKey, Outlook>,
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
        let table = sums
            .into_iter()
            .map(|(k, (a, b, n, ok))| {
                let n = f64::from(n);
                let (sa, sb) = (a / n, b / n);
                let o = Outlook {
                    feasible: ok && sa > 0.0 && sb > 0.0,
                    speed_a: sa,
                    speed_b: sb,
                    safe_speed_a: sa,
                    safe_speed_b: sb,
                };
                (k, o)
            })
            .collect();
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
            sharings,
        })
    }

    /// Every way of sharing the dataset measured (each also mirrored).
    pub fn sharings(&self) -> &[Sharing] {
        &self.sharings
    }

    /// The measured outcome of `a` next to `b`; `None` where the pair was never measured.
    pub fn lookup(&self, a: &str, b: &str, sharing: Sharing) -> Option<Outlook> {
        self.table
            .get(&(a.to_string(), b.to_string(), sharing.key()))
            .copied()
    }
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

/// duet's model loaded in this process: the server's own engine and registry, without HTTP.
#[derive(Debug)]
pub struct ModelPredictor {
    model: LoadedModel,
    registry: Registry,
}

impl ModelPredictor {
    pub fn load(dir: &Path, engine: EngineKind) -> Result<ModelPredictor> {
        ModelPredictor::load_with(dir, engine, &BTreeMap::new())
    }

    /// The model in `dir` with `workloads` registered over its datasets' (as clients register
    /// them with the server).
    pub fn load_with(
        dir: &Path,
        engine: EngineKind,
        workloads: &BTreeMap<String, Option<WorkloadBody>>,
    ) -> Result<ModelPredictor> {
        let model = LoadedModel::load(dir, engine).map_err(|e| anyhow!("{e}"))?;
        let (registry, _warnings) = Registry::build(&model, workloads.clone());
        Ok(ModelPredictor { model, registry })
    }
}

impl Predictor for ModelPredictor {
    fn describe(&self) -> String {
        format!(
            "duet model {} in process ({}, {} engine)",
            self.model.version(),
            self.model.dir.display(),
            self.model.engine.kind().as_str()
        )
    }

    fn predict(&mut self, gpu: &str, queries: &[Query<'_>]) -> Result<Vec<Outlook>> {
        if queries.is_empty() {
            return Ok(Vec::new());
        }
        let request = request(gpu, queries, &InlineJobs::new());
        let predictions = predict::predict(&self.model, &self.registry, &request, None)
            .map_err(|e| anyhow!("model {}: {e}", self.model.dir.display()))?;
        Ok(outlooks(&predictions))
    }
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
        self.calls += 1;
        let answer = self
            .client
            .predict(&request(gpu, queries, &self.inline))
            .map_err(|e| anyhow!("predictor {e:#}"))?;
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

    fn predict_on(&mut self, queries: &[(&str, Query<'_>)]) -> Result<Vec<Outlook>> {
        if queries.is_empty() {
            return Ok(Vec::new());
        }
        self.calls += 1;
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
        let answer = self
            .client
            .predict(&body)
            .map_err(|e| anyhow!("predictor {e:#}"))?;
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

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use super::*;

    fn gavel() -> (PathBuf, Dataset) {
        let dir = Path::new(
            &std::env::var_os("CARGO_MANIFEST_DIR")
                .unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into()),
        )
        .join("../datasets/gavel-v100");
        let dataset = Dataset::read(&dir).expect("test input");
        (dir, dataset)
    }

    #[test]
    fn the_oracle_answers_both_directions_from_the_measured_pairs() {
        let (dir, dataset) = gavel();
        let oracle = Oracle::new(&dir, &dataset).expect("test input");
        assert_eq!(oracle.gpu, "v100");
        let pair = dataset
            .pairs
            .iter()
            .find(|p| p.status == Status::Ok && p.a != p.b)
            .expect("test input");
        let sharing = oracle.sharings()[0];
        let ab = oracle
            .lookup(&pair.a, &pair.b, sharing)
            .expect("test input");
        let ba = oracle
            .lookup(&pair.b, &pair.a, sharing)
            .expect("test input");
        let solo = |id: &str| dataset.workload(id).expect("test input").solo_throughput;
        assert!((ab.speed_a - pair.throughput_a / solo(&pair.a)).abs() < 1e-12);
        assert_eq!((ab.speed_a, ab.speed_b), (ba.speed_b, ba.speed_a));
        assert!(ab.feasible);
        let failed = dataset
            .pairs
            .iter()
            .find(|p| p.status != Status::Ok)
            .expect("test input");
        assert!(
            !oracle
                .lookup(&failed.a, &failed.b, sharing)
                .expect("test input")
                .feasible
        );
        assert!(oracle.lookup("nobody", &pair.b, sharing).is_none());
    }

    #[test]
    fn a_dataset_without_a_successful_pair_is_refused() {
        let (dir, mut dataset) = gavel();
        dataset.pairs.retain(|p| p.status != Status::Ok);
        let e = Oracle::new(&dir, &dataset)
            .expect_err("must fail")
            .to_string();
        assert!(
            e.contains("gavel-v100") && e.contains("no successful pair"),
            "{e}"
        );
        dataset.pairs.clear();
        assert!(Oracle::new(&dir, &dataset).is_err());
    }

    #[test]
    fn an_unreachable_server_is_retried_then_named() {
        // A port nobody listens on: bind, read the port, close.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .expect("test input")
            .local_addr()
            .expect("test input")
            .port();
        let url = format!("http://127.0.0.1:{port}");
        let mut p = HttpPredictor::new(&url, None, Duration::from_secs(2))
            .with_retries(3, Duration::from_millis(10));
        let sharing = Sharing {
            mode: Mode::Space,
            share_a: None,
            share_b: None,
        };
        let e = p
            .predict(
                "v100",
                &[Query {
                    a: "x",
                    b: "y",
                    sharing,
                }],
            )
            .expect_err("must fail")
            .to_string();
        assert!(e.contains(&url) && e.contains("after 3 attempts"), "{e}");
        assert_eq!(p.calls, 1);
    }
}
