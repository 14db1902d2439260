//! GPU counters through NVML (nvml-wrapper): utilisation, memory, power, clocks, PCIe, and GPM
//! metrics (SM activity and occupancy, tensor activity, DRAM bandwidth, FP pipes) where the GPU
//! has them, and each workload process's own SM and memory utilisation (NVML's per-process
//! samples). NVML is loaded at run time: without the library, the permission or a metric, the
//! campaign says so in one line and goes on with what it can read; what the GPU refuses later,
//! while sampling, is said once too ([`OnceLog`]). The GPU is CUDA's device, matched through
//! `CUDA_VISIBLE_DEVICES` (an index or a UUID) rather than assumed to be NVML's first.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

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
    /// NVML's index of the GPU the workloads run on (CUDA's device matched by UUID).
    index: u32,
    /// Why GPM is off, when it is (said once).
    pub gpm: Result<(), String>,
    /// Why per-process utilisation is off, when it is (said once).
    pub per_process: Result<(), String>,
    /// What went missing while sampling, each said once (drain it after every run).
    pub notes: OnceLog,
}

/// The per-process counters, by canonical name: each job's own share of the GPU.
pub const PER_PROCESS: [&str; 2] = ["process_sm_util", "process_mem_util"];

/// One per-process sample: pid, SM utilisation and memory utilisation, percent.
pub type ProcessSample = (u32, f64, f64);

/// One tick's readings; a counter the GPU refused is absent.
pub type Reading = BTreeMap<&'static str, f64>;

/// Messages said once per campaign: the first note of a key queues its message, later notes of
/// the same key are dropped.
#[derive(Debug, Default)]
pub struct OnceLog {
    said: Mutex<BTreeSet<String>>,
    pending: Mutex<Vec<String>>,
}

impl OnceLog {
    /// Queues `message()` unless `key` was noted before; `true` when it was queued.
    pub fn note(&self, key: &str, message: impl FnOnce() -> String) -> bool {
        let fresh = self
            .said
            .lock()
            .is_ok_and(|mut said| said.insert(key.to_string()));
        if fresh && let Ok(mut pending) = self.pending.lock() {
            pending.push(message());
        }
        fresh
    }

    /// The queued messages, oldest first; the queue is left empty.
    pub fn drain(&self) -> Vec<String> {
        self.pending
            .lock()
            .map(|mut p| std::mem::take(&mut *p))
            .unwrap_or_default()
    }
}

/// Which GPU CUDA's device `ordinal` is, as NVML can find it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// NVML's index (`CUDA_VISIBLE_DEVICES` unset, or an index in it).
    Index(u32),
    /// A UUID or the start of one (`GPU-…`, `MIG-…`), as `CUDA_VISIBLE_DEVICES` gave it.
    Uuid(String),
}

/// The GPU CUDA's device `ordinal` is, given `CUDA_VISIBLE_DEVICES` (`visible`): CUDA numbers
/// the listed devices from 0 and ignores the list from its first invalid entry on. An index in
/// the list is taken as NVML's (the same order where `CUDA_DEVICE_ORDER=PCI_BUS_ID`).
pub fn cuda_target(visible: Option<&str>, ordinal: usize) -> Result<Target, String> {
    let Some(list) = visible else {
        return u32::try_from(ordinal)
            .map(Target::Index)
            .map_err(|_| format!("CUDA device {ordinal}: no such index"));
    };
    let mut entries = Vec::new();
    for entry in list.split(',').map(str::trim) {
        let target = if let Ok(i) = entry.parse::<u32>() {
            Target::Index(i)
        } else if entry.starts_with("GPU-") || entry.starts_with("MIG-") {
            Target::Uuid(entry.to_string())
        } else {
            break;
        };
        entries.push(target);
    }
    entries.into_iter().nth(ordinal).ok_or_else(|| {
        format!("CUDA device {ordinal}: CUDA_VISIBLE_DEVICES=`{list}` makes no such device visible")
    })
}

/// The index of the one UUID in `uuids` that starts with `wanted` (CUDA takes a UUID's start).
pub fn match_uuid(wanted: &str, uuids: &[String]) -> Result<usize, String> {
    let hits: Vec<usize> = uuids
        .iter()
        .enumerate()
        .filter(|(_, u)| u.starts_with(wanted))
        .map(|(i, _)| i)
        .collect();
    match hits.as_slice() {
        [i] => Ok(*i),
        [] => Err(format!(
            "no GPU has UUID {wanted} (NVML sees {})",
            if uuids.is_empty() {
                "none".to_string()
            } else {
                uuids.join(", ")
            }
        )),
        _ => Err(format!("UUID {wanted} names {} GPUs", hits.len())),
    }
}

