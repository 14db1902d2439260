//! Inference engines: the same model run by Burn (the `Flex` CPU backend) or by ONNX Runtime.
//!
//! An engine takes encoded pairs, `rows x width` floats row-major, and returns the ensemble's mean
//! outputs, `rows x OUTPUTS`. Both read the same artifact folder: Burn its records, ONNX Runtime
//! `model.onnx`, which `duet train` wrote from those records.

use std::fmt;
use std::path::Path;
use std::str::FromStr;
use std::sync::{Mutex, OnceLock};

use crate::artifact::ONNX_FILE;
use crate::network::{Mlp, OUTPUTS, ensemble_forward};
use crate::onnx;
use burn::backend::Flex;
use ort::session::Session;
use ort::value::TensorRef;

/// Which engine runs the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EngineKind {
    Burn,
    Onnx,
}

impl EngineKind {
    pub fn as_str(self) -> &'static str {
        match self {
            EngineKind::Burn => "burn",
            EngineKind::Onnx => "onnx",
        }
    }
}

impl fmt::Display for EngineKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for EngineKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "burn" => Ok(EngineKind::Burn),
            "onnx" => Ok(EngineKind::Onnx),
            _ => Err(format!("unknown engine `{s}`, expected burn or onnx")),
        }
    }
}

/// Runs a model on encoded pairs.
pub trait Engine: Send + Sync + fmt::Debug {
    fn kind(&self) -> EngineKind;
    /// The ensemble's mean outputs for `inputs.len() / width` rows (taken by value: the
    /// engines consume the buffer without copying it).
    fn run(&self, inputs: Vec<f32>) -> Result<Vec<f32>, String>;

    /// `run` on one thread, for callers that already split the work over the cores.
    fn run_serial(&self, inputs: Vec<f32>) -> Result<Vec<f32>, String> {
        self.run(inputs)
    }
}

/// Burn on the CPU: every ensemble member's forward pass, averaged.
#[derive(Debug)]
pub struct BurnEngine {
    nets: Vec<Mlp<Flex>>,
    width: usize,
}

impl BurnEngine {
    pub fn new(nets: Vec<Mlp<Flex>>, width: usize) -> BurnEngine {
        BurnEngine { nets, width }
    }
}

impl Engine for BurnEngine {
    fn kind(&self) -> EngineKind {
        EngineKind::Burn
    }

    fn run(&self, inputs: Vec<f32>) -> Result<Vec<f32>, String> {
        let rows = inputs.len() / self.width;
        let out = ensemble_forward(&self.nets, inputs, self.width, &Default::default());
        if out.len() != rows * OUTPUTS {
            return Err(format!(
                "Burn returned {} values for {rows} rows",
                out.len()
            ));
        }
        Ok(out)
    }
}

/// ONNX Runtime allows one environment per process; every session shares it.
static ORT: OnceLock<Result<ort::environment::Environment, String>> = OnceLock::new();

/// The environment variable naming ONNX Runtime's shared library (`scripts/python-env.sh`
/// prints it).
pub const ORT_DYLIB_PATH: &str = "ORT_DYLIB_PATH";

fn ort_environment() -> Result<&'static ort::environment::Environment, String> {
    ORT.get_or_init(|| {
        let path = std::env::var(ORT_DYLIB_PATH).map_err(|_| {
            format!(
                "the onnx engine needs ONNX Runtime: set {ORT_DYLIB_PATH} to its shared library \
                 (`eval \"$(scripts/python-env.sh)\"` installs it and sets it)"
            )
        })?;
        let builder = ort::init_from(&path).map_err(|e| format!("{ORT_DYLIB_PATH}={path}: {e}"))?;
        builder
            .with_name("duet")
            .build()
            .map_err(|e| format!("ONNX Runtime environment: {e}"))
    })
    .as_ref()
    .map_err(Clone::clone)
}

