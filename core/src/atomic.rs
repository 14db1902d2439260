//! Writing a whole folder so that readers see it complete or not at all.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// `<parent>/.<name>.tmp-<pid>`: where a folder is built before it is renamed to `out`.
pub fn staging_path(out: &Path) -> io::Result<PathBuf> {
    let name = out.file_name().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "output path has no folder name",
        )
    })?;
    let parent = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    if !parent.is_dir() {
        let why = if parent.exists() {
            "is not a folder"
        } else {
            "does not exist"
        };
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("parent folder {} {why}", parent.display()),
        ));
    }
    Ok(parent.join(format!(
        ".{}.tmp-{}",
        name.to_string_lossy(),
        std::process::id()
    )))
}

/// Refuses an `out` that already exists (a link to a missing path included), or whose folder
/// cannot be made: its parent missing or not a folder, or not writable (a temporary folder is
/// made beside it and removed), with `error(out, why)`. [`write_folder`] checks it; commands also
/// call it before any long work, so that a run does not end in this error.
pub fn refuse_existing<E>(out: &Path, error: impl Fn(&Path, String) -> E) -> Result<(), E> {
    if let Ok(meta) = out.symlink_metadata() {
        let why = if meta.file_type().is_symlink() && !out.exists() {
            "output path is a link to a path that does not exist; choose a new one or remove it \
             first"
        } else {
            "output folder already exists; choose a new one or remove it first"
        };
        return Err(error(out, why.into()));
    }
    let staging = staging_path(out).map_err(|e| error(out, e.to_string()))?;
    match fs::create_dir(&staging) {
        Ok(()) => {
            let _ = fs::remove_dir(&staging);
        }
        // Left by an earlier run of this process id: `write_folder` removes it.
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => {
            return Err(error(
                out,
                format!(
                    "cannot write beside it ({}: {e}); choose a writable folder",
                    staging.display()
                ),
            ));
        }
    }
    Ok(())
}

/// Builds the new folder `out` by calling `fill` on an empty temporary folder beside it, then
/// renames it into place. On any error nothing is left behind. `out` must not exist.
pub fn write_folder<E>(
    out: &Path,
    io_error: impl Fn(&Path, String) -> E,
    fill: impl FnOnce(&Path) -> Result<(), E>,
) -> Result<(), E> {
    refuse_existing(out, &io_error)?;
    let staging = staging_path(out).map_err(|e| io_error(out, e.to_string()))?;
    if staging.exists() {
        fs::remove_dir_all(&staging).map_err(|e| {
            io_error(
                &staging,
                format!("cannot remove a stale temporary folder: {e}"),
            )
        })?;
    }
    remove_abandoned(&staging);
    fs::create_dir_all(&staging).map_err(|e| io_error(&staging, format!("cannot create: {e}")))?;
    let result = fill(&staging).and_then(|()| {
        fs::rename(&staging, out).map_err(|e| io_error(out, format!("cannot move into place: {e}")))
    });
    if result.is_err() {
        let _ = fs::remove_dir_all(&staging);
    }
    result
}

/// How long a temporary folder of a process `/proc` does not list must have been left alone
/// before it is taken for abandoned: a writer in another PID namespace (another container on a
/// shared volume) is not listed, and fills its folder within moments of making it.
const ABANDONED_AFTER: std::time::Duration = std::time::Duration::from_secs(3600);

/// Removes the temporary folders beside `staging` that processes no longer running left for the
/// same output (a `kill -9` mid-write leaves one for good otherwise): unchanged for
/// [`ABANDONED_AFTER`], of a process id `/proc` does not list. Where `/proc` does not list
/// processes, and for a process id that is running, whatever it is, nothing is removed.
fn remove_abandoned(staging: &Path) {
    let (Some(parent), Some(name)) = (staging.parent(), staging.file_name()) else {
        return;
    };
    let name = name.to_string_lossy();
    let Some(prefix) = name.rfind('-').map(|k| &name[..=k]) else {
        return;
    };
    remove_abandoned_in(parent, prefix, |rest| rest.parse().ok());
}

/// The working folders of a duet command that are not its output (`simulate --feedback`'s
/// models): `<temp>/<prefix><pid>-<random>`, removed when the command ends, and those a killed
/// one left removed by the next as [`write_folder`]'s are.
pub fn working_folder(prefix: &str) -> io::Result<tempfile::TempDir> {
    working_folder_in(&std::env::temp_dir(), prefix)
}

fn working_folder_in(parent: &Path, prefix: &str) -> io::Result<tempfile::TempDir> {
    remove_abandoned_in(parent, prefix, |rest| {
        rest.split_once('-').and_then(|(pid, _)| pid.parse().ok())
    });
    tempfile::Builder::new()
        .prefix(&format!("{prefix}{}-", std::process::id()))
        .tempdir_in(parent)
}