impl GpuCounters {
    /// Opens NVML for CUDA's device `ordinal` (matched by UUID where `CUDA_VISIBLE_DEVICES`
    /// holds one); `Err` says why the counters will be missing.
    pub fn open(ordinal: usize) -> Result<GpuCounters, String> {
        let nvml = Nvml::init()
            .map_err(|e| format!("NVML unavailable ({e}); GPU counters are not recorded"))?;
        let visible = std::env::var("CUDA_VISIBLE_DEVICES").ok();
        let target = cuda_target(visible.as_deref(), ordinal)
            .map_err(|e| format!("NVML: {e}; GPU counters are not recorded"))?;
        let index = match target {
            Target::Index(i) => i,
            Target::Uuid(wanted) => {
                let count = nvml.device_count().map_err(|e| {
                    format!("NVML: cannot count GPUs ({e}); GPU counters are not recorded")
                })?;
                let uuids: Vec<String> = (0..count)
                    .map(|i| {
                        nvml.device_by_index(i)
                            .and_then(|d| d.uuid())
                            .unwrap_or_default()
                    })
                    .collect();
                let i = match_uuid(&wanted, &uuids)
                    .map_err(|e| format!("NVML: {e}; GPU counters are not recorded"))?;
                u32::try_from(i).unwrap_or(0)
            }
        };
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
            notes: OnceLog::default(),
        })
    }

    /// One line on the GPU the counters come from: NVML's index, name, UUID, compute mode,
    /// driver and `CUDA_VISIBLE_DEVICES`.
    pub fn describe(&self) -> String {
        let d = self.nvml.device_by_index(self.index);
        let field = |v: Result<String, NvmlError>| v.unwrap_or_else(|e| format!("unknown ({e})"));
        let (name, uuid, mode) = match &d {
            Ok(d) => (
                field(d.name()),
                field(d.uuid()),
                field(d.compute_mode().map(|m| format!("{m:?}"))),
            ),
            Err(e) => (format!("unknown ({e})"), String::new(), String::new()),
        };
        format!(
            "NVML: GPU {} is {name}, UUID {uuid}, compute mode {mode}, driver {}, \
             CUDA_VISIBLE_DEVICES {}",
            self.index,
            field(self.nvml.sys_driver_version()),
            std::env::var("CUDA_VISIBLE_DEVICES").unwrap_or_else(|_| "unset".into())
        )
    }

    /// The driver's version, for the dataset's provenance.
    pub fn driver(&self) -> Option<String> {
        self.nvml.sys_driver_version().ok()
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
            // No sample since `since`: nothing ran on the GPU meanwhile.
            Err(NvmlError::NotFound) => (Vec::new(), since),
            Err(e) => {
                self.notes.note("process-samples", || {
                    format!(
                        "per-process utilisation: NVML refused a reading ({e}); the runs where \
                         it does have no per-process counters"
                    )
                });
                (Vec::new(), since)
            }
        }
    }

    /// A GPM sample to diff against a later one, where GPM works.
    pub fn gpm_sample(&self) -> Option<GpmSample<'_>> {
        self.gpm.as_ref().ok()?;
        let sample = self
            .nvml
            .device_by_index(self.index)
            .and_then(|d| d.gpm_sample());
        match sample {
            Ok(s) => Some(s),
            Err(e) => {
                self.notes.note("gpm-sample", || {
                    format!(
                        "GPM: the GPU refused a sample ({e}); the runs where it does have no \
                         GPM metrics"
                    )
                });
                None
            }
        }
    }

    /// GPM metrics between two samples, percent.
    pub fn gpm_metrics(&self, first: &GpmSample<'_>, last: &GpmSample<'_>) -> Reading {
        let ids: Vec<GpmMetricId> = GPM.iter().map(|(_, id)| *id).collect();
        let mut out = Reading::new();
        match nvml_wrapper::gpm::gpm_metrics_get(&self.nvml, first, last, &ids) {
            Ok(results) => {
                for ((name, _), result) in GPM.iter().zip(results) {
                    match result {
                        Ok(r) => {
                            out.insert(name, r.value);
                        }
                        Err(e) => {
                            self.notes.note(&format!("gpm-{name}"), || {
                                format!("GPM: the GPU refused `{name}` ({e}); it is not recorded")
                            });
                        }
                    }
                }
            }
            Err(e) => {
                self.notes.note("gpm-metrics", || {
                    format!(
                        "GPM: the GPU refused the metrics ({e}); the runs where it does have no \
                         GPM metrics"
                    )
                });
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
    fn cuda_devices_are_found_by_index_or_uuid() {
        assert_eq!(cuda_target(None, 0), Ok(Target::Index(0)));
        assert_eq!(cuda_target(None, 2), Ok(Target::Index(2)));
        assert_eq!(cuda_target(Some("3,1"), 1), Ok(Target::Index(1)));
        assert_eq!(cuda_target(Some(" 3 , 1"), 0), Ok(Target::Index(3)));
        assert_eq!(
            cuda_target(Some("GPU-8f2a,1"), 0),
            Ok(Target::Uuid("GPU-8f2a".into()))
        );
        assert_eq!(
            cuda_target(Some("MIG-1234-abcd"), 0),
            Ok(Target::Uuid("MIG-1234-abcd".into()))
        );
        // CUDA stops at the first invalid entry, and an empty list hides every device.
        assert!(cuda_target(Some("0,oops,1"), 1).is_err());
        let why = cuda_target(Some(""), 0).expect_err("none visible");
        assert!(why.contains("CUDA_VISIBLE_DEVICES"), "{why}");
        let uuids = vec![
            "GPU-8f2a0000-1111".to_string(),
            "GPU-8f2b0000-2222".to_string(),
        ];
        assert_eq!(match_uuid("GPU-8f2b", &uuids), Ok(1));
        assert_eq!(match_uuid("GPU-8f2a0000-1111", &uuids), Ok(0));
        assert!(match_uuid("GPU-8f2", &uuids).is_err_and(|e| e.contains("2 GPUs")));
        assert!(match_uuid("GPU-ffff", &uuids).is_err_and(|e| e.contains("GPU-8f2a0000-1111")));
    }

    #[test]
    fn a_note_is_said_once() {
        let log = OnceLog::default();
        assert!(log.note("gpm", || "GPM refused: Not Supported".into()));
        assert!(!log.note("gpm", || unreachable!("said already")));
        assert!(log.note("pid", || "unmatched".into()));
        assert_eq!(log.drain(), ["GPM refused: Not Supported", "unmatched"]);
        assert!(log.drain().is_empty());
        assert!(!log.note("gpm", || "again".into()));
        assert!(log.drain().is_empty());
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
