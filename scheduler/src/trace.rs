//! The Alibaba GPU cluster trace (2023, "openb"): its pods and its nodes, read and checked.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The pod list every study of this trace starts from.
pub const POD_FILE: &str = "openb_pod_list_default.csv";
/// The GPU nodes of the traced cluster.
pub const NODE_FILE: &str = "openb_node_list_gpu_node.csv";

/// Why a trace cannot be used, naming the file, and the row and column where there is one.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{}{}: {message}", file.display(), at.as_deref().map(|a| format!(" {a}")).unwrap_or_default())]
pub struct TraceError {
    pub file: PathBuf,
    /// `line N, column C` (1-based lines, the header being line 1).
    pub at: Option<String>,
    pub message: String,
}

impl TraceError {
    fn new(file: &Path, message: impl Into<String>) -> TraceError {
        TraceError {
            file: file.to_path_buf(),
            at: None,
            message: message.into(),
        }
    }

    fn at(mut self, line: u64, column: &str) -> TraceError {
        self.at = Some(format!("line {line}, column `{column}`"));
        self
    }
}

/// A pod's quality-of-service class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Qos {
    /// Latency sensitive: an inference service.
    Ls,
    /// Best effort: a training job.
    Be,
    Burstable,
    Guaranteed,
}

impl Qos {
    fn parse(s: &str) -> Option<Qos> {
        match s {
            "LS" => Some(Qos::Ls),
            "BE" => Some(Qos::Be),
            "Burstable" => Some(Qos::Burstable),
            "Guaranteed" => Some(Qos::Guaranteed),
            _ => None,
        }
    }

    /// Whether the pod is served as an inference job with a speed objective (LS, Guaranteed).
    pub fn is_latency_sensitive(self) -> bool {
        matches!(self, Qos::Ls | Qos::Guaranteed)
    }
}

/// One row of the pod list.
#[derive(Debug, Clone, PartialEq)]
pub struct Pod {
    pub name: String,
    /// Whole GPUs asked for (0: a CPU-only pod).
    pub num_gpu: u32,
    /// Thousandths of one GPU asked for by a one-GPU pod (1000: the whole GPU).
    pub gpu_milli: u32,
    pub qos: Qos,
    /// Seconds from the trace's start.
    pub creation: f64,
    pub deletion: f64,
    /// When it started running; `None` for a pod that never did.
    pub scheduled: Option<f64>,
}

impl Pod {
    /// How long it ran, when it ran at all.
    pub fn runtime(&self) -> Option<f64> {
        self.scheduled.map(|s| self.deletion - s)
    }
}

/// One GPU node.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub name: String,
    pub gpus: u32,
    pub model: String,
}

/// A trace folder: pods and nodes.
#[derive(Debug, Clone)]
pub struct Trace {
    pub dir: PathBuf,
    pub pods: Vec<Pod>,
    pub nodes: Vec<Node>,
}

impl Trace {
    /// Reads `dir/openb_pod_list_default.csv` (or `pod_file` when given) and the node list.
    pub fn read(dir: &Path, pod_file: Option<&Path>) -> Result<Trace, TraceError> {
        let pods_path = pod_file.map_or_else(|| dir.join(POD_FILE), Path::to_path_buf);
        let pods = read_pods(&pods_path)?;
        let nodes = read_nodes(&dir.join(NODE_FILE))?;
        Ok(Trace {
            dir: dir.to_path_buf(),
            pods,
            nodes,
        })
    }
}

/// Calls `each` on every record of the CSV file `path`, after checking that its header has every
/// `required` column.
fn for_each_row(
    path: &Path,
    required: &[&str],
    mut each: impl FnMut(&Row<'_>) -> Result<(), TraceError>,
) -> Result<(), TraceError> {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(true)
        .from_path(path)
        .map_err(|e| TraceError::new(path, format!("cannot read: {e}")))?;
    let headers = reader
        .headers()
        .map_err(|e| TraceError::new(path, format!("cannot read the header: {e}")))?
        .clone();
    let columns: HashMap<String, usize> = headers
        .iter()
        .enumerate()
        .map(|(i, h)| (h.trim().to_string(), i))
        .collect();
    let missing: Vec<String> = required
        .iter()
        .filter(|c| !columns.contains_key(**c))
        .map(|c| format!("`{c}`"))
        .collect();
    if !missing.is_empty() {
        return Err(TraceError::new(
            path,
            format!(
                "missing column{} {}",
                if missing.len() > 1 { "s" } else { "" },
                missing.join(", ")
            ),
        ));
    }
    let mut record = csv::StringRecord::new();
    let mut line = 1;
    loop {
        match reader.read_record(&mut record) {
            Ok(false) => return Ok(()),
            Ok(true) => {}
            Err(e) => return Err(TraceError::new(path, format!("line {}: {e}", line + 1))),
        }
        line += 1;
        each(&Row {
            path,
            line,
            record: &record,
            columns: &columns,
        })?;
    }
}

/// One record's cells by column name, with errors that say where.
struct Row<'a> {
    path: &'a Path,
    line: u64,
    record: &'a csv::StringRecord,
    columns: &'a HashMap<String, usize>,
}

