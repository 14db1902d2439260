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
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("parent folder {} does not exist", parent.display()),
        ));
    }
    Ok(parent.join(format!(
        ".{}.tmp-{}",
        name.to_string_lossy(),
        std::process::id()
    )))
}

/// Refuses an `out` that already exists, with `error(out, why)`. [`write_folder`] checks it;
/// commands also call it before any long work, so that a run does not end in this error.
pub fn refuse_existing<E>(out: &Path, error: impl Fn(&Path, String) -> E) -> Result<(), E> {
    if out.exists() {
        return Err(error(
            out,
            "output folder already exists; choose a new one or remove it first".into(),
        ));
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
