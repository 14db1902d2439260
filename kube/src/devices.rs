//! How duet reads a GPU node: the mapping file (`--devices`, `deploy/k8s/devices.toml`) from the
//! labels NVIDIA's GPU feature discovery sets to duet's device names and ways of sharing.
//!
//! ```toml
//! resource = "nvidia.com/gpu"            # the extended resource pods ask for (default)
//! default_strategy = "none"              # a node without the sharing label (default "none")
//!
//! [[device]]
//! match = "V100"                         # case-insensitive part of nvidia.com/gpu.product
//! device = "v100"                        # duet's device name
//!
//! [[strategy]]
//! name = "mps"                           # a value of nvidia.com/gpu.sharing-strategy
//! sharings = [{ mode = "mps", share = 50, resident_share = 50 }]
//! whole_share = 100                      # MPS share of a pod placed alone (optional)
//! ```

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result, anyhow, bail};
use duet_core::dataset::Mode;
use duet_scheduler::predictor::Sharing;
use k8s_openapi::api::core::v1::Node;
use serde::Deserialize;

/// The node labels duet reads (GPU feature discovery's names by default).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Labels {
    pub product: String,
    pub count: String,
    pub replicas: String,
    pub memory: String,
    pub sharing: String,
}

impl Default for Labels {
    fn default() -> Labels {
        Labels {
            product: "nvidia.com/gpu.product".into(),
            count: "nvidia.com/gpu.count".into(),
            replicas: "nvidia.com/gpu.replicas".into(),
            memory: "nvidia.com/gpu.memory".into(),
            sharing: "nvidia.com/gpu.sharing-strategy".into(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
struct DeviceRule {
    #[serde(rename = "match")]
    pattern: String,
    device: String,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
struct SharingEntry {
    mode: Mode,
    /// The newcomer's MPS share.
    #[serde(default)]
    share: Option<f64>,
    /// The resident's MPS share.
    #[serde(default)]
    resident_share: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
struct Strategy {
    name: String,
    #[serde(default)]
    sharings: Vec<SharingEntry>,
    #[serde(default)]
    whole_share: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default = "default_resource")]
    resource: String,
    #[serde(default = "default_strategy")]
    default_strategy: String,
    #[serde(default)]
    labels: Labels,
    #[serde(default)]
    device: Vec<DeviceRule>,
    #[serde(default)]
    strategy: Vec<Strategy>,
}

fn default_resource() -> String {
    "nvidia.com/gpu".into()
}

fn default_strategy() -> String {
    "none".into()
}

/// How a sharing strategy lets duet pair two pods on one GPU.
#[derive(Debug, Clone, PartialEq)]
pub struct SharingStrategy {
    /// Newcomer `a` beside resident `b`.
    pub sharings: Vec<Sharing>,
    /// The MPS share a pod placed alone is started with, where the strategy gives one.
    pub whole_share: Option<f64>,
}

/// The mapping file, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceMap {
    pub resource: String,
    pub labels: Labels,
    pub default_strategy: String,
    rules: Vec<(String, String)>,
    strategies: BTreeMap<String, SharingStrategy>,
}

impl DeviceMap {
    /// Reads and checks `path`; errors name the file and the entry.
    pub fn read(path: &Path) -> Result<DeviceMap> {
        let text = duet_core::input::read_text(path)
            .map_err(|e| anyhow!("--devices {}: {e}", path.display()))?;
        DeviceMap::parse(&text).with_context(|| format!("--devices {}", path.display()))
    }

    /// Checks a mapping file's text.
    pub fn parse(text: &str) -> Result<DeviceMap> {
        let file: File = toml::from_str(text)?;
        if file.resource.trim().is_empty() {
            bail!("resource: empty");
        }
        let mut rules = Vec::new();
        for (i, rule) in file.device.iter().enumerate() {
            if rule.pattern.trim().is_empty() || rule.device.trim().is_empty() {
                bail!("device[{i}]: match and device must not be empty");
            }
            rules.push((rule.pattern.to_lowercase(), rule.device.clone()));
        }
        let mut strategies = BTreeMap::new();
        strategies.insert(
            "none".to_string(),
            SharingStrategy {
                sharings: Vec::new(),
                whole_share: None,
            },
        );
        for (i, s) in file.strategy.iter().enumerate() {
            let mut sharings = Vec::new();
            for (k, e) in s.sharings.iter().enumerate() {
                let at = format!("strategy[{i}] ({}).sharings[{k}]", s.name);
                let percent = |v: Option<f64>, field: &str| -> Result<()> {
                    match v {
                        Some(v) if !(v > 0.0 && v <= 100.0) => {
                            bail!("{at}.{field}: {v} is not a percentage in (0, 100]")
                        }
                        _ => Ok(()),
                    }
                };
                percent(e.share, "share")?;
                percent(e.resident_share, "resident_share")?;
                match (e.mode, e.share, e.resident_share) {
                    (Mode::Mps, Some(_), Some(_)) => {}
                    (Mode::Mps, _, _) => {
                        bail!("{at}: mode mps needs share and resident_share")
                    }
                    (_, None, None) => {}
                    (mode, _, _) => bail!("{at}: mode {mode} has no shares"),
                }
                sharings.push(Sharing {
                    mode: e.mode,
                    share_a: e.share,
                    share_b: e.resident_share,
                });
            }
            if let Some(v) = s.whole_share
                && !(v > 0.0 && v <= 100.0)
            {
                bail!(
                    "strategy[{i}] ({}).whole_share: {v} is not a percentage in (0, 100]",
                    s.name
                );
            }
            if strategies
                .insert(
                    s.name.clone(),
                    SharingStrategy {
                        sharings,
                        whole_share: s.whole_share,
                    },
                )
                .is_some()
                && s.name != "none"
            {
                bail!("strategy[{i}]: {} is defined twice", s.name);
            }
        }
        if !strategies.contains_key(&file.default_strategy) {
            bail!(
                "default_strategy: {} is not a strategy of the file",
                file.default_strategy
            );
        }
        Ok(DeviceMap {
            resource: file.resource,
            labels: file.labels,
            default_strategy: file.default_strategy,
            rules,
            strategies,
        })
    }

    /// duet's device name for a product label: the first rule whose `match` is part of it.
    pub fn device_of(&self, product: &str) -> Option<&str> {
        let product = product.to_lowercase();
        self.rules
            .iter()
            .find(|(pattern, _)| product.contains(pattern.as_str()))
            .map(|(_, device)| device.as_str())
    }

    /// How pods share a GPU on nodes of this strategy; `None` for a strategy the file lacks.
    pub fn strategy(&self, name: &str) -> Option<&SharingStrategy> {
        self.strategies.get(name)
    }
}

/// What duet knows of one node.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeInfo {
    pub name: String,
    /// The product label, as the node has it.
    pub product: Option<String>,
    /// duet's device name; `None`: a product the mapping file does not name.
    pub device: Option<String>,
    /// Physical GPUs.
    pub gpus: u32,
    /// Memory of one GPU, MiB, where labelled.
    pub memory_mib: Option<f64>,
    /// Its sharing strategy (the label, else the file's default).
    pub strategy: String,
    pub schedulable: bool,
    /// Its labels (for pods' node selectors).
    pub labels: BTreeMap<String, String>,
    /// Its taints that keep pods off (`NoSchedule`, `NoExecute`): key, value, effect.
    pub taints: Vec<(String, String, String)>,
}

/// A label's count (labels are plain numbers; advertised resources are quantities).
fn whole_number(text: &str) -> Option<u32> {
    text.trim().parse::<u32>().ok()
}

/// The most GPUs a node is taken to hold (eight boards of seven MIG slices each are 56): a node
/// whose labels or advertised resources say more is read as holding none, so a mislabelled
/// node is never placed on, and its GPUs are never laid out one entry each in memory.
pub const MAX_NODE_GPUS: u32 = 1024;

impl NodeInfo {
    /// Reads a node through the mapping.
    pub fn read(node: &Node, map: &DeviceMap) -> NodeInfo {
        let empty = BTreeMap::new();
        let labels = node.metadata.labels.as_ref().unwrap_or(&empty);
        let label = |name: &str| labels.get(name).map(String::as_str);
        let product = label(&map.labels.product).map(str::to_string);
        let device = product
            .as_deref()
            .and_then(|p| map.device_of(p))
            .map(str::to_string);
        let advertised = node
            .status
            .as_ref()
            .and_then(|s| s.allocatable.as_ref().or(s.capacity.as_ref()))
            .and_then(|a| a.get(&map.resource))
            .and_then(|q| crate::quantity::whole_count(&q.0));
        let replicas = label(&map.labels.replicas)
            .and_then(whole_number)
            .filter(|r| *r > 0)
            .unwrap_or(1);
        // The count label where the node advertises none; never more than it advertises (a
        // label says more than the node can give out only by mistake or by hand).
        let gpus = match (label(&map.labels.count).and_then(whole_number), advertised) {
            (Some(count), Some(a)) => Some(count.min(a / replicas)),
            (count, a) => count.or(a.map(|a| a / replicas)),
        }
        .filter(|g| *g <= MAX_NODE_GPUS)
        .unwrap_or(0);
        let memory_mib = label(&map.labels.memory)
            .and_then(|m| m.trim().parse::<f64>().ok())
            .filter(|m| m.is_finite() && *m > 0.0);
        let strategy = label(&map.labels.sharing)
            .unwrap_or(&map.default_strategy)
            .to_string();
        NodeInfo {
            name: node.metadata.name.clone().unwrap_or_default(),
            product,
            device,
            gpus,
            memory_mib,
            strategy,
            schedulable: !node
                .spec
                .as_ref()
                .and_then(|s| s.unschedulable)
                .unwrap_or(false),
            labels: labels.clone(),
            taints: node
                .spec
                .as_ref()
                .and_then(|s| s.taints.as_ref())
                .map(|taints| {
                    taints
                        .iter()
                        .filter(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
                        .map(|t| {
                            (
                                t.key.clone(),
                                t.value.clone().unwrap_or_default(),
                                t.effect.clone(),
                            )
                        })
                        .collect()
                })
                .unwrap_or_default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{NodeSpec, NodeStatus};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;

    const FILE: &str = r#"
        [[device]]
        match = "V100"
        device = "v100"
        [[device]]
        match = "H200"
        device = "h200"
        [[strategy]]
        name = "mps"
        sharings = [{ mode = "mps", share = 30, resident_share = 70 }, { mode = "mps", share = 50, resident_share = 50 }]
        whole_share = 100
        [[strategy]]
        name = "time-slicing"
        sharings = [{ mode = "timeslice" }]
    "#;

    fn node(labels: &[(&str, &str)], gpus: Option<&str>) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some("n".into()),
                labels: Some(
                    labels
                        .iter()
                        .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
                        .collect(),
                ),
                ..ObjectMeta::default()
            },
            spec: Some(NodeSpec::default()),
            status: Some(NodeStatus {
                allocatable: gpus.map(|g| {
                    [("nvidia.com/gpu".to_string(), Quantity(g.into()))]
                        .into_iter()
                        .collect()
                }),
                ..NodeStatus::default()
            }),
        }
    }

    #[test]
    fn a_node_is_read_through_the_mapping() {
        let map = DeviceMap::parse(FILE).expect("valid");
        let n = NodeInfo::read(
            &node(
                &[
                    ("nvidia.com/gpu.product", "Tesla-V100-SXM2-16GB"),
                    ("nvidia.com/gpu.sharing-strategy", "mps"),
                    ("nvidia.com/gpu.memory", "16384"),
                ],
                Some("8"),
            ),
            &map,
        );
        assert_eq!(n.device.as_deref(), Some("v100"));
        assert_eq!((n.gpus, n.memory_mib), (8, Some(16384.0)));
        assert_eq!(map.strategy(&n.strategy).expect("known").sharings.len(), 2);
        // Time-slicing replicas: 16 advertised, 4 replicas each, so 4 GPUs; the count label wins.
        let n = NodeInfo::read(
            &node(
                &[
                    ("nvidia.com/gpu.product", "NVIDIA-H200"),
                    ("nvidia.com/gpu.replicas", "4"),
                ],
                Some("16"),
            ),
            &map,
        );
        assert_eq!((n.device.as_deref(), n.gpus), (Some("h200"), 4));
        assert_eq!(n.strategy, "none");
        let n = NodeInfo::read(
            &node(
                &[
                    ("nvidia.com/gpu.product", "A100"),
                    ("nvidia.com/gpu.count", "2"),
                ],
                Some("16"),
            ),
            &map,
        );
        assert_eq!((n.device, n.gpus), (None, 2));
        // A count label above what the node advertises is held to what it advertises.
        let n = NodeInfo::read(
            &node(
                &[
                    ("nvidia.com/gpu.count", "1000"),
                    ("nvidia.com/gpu.replicas", "2"),
                ],
                Some("4"),
            ),
            &map,
        );
        assert_eq!(n.gpus, 2);
        assert_eq!(NodeInfo::read(&node(&[], None), &map).gpus, 0);
        // A count past MAX_NODE_GPUS, labelled or advertised, is a node duet does not place on.
        let huge = NodeInfo::read(&node(&[("nvidia.com/gpu.count", "4000000000")], None), &map);
        assert_eq!(huge.gpus, 0);
        assert_eq!(NodeInfo::read(&node(&[], Some("1025")), &map).gpus, 0);
        assert_eq!(NodeInfo::read(&node(&[], Some("1024")), &map).gpus, 1024);
        // Advertised resources are quantities, written back in canonical form.
        assert_eq!(NodeInfo::read(&node(&[], Some("1Ki")), &map).gpus, 1024);
        assert_eq!(NodeInfo::read(&node(&[], Some("2k")), &map).gpus, 0);
        assert_eq!(NodeInfo::read(&node(&[], Some("8000m")), &map).gpus, 8);
    }

    #[test]
    fn a_bad_mapping_file_is_refused_by_entry() {
        for (text, named) in [
            ("[[device]]\nmatch = \"\"\ndevice = \"x\"", "device[0]"),
            (
                "[[strategy]]\nname = \"m\"\nsharings = [{ mode = \"mps\" }]",
                "needs share",
            ),
            (
                "[[strategy]]\nname = \"m\"\nsharings = [{ mode = \"timeslice\", share = 5, resident_share = 5 }]",
                "has no shares",
            ),
            (
                "[[strategy]]\nname = \"m\"\nsharings = [{ mode = \"mps\", share = 500, resident_share = 5 }]",
                "share: 500",
            ),
            ("default_strategy = \"mps\"", "default_strategy"),
            ("colour = 1", "colour"),
            (
                "[[strategy]]\nname = \"m\"\n[[strategy]]\nname = \"m\"",
                "defined twice",
            ),
        ] {
            let e = format!("{:#}", DeviceMap::parse(text).expect_err("must be refused"));
            assert!(e.contains(named), "{text}: {e}");
        }
    }
}
