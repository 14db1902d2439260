//! The CUDA Multi-Process Service for the `mps` mode: the control daemon started with private
//! pipe and log folders, each client's active-thread percentage set through its environment,
//! and the daemon always shut down (`stop`, or on drop: the end of the campaign, an error, or an
//! interrupt the campaign turns into a clean stop) before its pipe folder is removed.
//!
//! The control binary is looked up on `PATH`, then where drivers and toolkits put it
//! (`/usr/local/nvidia/bin`, `/usr/local/cuda/bin`, `/usr/bin`). The control socket
//! (`<pipe folder>/control`) must fit a Unix socket address: where the campaign's folder is too
//! deep for that, the pipe folder is a short private one under `/tmp`.

use std::ffi::OsStr;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const CONTROL: &str = "nvidia-cuda-mps-control";

/// Where the control binary is looked for after `PATH`.
pub const CONTROL_FALLBACKS: [&str; 3] =
    ["/usr/local/nvidia/bin", "/usr/local/cuda/bin", "/usr/bin"];

/// The longest path a Unix socket address holds (108 bytes with the closing NUL).
pub const SOCKET_PATH_MAX: usize = 107;

/// The socket the control daemon listens on, inside the pipe folder.
const SOCKET: &str = "control";

/// Above this length the pipe folder inside the campaign's folder is not used: the daemon makes
/// other sockets beside `control`, so a margin is kept below [`SOCKET_PATH_MAX`].
const PREFERRED_SOCKET_PATH_MAX: usize = 80;

/// How long one question to the control daemon may take.
const ASK_TIMEOUT: Duration = Duration::from_secs(10);

/// A running MPS control daemon.
#[derive(Debug)]
pub struct MpsDaemon {
    control: PathBuf,
    pipe: PathBuf,
    log: PathBuf,
    stopped: bool,
}

