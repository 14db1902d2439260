//! The canonical feature names, so that datasets from different sources line up.
//!
//! A source uses these names wherever it measures the same quantity, and may add its own
//! columns beside them. Counters are stored as their mean over the measured window and, where
//! the spread matters, as `<name>_p95`.

use crate::dataset::{FeatureColumn, FeatureKind};

/// `(name, kind, unit, meaning)` of every canonical feature.
const CANONICAL: &[(&str, FeatureKind, Option<&str>, &str)] = {
    use FeatureKind::{Categorical as C, Numeric as N};
    &[
        (
            "gpu_util",
            N,
            Some("%"),
            "share of time a kernel was running (NVML utilization.gpu)",
        ),
        (
            "mem_util",
            N,
            Some("%"),
            "share of time device memory was read or written (NVML utilization.memory)",
        ),
        (
            "mem_used_mib",
            N,
            Some("MiB"),
            "device memory in use by the job",
        ),
        (
            "sm_active",
            N,
            Some("%"),
            "SM cycles with at least one warp resident (GPM SM utilisation)",
        ),
        (
            "sm_occupancy",
            N,
            Some("%"),
            "resident warps over the maximum (GPM SM occupancy)",
        ),
        (
            "tensor_active",
            N,
            Some("%"),
            "tensor-core pipe activity (GPM any-tensor utilisation)",
        ),
        (
            "dram_active",
            N,
            Some("%"),
            "DRAM bandwidth utilisation (GPM DRAM bandwidth)",
        ),
        ("fp32_active", N, Some("%"), "FP32 pipe activity (GPM)"),
        ("fp16_active", N, Some("%"), "FP16 pipe activity (GPM)"),
        ("pcie_tx_mbs", N, Some("MB/s"), "PCIe transmit throughput"),
        ("pcie_rx_mbs", N, Some("MB/s"), "PCIe receive throughput"),
        ("power_w", N, Some("W"), "board power draw"),
        ("sm_clock_mhz", N, Some("MHz"), "SM clock"),
        ("batch_size", N, None, "samples per iteration"),
        (
            "precision",
            C,
            None,
            "numeric precision of the job (fp32, fp16, bf16...)",
        ),
        ("model", C, None, "model family of the job"),
        ("params_m", N, Some("M"), "parameter count, millions"),
        (
            "cpu_util",
            N,
            Some("%"),
            "CPU time of the job's processes over wall time, per core",
        ),
        (
            "rss_mib",
            N,
            Some("MiB"),
            "resident memory of the job's processes",
        ),
    ]
};

/// The canonical definition of `name`, if it is one (a `_p95` suffix is recognised too).
pub fn canonical(name: &str) -> Option<FeatureColumn> {
    let (base, p95) = match name.strip_suffix("_p95") {
        Some(base) => (base, true),
        None => (name, false),
    };
    let &(_, kind, unit, meaning) = CANONICAL.iter().find(|(n, ..)| *n == base)?;
    if p95 && kind == FeatureKind::Categorical {
        return None;
    }
    Some(FeatureColumn {
        name: name.to_string(),
        kind,
        unit: unit.map(str::to_string),
        meaning: if p95 {
            format!("95th percentile over the measured window: {meaning}")
        } else {
            meaning.to_string()
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_lookup_knows_p95_of_numeric_only() {
        assert_eq!(
            canonical("gpu_util").map(|c| c.kind),
            Some(FeatureKind::Numeric)
        );
        assert!(canonical("gpu_util_p95").is_some_and(|c| c.meaning.starts_with("95th")));
        assert_eq!(
            canonical("model").map(|c| c.kind),
            Some(FeatureKind::Categorical)
        );
        assert!(canonical("model_p95").is_none());
        assert!(canonical("nonsense").is_none());
    }
}
