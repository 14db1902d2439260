//! The CUDA Multi-Process Service for the `mps` mode: the control daemon started with private
//! pipe and log folders, each client's active-thread percentage set through its environment,
//! and the daemon always shut down (on drop: the end of the campaign, an error, or an interrupt
//! the campaign turns into a clean stop).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const CONTROL: &str = "nvidia-cuda-mps-control";

/// A running MPS control daemon.
#[derive(Debug)]
pub struct MpsDaemon {
    pipe: PathBuf,
    log: PathBuf,
}

impl MpsDaemon {
    /// Starts the daemon with its folders under `dir`; `Err` says why the mode is skipped.
    pub fn start(dir: &Path) -> Result<MpsDaemon, String> {
        let (pipe, log) = (dir.join("mps-pipe"), dir.join("mps-log"));
        for d in [&pipe, &log] {
            std::fs::create_dir_all(d).map_err(|e| format!("MPS: {}: {e}", d.display()))?;
        }
        let status = Command::new(CONTROL)
            .arg("-d")
            .env("CUDA_MPS_PIPE_DIRECTORY", &pipe)
            .env("CUDA_MPS_LOG_DIRECTORY", &log)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .map_err(|e| {
                format!("MPS unavailable: cannot run {CONTROL} ({e}); the mps mode is skipped")
            })?;
        if !status.status.success() {
            let log_tail = std::fs::read_to_string(log.join("control.log")).unwrap_or_default();
            return Err(format!(
                "MPS unavailable: {CONTROL} -d failed ({}): {}{}; the mps mode is skipped",
                status.status,
                String::from_utf8_lossy(&status.stderr).trim(),
                log_tail
                    .lines()
                    .last()
                    .map(|l| format!(" ({l})"))
                    .unwrap_or_default()
            ));
        }
        Ok(MpsDaemon { pipe, log })
    }

    /// The environment of a client limited to `share` percent of the SMs.
    pub fn client_env(&self, share: Option<f64>) -> Vec<(String, String)> {
        let mut env = vec![
            (
                "CUDA_MPS_PIPE_DIRECTORY".to_string(),
                self.pipe.display().to_string(),
            ),
            (
                "CUDA_MPS_LOG_DIRECTORY".to_string(),
                self.log.display().to_string(),
            ),
        ];
        if let Some(s) = share {
            env.push(("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE".into(), format!("{s}")));
        }
        env
    }
}

impl Drop for MpsDaemon {
    fn drop(&mut self) {
        let child = Command::new(CONTROL)
            .env("CUDA_MPS_PIPE_DIRECTORY", &self.pipe)
            .env("CUDA_MPS_LOG_DIRECTORY", &self.log)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        if let Ok(mut child) = child {
            if let Some(stdin) = child.stdin.as_mut() {
                let _ = stdin.write_all(b"quit\n");
            }
            let _ = child.wait();
        }
    }
}