/// Batches up to this many rows run on one session: splitting them costs more than it saves.
const SMALL_BATCH_ROWS: usize = 256;

/// ONNX Runtime on the CPU: one single-threaded session per core. A small batch runs on any
/// idle one; a large batch is split into one slice per core, run side by side (measured faster
/// than ONNX Runtime's own intra-op threads on these narrow layers, see BENCHMARKS.md).
#[derive(Debug)]
pub struct OnnxEngine {
    small: Vec<Mutex<Session>>,
    width: usize,
}

fn session(
    env: &ort::environment::Environment,
    bytes: &[u8],
    path: &Path,
) -> Result<Session, String> {
    Session::builder(env)
        .map_err(|e| e.to_string())?
        .with_intra_threads(1)
        .map_err(|e| e.to_string())?
        // The cores are shared with the HTTP workers: idle threads sleep, not spin.
        .with_intra_op_spinning(false)
        .map_err(|e| e.to_string())?
        .commit_from_memory(bytes)
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// Any idle session of `pool`, else wait for the first.
fn take(pool: &[Mutex<Session>]) -> Result<std::sync::MutexGuard<'_, Session>, String> {
    pool.iter()
        .find_map(|s| s.try_lock().ok())
        .map_or_else(|| pool[0].lock(), Ok)
        .map_err(|_| "an ONNX Runtime session panicked".to_string())
}

impl OnnxEngine {
    /// Loads `model.onnx` from the artifact folder `dir`.
    pub fn load(dir: &Path, width: usize) -> Result<OnnxEngine, String> {
        let env = ort_environment()?;
        let path = dir.join(ONNX_FILE);
        let bytes = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        let small = (0..cores)
            .map(|_| session(env, &bytes, &path).map(Mutex::new))
            .collect::<Result<_, _>>()?;
        Ok(OnnxEngine { small, width })
    }
}

/// Runs `rows` encoded rows on one session.
fn run_on(session: &mut Session, data: &[f32], width: usize) -> Result<Vec<f32>, String> {
    let rows = data.len() / width;
    let tensor = TensorRef::from_array_view(([rows, width], data)).map_err(|e| e.to_string())?;
    let outputs = session
        .run(ort::inputs![onnx::INPUT => tensor])
        .map_err(|e| e.to_string())?;
    let (_, values) = outputs[onnx::OUTPUT]
        .try_extract_tensor::<f32>()
        .map_err(|e| e.to_string())?;
    if values.len() != rows * OUTPUTS {
        return Err(format!(
            "ONNX Runtime returned {} values for {rows} rows",
            values.len()
        ));
    }
    Ok(values.to_vec())
}

impl Engine for OnnxEngine {
    fn kind(&self) -> EngineKind {
        EngineKind::Onnx
    }

    fn run_serial(&self, inputs: Vec<f32>) -> Result<Vec<f32>, String> {
        run_on(&mut *take(&self.small)?, &inputs, self.width)
    }

    fn run(&self, inputs: Vec<f32>) -> Result<Vec<f32>, String> {
        let rows = inputs.len() / self.width;
        let cores = self.small.len();
        if rows <= SMALL_BATCH_ROWS || cores < 2 {
            return run_on(&mut *take(&self.small)?, &inputs, self.width);
        }
        // A large batch: one slice of rows per core, each on its own single-threaded session.
        let chunk = rows.div_ceil(cores) * self.width;
        let chunks: Vec<&[f32]> = inputs.chunks(chunk).collect();
        let parts = duet_core::parallel::each(chunks.len(), |k| {
            let mut session = self.small[k]
                .lock()
                .map_err(|_| "an ONNX Runtime session panicked".to_string())?;
            run_on(&mut session, chunks[k], self.width)
        });
        let mut out = Vec::with_capacity(rows * OUTPUTS);
        for part in parts {
            out.extend(part.map_err(|_| "an ONNX Runtime worker panicked".to_string())??);
        }
        Ok(out)
    }
}
