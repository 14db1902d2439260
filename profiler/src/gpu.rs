//! GPU counters through NVML (nvml-wrapper): utilisation, memory, power, clocks, PCIe, and GPM
//! metrics (SM activity and occupancy, tensor activity, DRAM bandwidth, FP pipes) where the GPU
//! has them, and each workload process's own SM and memory utilisation (NVML's per-process
//! samples). NVML is loaded at run time: without the library, the permission or a metric, the
//! campaign says so in one line and goes on with what it can read.

use std::collections::BTreeMap;

use nvml_wrapper::Nvml;
use nvml_wrapper::enum_wrappers::device::{Clock, PcieUtilCounter};
use nvml_wrapper::enums::gpm::GpmMetricId;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::gpm::GpmSample;

/// The device-level counters sampled every tick (canonical names; `read` fills them).
const SAMPLED: [&str; 8] = [
    "gpu_util",
    "mem_util",
    "mem_used_mib",
    "power_w",
    "sm_clock_mhz",
    "mem_clock_mhz",
    "pcie_tx_mbs",
    "pcie_rx_mbs",
];

/// GPM metrics, over the whole window: (canonical name, metric).
const GPM: [(&str, GpmMetricId); 6] = [
    ("sm_active", GpmMetricId::SmUtil),
    ("sm_occupancy", GpmMetricId::SmOccupancy),
    ("tensor_active", GpmMetricId::AnyTensorUtil),
    ("dram_active", GpmMetricId::DramBwUtil),
    ("fp32_active", GpmMetricId::Fp32Util),
    ("fp16_active", GpmMetricId::Fp16Util),
];

/// NVML, opened once per campaign.
#[derive(Debug)]
pub struct GpuCounters {
    nvml: Nvml,
    index: u32,
    /// Why GPM is off, when it is (said once).
    pub gpm: Result<(), String>,
    /// Why per-process utilisation is off, when it is (said once).
    pub per_process: Result<(), String>,
}

/// The per-process counters, by canonical name: each job's own share of the GPU.
pub const PER_PROCESS: [&str; 2] = ["process_sm_util", "process_mem_util"];

/// One per-process sample: pid, SM utilisation and memory utilisation, percent.
pub type ProcessSample = (u32, f64, f64);

/// One tick's readings; a counter the GPU refused is absent.
pub type Reading = BTreeMap<&'static str, f64>;

impl GpuCounters {
    /// Opens NVML for GPU `index`; `Err` says why the counters will be missing.
    pub fn open(index: u32) -> Result<GpuCounters, String> {
        let nvml = Nvml::init()
            .map_err(|e| format!("NVML unavailable ({e}); GPU counters are not recorded"))?;
        let device = nvml
            .device_by_index(index)
            .map_err(|e| format!("NVML: GPU {index}: {e}; GPU counters are not recorded"))?;
        let gpm = match device.gpm_support() {
            Ok(true) => Ok(()),
            Ok(false) => Err(format!(
                "GPM is not supported on GPU {index}; GPM metrics are not recorded"
            )),
            Err(e) => Err(format!("GPM: {e}; GPM metrics are not recorded")),
        };
        // No sample yet is fine (nothing runs); anything else means the counter is unavailable.
        let per_process = match device.process_utilization_stats(None) {
            Ok(_) | Err(NvmlError::NotFound) => Ok(()),
            Err(e) => Err(format!(
                "per-process utilisation on GPU {index}: {e}; it is not recorded"
            )),
        };
        Ok(GpuCounters {
            nvml,
            index,
            gpm,
            per_process,
        })
    }

    /// The GPU's name, for the dataset's provenance.
    pub fn name(&self) -> Option<String> {
        self.nvml.device_by_index(self.index).ok()?.name().ok()
    }

    /// One reading of the sampled counters.
    pub fn read(&self) -> Reading {
        let mut out = Reading::new();
        let Ok(d) = self.nvml.device_by_index(self.index) else {
            return out;
        };
        if let Ok(u) = d.utilization_rates() {
            out.insert("gpu_util", f64::from(u.gpu));
            out.insert("mem_util", f64::from(u.memory));
        }
        #[allow(clippy::cast_precision_loss)]
        if let Ok(m) = d.memory_info() {
            out.insert("mem_used_mib", m.used as f64 / (1024.0 * 1024.0));
        }
        if let Ok(p) = d.power_usage() {
            out.insert("power_w", f64::from(p) / 1000.0);
        }
        if let Ok(c) = d.clock_info(Clock::SM) {
            out.insert("sm_clock_mhz", f64::from(c));
        }
        if let Ok(c) = d.clock_info(Clock::Memory) {
            out.insert("mem_clock_mhz", f64::from(c));
        }
        // KB/s from NVML; MB/s here.
        if let Ok(t) = d.pcie_throughput(PcieUtilCounter::Send) {
            out.insert("pcie_tx_mbs", f64::from(t) / 1000.0);
        }
        if let Ok(t) = d.pcie_throughput(PcieUtilCounter::Receive) {
            out.insert("pcie_rx_mbs", f64::from(t) / 1000.0);
        }
        out
    }

