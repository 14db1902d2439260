//! The simulated cluster: nodes drawn from the trace's, each with its GPUs.

use anyhow::{Result, bail};

use crate::trace::Trace;
use duet_core::rng::Rng;

use super::jobs::Job;

/// The GPUs of the simulated cluster, by node, drawn from the trace's nodes (seeded).
#[derive(Debug, Clone, PartialEq)]
pub struct Cluster {
    /// GPUs per node, in order; GPU ids count up across nodes.
    pub nodes: Vec<u32>,
    pub models: Vec<String>,
}

impl Cluster {
    /// Nodes drawn at random from `trace` until they hold `gpus` GPUs (the last node drawn is
    /// cut to fit).
    pub fn draw(trace: &Trace, gpus: u32, seed: u64) -> Result<Cluster> {
        if gpus == 0 {
            bail!("--gpus: a cluster needs at least one GPU");
        }
        let total: u32 = trace.nodes.iter().map(|n| n.gpus).sum();
        if gpus > total {
            bail!("--gpus {gpus}: the trace's nodes hold {total} GPUs; choose at most that many");
        }
        let mut order: Vec<usize> = (0..trace.nodes.len()).collect();
        Rng::new(seed).shuffle(&mut order);
        let mut nodes = Vec::new();
        let mut models = Vec::new();
        let mut have = 0;
        for i in order {
            if have == gpus {
                break;
            }
            let n = trace.nodes[i].gpus.min(gpus - have);
            nodes.push(n);
            models.push(trace.nodes[i].model.clone());
            have += n;
        }
        Ok(Cluster { nodes, models })
    }

    pub fn gpus(&self) -> u32 {
        self.nodes.iter().sum()
    }

    /// Refuses a cluster where some job can never run: more GPUs than any node holds.
    pub fn check_fits(&self, jobs: &[Job]) -> Result<()> {
        let largest_node = self.nodes.iter().copied().max().unwrap_or(0);
        if let Some(job) = jobs.iter().max_by_key(|j| j.gpus)
            && job.gpus > largest_node
        {
            bail!(
                "the cluster ({} GPUs, at most {largest_node} on one node) is smaller than the \
                 largest job: pod `{}` needs {} GPUs on one node; simulate more GPUs or another \
                 --seed",
                self.gpus(),
                job.pod,
                job.gpus
            );
        }
        Ok(())
    }
}