/// Removes the folders in `parent` named `prefix` then what `pid_of` reads a process id from,
/// where that process is not running and the folder was left alone for [`ABANDONED_AFTER`].
fn remove_abandoned_in(parent: &Path, prefix: &str, pid_of: impl Fn(&str) -> Option<u32>) {
    if !Path::new("/proc/self").exists() {
        return;
    }
    let Ok(entries) = fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let file = entry.file_name();
        let file = file.to_string_lossy();
        let Some(pid) = file.strip_prefix(prefix).and_then(&pid_of) else {
            continue;
        };
        let left_alone = entry
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age >= ABANDONED_AFTER);
        if left_alone
            && !Path::new(&format!("/proc/{pid}")).exists()
            && entry.file_type().is_ok_and(|t| t.is_dir())
        {
            let _ = fs::remove_dir_all(entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(out: &Path) -> Option<String> {
        refuse_existing(out, |p, m| format!("{}: {m}", p.display())).err()
    }

    #[test]
    fn an_output_that_cannot_be_made_is_refused_before_any_work() {
        let dir = tempfile::tempdir().expect("tmp");
        let fresh = dir.path().join("fresh");
        assert_eq!(refused(&fresh), None);
        // The probe leaves nothing behind.
        assert_eq!(fs::read_dir(dir.path()).expect("dir").count(), 0);
        fs::create_dir(&fresh).expect("mkdir");
        assert!(refused(&fresh).expect("refused").contains("already exists"));
        let file = dir.path().join("file");
        fs::write(&file, b"x").expect("file");
        let under_file = refused(&file.join("out")).expect("refused");
        assert!(under_file.contains("is not a folder"), "{under_file}");
        let missing = refused(&dir.path().join("nowhere/out")).expect("refused");
        assert!(missing.contains("does not exist"), "{missing}");
        #[cfg(unix)]
        {
            let link = dir.path().join("link");
            std::os::unix::fs::symlink(dir.path().join("gone"), &link).expect("symlink");
            let dangling = refused(&link).expect("refused");
            assert!(
                dangling.contains("a link to a path that does not exist"),
                "{dangling}"
            );
        }
        // A folder where nothing can be made (even by root).
        #[cfg(target_os = "linux")]
        {
            let proc_out = refused(Path::new("/proc/duet-out")).expect("refused");
            assert!(proc_out.contains("cannot write beside it"), "{proc_out}");
        }
    }

    #[test]
    fn a_folder_left_by_a_process_that_is_gone_is_removed_by_the_next_write() {
        if !Path::new("/proc/self").exists() {
            return;
        }
        let dir = tempfile::tempdir().expect("tmp");
        let out = dir.path().join("model");
        // A process id above Linux's largest is never running; process 1 always is.
        let gone = dir.path().join(".model.tmp-4194305");
        let running = dir.path().join(".model.tmp-1");
        let other = dir.path().join(".other.tmp-4194305");
        // Made moments ago: perhaps a writer in another PID namespace.
        let recent = dir.path().join(".model.tmp-4194306");
        let two_hours_ago = std::time::SystemTime::now() - 2 * ABANDONED_AFTER;
        for d in [&gone, &running, &other, &recent] {
            fs::create_dir(d).expect("mkdir");
            if d != &recent {
                fs::File::open(d)
                    .and_then(|f| f.set_modified(two_hours_ago))
                    .expect("age the folder");
            }
        }
        write_folder(
            &out,
            |p, m| format!("{}: {m}", p.display()),
            |d| fs::write(d.join("f"), "x").map_err(|e| e.to_string()),
        )
        .expect("written");
        assert!(out.join("f").is_file());
        assert!(!gone.exists(), "left by a process that is gone");
        assert!(running.exists() && other.exists() && recent.exists());
    }

    #[test]
    fn a_working_folder_goes_when_dropped_and_one_a_killed_run_left_with_the_next() {
        if !Path::new("/proc/self").exists() {
            return;
        }
        let dir = tempfile::tempdir().expect("tmp");
        let gone = dir.path().join("duet-feedback-4194305-abc123");
        let running = dir.path().join("duet-feedback-1-abc123");
        let two_hours_ago = std::time::SystemTime::now() - 2 * ABANDONED_AFTER;
        for d in [&gone, &running] {
            fs::create_dir(d).expect("mkdir");
            fs::File::open(d)
                .and_then(|f| f.set_modified(two_hours_ago))
                .expect("age the folder");
        }
        let work = working_folder_in(dir.path(), "duet-feedback-").expect("made");
        let name = work
            .path()
            .file_name()
            .expect("name")
            .to_string_lossy()
            .into_owned();
        assert!(
            name.starts_with(&format!("duet-feedback-{}-", std::process::id())),
            "{name}"
        );
        assert!(!gone.exists(), "left by a process that is gone");
        assert!(running.exists());
        let path = work.path().to_path_buf();
        drop(work);
        assert!(!path.exists());
    }
}