impl Row<'_> {
    fn text(&self, column: &str) -> &str {
        self.record.get(self.columns[column]).map_or("", str::trim)
    }

    fn fail(&self, column: &str, message: impl Into<String>) -> TraceError {
        TraceError::new(self.path, message).at(self.line, column)
    }

    fn number(&self, column: &str) -> Result<f64, TraceError> {
        let text = self.text(column);
        let value: f64 = text
            .parse()
            .map_err(|_| self.fail(column, format!("`{text}` is not a number")))?;
        if !value.is_finite() || value < 0.0 {
            return Err(self.fail(column, format!("{text} is negative or not finite")));
        }
        Ok(value)
    }

    fn count(&self, column: &str) -> Result<u32, TraceError> {
        let text = self.text(column);
        text.parse()
            .map_err(|_| self.fail(column, format!("`{text}` is not a whole number >= 0")))
    }
}

fn read_pods(path: &Path) -> Result<Vec<Pod>, TraceError> {
    const COLUMNS: [&str; 8] = [
        "name",
        "num_gpu",
        "gpu_milli",
        "qos",
        "creation_time",
        "deletion_time",
        "scheduled_time",
        "pod_phase",
    ];
    let mut pods = Vec::new();
    for_each_row(path, &COLUMNS, |row| {
        let name = row.text("name").to_string();
        if name.is_empty() {
            return Err(row.fail("name", "empty pod name"));
        }
        let qos_text = row.text("qos");
        let qos = Qos::parse(qos_text).ok_or_else(|| {
            row.fail(
                "qos",
                format!("`{qos_text}` is not one of LS, BE, Burstable, Guaranteed"),
            )
        })?;
        let creation = row.number("creation_time")?;
        let deletion = row.number("deletion_time")?;
        if deletion < creation {
            return Err(row.fail(
                "deletion_time",
                format!("pod `{name}` is deleted ({deletion}) before it is created ({creation})"),
            ));
        }
        let scheduled = if row.text("scheduled_time").is_empty() {
            None
        } else {
            let s = row.number("scheduled_time")?;
            if s < creation || s > deletion {
                return Err(row.fail(
                    "scheduled_time",
                    format!(
                        "pod `{name}` is scheduled at {s}, outside its life {creation}..{deletion}"
                    ),
                ));
            }
            Some(s)
        };
        let num_gpu = row.count("num_gpu")?;
        let gpu_milli = row.count("gpu_milli")?;
        if gpu_milli > 1000 {
            return Err(row.fail(
                "gpu_milli",
                format!("{gpu_milli} is more than one GPU (1000)"),
            ));
        }
        pods.push(Pod {
            name,
            num_gpu,
            gpu_milli,
            qos,
            creation,
            deletion,
            scheduled,
        });
        Ok(())
    })?;
    if pods.is_empty() {
        return Err(TraceError::new(path, "no pods"));
    }
    Ok(pods)
}

fn read_nodes(path: &Path) -> Result<Vec<Node>, TraceError> {
    let mut nodes = Vec::new();
    for_each_row(path, &["sn", "gpu", "model"], |row| {
        let gpus = row.count("gpu")?;
        if gpus > 0 {
            nodes.push(Node {
                name: row.text("sn").to_string(),
                gpus,
                model: row.text("model").to_string(),
            });
        }
        Ok(())
    })?;
    if nodes.is_empty() {
        return Err(TraceError::new(path, "no node with a GPU"));
    }
    Ok(nodes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).expect("test input");
        path
    }

    const NODES: &str = "sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,8,V100M16\n";
    const HEADER: &str = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n";

    #[test]
    fn reads_pods_and_nodes() {
        let dir = tempfile::tempdir().expect("test input");
        write(dir.path(), NODE_FILE, NODES);
        write(
            dir.path(),
            POD_FILE,
            &format!("{HEADER}p0,1,1,1,500,,LS,Running,0,100,5\np1,1,1,0,0,,BE,Pending,3,9,\n"),
        );
        let trace = Trace::read(dir.path(), None).expect("test input");
        assert_eq!(trace.pods.len(), 2);
        assert_eq!(trace.pods[0].runtime(), Some(95.0));
        assert_eq!(trace.pods[1].scheduled, None);
        assert_eq!(trace.nodes[0].gpus, 8);
    }

    #[test]
    fn a_missing_column_is_named() {
        let dir = tempfile::tempdir().expect("test input");
        write(dir.path(), NODE_FILE, NODES);
        write(dir.path(), POD_FILE, "name,num_gpu,qos\np0,1,LS\n");
        let e = Trace::read(dir.path(), None)
            .expect_err("must fail")
            .to_string();
        assert!(e.contains(POD_FILE) && e.contains("`gpu_milli`"), "{e}");
        assert!(e.contains("`creation_time`"), "{e}");
    }

    #[test]
    fn negative_and_backwards_times_are_refused_with_their_line() {
        let dir = tempfile::tempdir().expect("test input");
        write(dir.path(), NODE_FILE, NODES);
        write(
            dir.path(),
            POD_FILE,
            &format!("{HEADER}p0,1,1,1,500,,LS,Running,-4,100,5\n"),
        );
        let e = Trace::read(dir.path(), None)
            .expect_err("must fail")
            .to_string();
        assert!(
            e.contains("line 2, column `creation_time`") && e.contains("negative"),
            "{e}"
        );
        write(
            dir.path(),
            POD_FILE,
            &format!(
                "{HEADER}p0,1,1,1,500,,LS,Running,0,100,5\np1,1,1,1,500,,BE,Running,50,10,50\n"
            ),
        );
        let e = Trace::read(dir.path(), None)
            .expect_err("must fail")
            .to_string();
        assert!(
            e.contains("line 3, column `deletion_time`") && e.contains("`p1`"),
            "{e}"
        );
    }
}