/// The first `name` that is a file in `dirs`, in order.
pub fn find_in(name: &str, dirs: impl IntoIterator<Item = PathBuf>) -> Option<PathBuf> {
    dirs.into_iter()
        .filter(|d| !d.as_os_str().is_empty())
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// The control binary: on `path` (a `PATH` value), then in [`CONTROL_FALLBACKS`].
pub fn find_control(path: Option<&OsStr>) -> Option<PathBuf> {
    let on_path = path.map(|p| std::env::split_paths(p).collect::<Vec<_>>());
    let dirs = on_path
        .unwrap_or_default()
        .into_iter()
        .chain(CONTROL_FALLBACKS.iter().map(PathBuf::from));
    find_in(CONTROL, dirs)
}

fn socket_len(pipe: &Path) -> usize {
    pipe.join(SOCKET).as_os_str().len()
}

/// The pipe folder for a daemon whose campaign folder is `dir`: `dir/mps-pipe` where its socket
/// path is short, else a new private folder under `tmp` (`true`: duet made it and removes it).
/// Creates the folder.
pub fn pipe_dir(dir: &Path, tmp: &Path) -> Result<(PathBuf, bool), String> {
    let preferred = dir.join("mps-pipe");
    if socket_len(&preferred) <= PREFERRED_SOCKET_PATH_MAX {
        std::fs::create_dir_all(&preferred)
            .map_err(|e| format!("MPS: {}: {e}", preferred.display()))?;
        return Ok((preferred, false));
    }
    let pid = std::process::id();
    for k in 0..100 {
        let candidate = if k == 0 {
            tmp.join(format!("duet-mps-{pid}"))
        } else {
            tmp.join(format!("duet-mps-{pid}-{k}"))
        };
        if socket_len(&candidate) > SOCKET_PATH_MAX {
            return Err(format!(
                "MPS: the control socket {} would be {} bytes, over the {SOCKET_PATH_MAX} a Unix \
                 socket path holds; run the campaign from a shorter folder; the mps mode is skipped",
                candidate.join(SOCKET).display(),
                socket_len(&candidate)
            ));
        }
        // A folder of its own: one that exists may belong to another daemon.
        match std::fs::create_dir(&candidate) {
            Ok(()) => return Ok((candidate, true)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => {
                return Err(format!(
                    "MPS: {}: {e}; the mps mode is skipped",
                    candidate.display()
                ));
            }
        }
    }
    Err(format!(
        "MPS: no free pipe folder under {}; the mps mode is skipped",
        tmp.display()
    ))
}

impl MpsDaemon {
    /// Starts the daemon with its folders under `dir` (the pipe folder under `/tmp` where `dir`
    /// is too deep for the socket); `Err` says why the mode is skipped.
    pub fn start(dir: &Path) -> Result<MpsDaemon, String> {
        let control = find_control(std::env::var_os("PATH").as_deref()).ok_or_else(|| {
            format!(
                "MPS unavailable: {CONTROL} is neither on PATH nor in {}; the mps mode is skipped",
                CONTROL_FALLBACKS.join(", ")
            )
        })?;
        Self::start_with(&control, dir, Path::new("/tmp"))
    }

    /// Starts the daemon through the control binary `control`.
    pub fn start_with(control: &Path, dir: &Path, tmp: &Path) -> Result<MpsDaemon, String> {
        let log = dir.join("mps-log");
        std::fs::create_dir_all(&log).map_err(|e| format!("MPS: {}: {e}", log.display()))?;
        let (pipe, owned) = pipe_dir(dir, tmp)?;
        let status = Command::new(control)
            .arg("-d")
            .env("CUDA_MPS_PIPE_DIRECTORY", &pipe)
            .env("CUDA_MPS_LOG_DIRECTORY", &log)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output();
        let failure = match status {
            Err(e) => Some(format!(
                "MPS unavailable: cannot run {} ({e}); the mps mode is skipped",
                control.display()
            )),
            Ok(s) if !s.status.success() => {
                let log_tail = std::fs::read_to_string(log.join("control.log")).unwrap_or_default();
                Some(format!(
                    "MPS unavailable: {} -d failed ({}): {}{}; the mps mode is skipped",
                    control.display(),
                    s.status,
                    String::from_utf8_lossy(&s.stderr).trim(),
                    log_tail
                        .lines()
                        .last()
                        .map(|l| format!(" ({l})"))
                        .unwrap_or_default()
                ))
            }
            Ok(_) => None,
        };
        if let Some(why) = failure {
            if owned {
                let _ = std::fs::remove_dir_all(&pipe);
            }
            return Err(why);
        }
        Ok(MpsDaemon {
            control: control.to_path_buf(),
            pipe,
            log,
            stopped: false,
        })
    }

    /// The pipe folder (the daemon's sockets).
    pub fn pipe(&self) -> &Path {
        &self.pipe
    }

    /// Sends one command to the daemon through the control binary; its answer, or why there is
    /// none (failed, or no answer within `timeout`).
    pub fn ask(&self, command: &str, timeout: Duration) -> Result<String, String> {
        let mut child = Command::new(&self.control)
            .env("CUDA_MPS_PIPE_DIRECTORY", &self.pipe)
            .env("CUDA_MPS_LOG_DIRECTORY", &self.log)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("{}: {e}", self.control.display()))?;
        if let Some(mut stdin) = child.stdin.take() {
            let _ = stdin.write_all(format!("{command}\n").as_bytes());
        }
        let read = |s: Option<Box<dyn Read + Send>>| {
            std::thread::spawn(move || {
                let mut text = String::new();
                if let Some(mut s) = s {
                    let _ = s.read_to_string(&mut text);
                }
                text
            })
        };
        let out = read(
            child
                .stdout
                .take()
                .map(|s| Box::new(s) as Box<dyn Read + Send>),
        );
        let err = read(
            child
                .stderr
                .take()
                .map(|s| Box::new(s) as Box<dyn Read + Send>),
        );
        let deadline = Instant::now() + timeout;
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                Ok(None) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(format!(
                        "`{command}`: no answer from the MPS control daemon within {:.0} s",
                        timeout.as_secs_f64()
                    ));
                }
                Err(e) => return Err(format!("`{command}`: {e}")),
            }
        };
        let (out, err) = (
            out.join().unwrap_or_default(),
            err.join().unwrap_or_default(),
        );
        if status.success() {
            Ok(out.trim().to_string())
        } else {
            let said = [out.trim(), err.trim()]
                .into_iter()
                .filter(|s| !s.is_empty())
                .collect::<Vec<_>>()
                .join(" ");
            Err(format!("`{command}` failed ({status}): {said}"))
        }
    }

    /// The MPS servers the daemon runs (their PIDs); empty before a client connected.
    pub fn servers(&self) -> Result<Vec<String>, String> {
        Ok(self
            .ask("get_server_list", ASK_TIMEOUT)?
            .split_whitespace()
            .map(str::to_string)
            .collect())
    }

    /// The client PIDs of server `server`.
    pub fn clients(&self, server: &str) -> Result<Vec<String>, String> {
        Ok(self
            .ask(&format!("get_client_list {server}"), ASK_TIMEOUT)?
            .split_whitespace()
            .map(str::to_string)
            .collect())
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

    /// Tells the daemon to quit (while its pipe folder still exists), then removes the pipe
    /// folder; `Err` says why the daemon may still run.
    pub fn stop(mut self) -> Result<(), String> {
        self.shut_down()
    }

    fn shut_down(&mut self) -> Result<(), String> {
        if self.stopped {
            return Ok(());
        }
        self.stopped = true;
        let quit = self.ask("quit", ASK_TIMEOUT);
        let _ = std::fs::remove_dir_all(&self.pipe);
        quit.map(|_| ()).map_err(|why| {
            format!(
                "MPS: the control daemon did not take `quit` ({why}); it may still run with \
                 pipe folder {}",
                self.pipe.display()
            )
        })
    }
}

