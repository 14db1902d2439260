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
    fs::create_dir_all(&staging).map_err(|e| io_error(&staging, format!("cannot create: {e}")))?;
    let result = fill(&staging).and_then(|()| {
        fs::rename(&staging, out).map_err(|e| io_error(out, format!("cannot move into place: {e}")))
    });
    if result.is_err() {
        let _ = fs::remove_dir_all(&staging);
    }
    result
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
}