    /// The per-process samples NVML took after `since` (its CPU clock, microseconds), and the
    /// newest sample's time (`since` when there is none).
    pub fn process_samples(&self, since: u64) -> (Vec<ProcessSample>, u64) {
        if self.per_process.is_err() {
            return (Vec::new(), since);
        }
        let Ok(d) = self.nvml.device_by_index(self.index) else {
            return (Vec::new(), since);
        };
        match d.process_utilization_stats(since) {
            Ok(samples) => {
                let newest = samples.iter().map(|s| s.timestamp).fold(since, u64::max);
                let out = samples
                    .iter()
                    .filter(|s| s.timestamp > since)
                    .map(|s| (s.pid, f64::from(s.sm_util), f64::from(s.mem_util)))
                    .collect();
                (out, newest)
            }
            Err(_) => (Vec::new(), since),
        }
    }

    /// A GPM sample to diff against a later one, where GPM works.
    pub fn gpm_sample(&self) -> Option<GpmSample<'_>> {
        self.gpm.as_ref().ok()?;
        self.nvml
            .device_by_index(self.index)
            .ok()?
            .gpm_sample()
            .ok()
    }

    /// GPM metrics between two samples, percent.
    pub fn gpm_metrics(&self, first: &GpmSample<'_>, last: &GpmSample<'_>) -> Reading {
        let ids: Vec<GpmMetricId> = GPM.iter().map(|(_, id)| *id).collect();
        let mut out = Reading::new();
        if let Ok(results) = nvml_wrapper::gpm::gpm_metrics_get(&self.nvml, first, last, &ids) {
            for ((name, _), result) in GPM.iter().zip(results) {
                if let Ok(r) = result {
                    out.insert(name, r.value);
                }
            }
        }
        out
    }
}

/// Mean and p95 of each counter over a window's readings, plus GPM values as they are:
/// `name` and `name_p95`.
pub fn summarise(readings: &[Reading], gpm: &Reading) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for name in SAMPLED {
        let values: Vec<f64> = readings
            .iter()
            .filter_map(|r| r.get(name).copied())
            .collect();
        if !values.is_empty() {
            out.insert(name.to_string(), crate::process::mean(&values));
            out.insert(format!("{name}_p95"), crate::process::p95(&values));
        }
    }
    for (name, value) in gpm {
        out.insert((*name).to_string(), *value);
    }
    out
}

/// Mean and p95 of one process's per-process samples: `process_sm_util`, `process_mem_util` and
/// their `_p95`; empty without samples.
pub fn summarise_process(samples: &[ProcessSample]) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    if samples.is_empty() {
        return out;
    }
    let sm: Vec<f64> = samples.iter().map(|s| s.1).collect();
    let mem: Vec<f64> = samples.iter().map(|s| s.2).collect();
    for (name, values) in PER_PROCESS.iter().zip([sm, mem]) {
        out.insert((*name).to_string(), crate::process::mean(&values));
        out.insert(format!("{name}_p95"), crate::process::p95(&values));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_nvml_the_reason_is_one_line() {
        // This machine has no NVIDIA driver; on one that has, NVML opens.
        match GpuCounters::open(0) {
            Ok(g) => assert!(g.name().is_some()),
            Err(why) => {
                assert!(why.contains("GPU counters are not recorded"), "{why}");
                assert!(!why.contains('\n'));
            }
        }
    }

    #[test]
    fn summaries_give_mean_and_p95() {
        let readings: Vec<Reading> = (1..=20)
            .map(|i| Reading::from([("gpu_util", f64::from(i))]))
            .collect();
        let s = summarise(&readings, &Reading::from([("sm_active", 40.0)]));
        assert_eq!(s["gpu_util"], 10.5);
        assert_eq!(s["gpu_util_p95"], 19.0);
        assert_eq!(s["sm_active"], 40.0);
        assert!(!s.contains_key("power_w"));
    }
}