impl Drop for MpsDaemon {
    fn drop(&mut self) {
        let _ = self.shut_down();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn executable(path: &Path, script: &str) {
        use std::os::unix::fs::PermissionsExt;
        std::fs::write(path, script).expect("script");
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }

    /// A stand-in for the control binary: `-d` records the start; in client mode every command
    /// read is recorded with whether the pipe folder still exists, and answered.
    fn fake_control(dir: &Path, record: &Path, servers: &str) -> PathBuf {
        let path = dir.join(CONTROL);
        let script = format!(
            "#!/bin/sh\n\
             if [ \"$1\" = -d ]; then echo \"start $CUDA_MPS_PIPE_DIRECTORY\" >> {r}; exit 0; fi\n\
             while read cmd; do\n\
               if [ -d \"$CUDA_MPS_PIPE_DIRECTORY\" ]; then echo \"$cmd with-pipe\" >> {r}; \
               else echo \"$cmd no-pipe\" >> {r}; fi\n\
               case \"$cmd\" in get_server_list) echo '{servers}';; get_client_list*) echo 77;; esac\n\
             done\n",
            r = record.display()
        );
        executable(&path, &script);
        path
    }

    #[test]
    fn the_daemon_is_told_to_quit_before_its_pipe_folder_goes() {
        let dir = tempfile::tempdir().expect("tmp");
        let record = dir.path().join("record.txt");
        let control = fake_control(dir.path(), &record, "4242");
        let campaign = dir.path().join("campaign");
        let daemon = MpsDaemon::start_with(&control, &campaign, dir.path()).expect("started");
        let pipe = daemon.pipe().to_path_buf();
        assert!(pipe.is_dir());
        assert_eq!(daemon.servers().expect("servers"), ["4242"]);
        assert_eq!(daemon.clients("4242").expect("clients"), ["77"]);
        daemon.stop().expect("quit");
        assert!(!pipe.exists(), "the pipe folder is removed after the quit");
        let text = std::fs::read_to_string(&record).expect("record");
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("start "), "{text}");
        assert_eq!(lines.last(), Some(&"quit with-pipe"), "{text}");
        // Dropped without stop: quit as well.
        let daemon = MpsDaemon::start_with(&control, &campaign, dir.path()).expect("again");
        drop(daemon);
        let text = std::fs::read_to_string(&record).expect("record");
        assert_eq!(text.matches("quit with-pipe").count(), 2, "{text}");
    }

    #[test]
    fn a_deep_campaign_folder_gets_a_short_pipe_folder_and_an_impossible_one_an_error() {
        let dir = tempfile::tempdir().expect("tmp");
        let (pipe, owned) = pipe_dir(dir.path(), dir.path()).expect("short enough");
        assert_eq!(pipe, dir.path().join("mps-pipe"));
        assert!(!owned);
        let deep = dir.path().join("a".repeat(60)).join("b".repeat(60));
        let tmp = dir.path().join("t");
        std::fs::create_dir_all(&tmp).expect("tmp");
        let (first, owned) = pipe_dir(&deep, &tmp).expect("a short one");
        assert!(owned && first.starts_with(&tmp) && first.is_dir());
        assert!(first.join("control").as_os_str().len() <= SOCKET_PATH_MAX);
        // Two daemons of one process never share a folder.
        let (second, _) = pipe_dir(&deep, &tmp).expect("another");
        assert_ne!(first, second);
        // Not even the short folder fits: said, with the limit.
        let why = pipe_dir(&deep, &deep).expect_err("too long");
        assert!(
            why.contains("107") && why.contains("mps mode is skipped"),
            "{why}"
        );
    }

    #[test]
    fn the_control_binary_is_found_on_path_then_in_the_driver_folders() {
        let dir = tempfile::tempdir().expect("tmp");
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        for d in [&a, &b] {
            std::fs::create_dir_all(d).expect("dir");
        }
        std::fs::write(b.join(CONTROL), "").expect("file");
        assert_eq!(
            find_in(CONTROL, [a.clone(), b.clone()]),
            Some(b.join(CONTROL))
        );
        assert_eq!(find_in(CONTROL, [a.clone()]), None);
        let path = std::env::join_paths([&a, &b]).expect("PATH");
        assert_eq!(find_control(Some(&path)), Some(b.join(CONTROL)));
        // Without it on PATH, only the driver folders remain (empty on this machine unless a
        // driver is installed).
        let found = find_control(Some(OsStr::new("")));
        assert!(found.is_none_or(|p| CONTROL_FALLBACKS.iter().any(|d| p.starts_with(d))));
    }

    #[test]
    fn a_silent_control_daemon_is_an_error_not_a_hang() {
        let dir = tempfile::tempdir().expect("tmp");
        let control = dir.path().join(CONTROL);
        executable(
            &control,
            "#!/bin/sh\n[ \"$1\" = -d ] && exit 0\nexec sleep 30\n",
        );
        let daemon = MpsDaemon::start_with(&control, dir.path(), dir.path()).expect("started");
        let started = Instant::now();
        let why = daemon
            .ask("get_server_list", Duration::from_millis(300))
            .expect_err("no answer");
        assert!(why.contains("no answer"), "{why}");
        assert!(started.elapsed() < Duration::from_secs(5));
        std::mem::forget(daemon);
    }
}
