//! Small durable-file helpers shared by the log store and the state machine.
//!
//! Invariants:
//! - [`write_atomic`] leaves either the old or the new content at `path`, never a mix or a
//!   partial file: it writes `<path>.tmp`, fsyncs it, renames it over `path`, then fsyncs the
//!   directory so the rename itself survives a crash.
//! - Leftover `*.tmp` files are garbage from an interrupted write and may be deleted at open.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::MetadataError;

/// Suffix of the temporary file [`write_atomic`] writes before renaming.
pub(crate) const TMP_SUFFIX: &str = ".tmp";

fn tmp_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(TMP_SUFFIX);
    PathBuf::from(name)
}

/// Fsyncs a directory, making renames and file creations inside it durable.
pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Replaces the content of `path` with `bytes`, atomically and durably.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    replace_file(path, bytes).map(drop)
}

/// Like [`write_atomic`], and returns the new file opened for reading and writing — the very
/// file now at `path`, with no window in which a failed re-open could leave the caller holding
/// the replaced one.
pub(crate) fn replace_file(path: &Path, bytes: &[u8]) -> io::Result<File> {
    let tmp = tmp_path(path);
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&tmp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    fs::rename(&tmp, path)?;
    let parent = path.parent().unwrap_or_else(|| Path::new("."));
    sync_dir(parent)?;
    Ok(file)
}

/// Serializes `value` as JSON and writes it with [`write_atomic`].
pub(crate) fn write_json_atomic<T: Serialize>(path: &Path, value: &T) -> Result<(), MetadataError> {
    let bytes = serde_json::to_vec_pretty(value)
        .map_err(|e| MetadataError::Corrupt(format!("cannot encode {}: {e}", path.display())))?;
    write_atomic(path, &bytes)
        .map_err(|e| MetadataError::io(format!("writing {}", path.display()), e))
}

/// Reads a JSON file written by [`write_json_atomic`]; `None` if it does not exist.
pub(crate) fn read_json<T: DeserializeOwned>(path: &Path) -> Result<Option<T>, MetadataError> {
    let bytes = match fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(MetadataError::io(format!("reading {}", path.display()), e)),
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| MetadataError::Corrupt(format!("cannot decode {}: {e}", path.display())))
}

/// Deletes leftover `*.tmp` files of interrupted [`write_atomic`] calls in `dir`.
pub(crate) fn remove_tmp_files(dir: &Path) -> Result<(), MetadataError> {
    let entries = fs::read_dir(dir)
        .map_err(|e| MetadataError::io(format!("listing {}", dir.display()), e))?;
    for entry in entries {
        let entry =
            entry.map_err(|e| MetadataError::io(format!("listing {}", dir.display()), e))?;
        let path = entry.path();
        let is_tmp = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.ends_with(TMP_SUFFIX));
        if is_tmp && path.is_file() {
            fs::remove_file(&path)
                .map_err(|e| MetadataError::io(format!("removing {}", path.display()), e))?;
        }
    }
    Ok(())
}

/// Creates `dir` (and parents) if missing.
pub(crate) fn create_dir(dir: &Path) -> Result<(), MetadataError> {
    fs::create_dir_all(dir).map_err(|e| MetadataError::io(format!("creating {}", dir.display()), e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_atomic_replaces_content_and_leaves_no_temp_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("x.json");
        write_json_atomic(&path, &vec![1, 2, 3]).expect("write");
        write_json_atomic(&path, &vec![4]).expect("rewrite");
        assert_eq!(read_json::<Vec<i32>>(&path).expect("read"), Some(vec![4]));
        assert!(!tmp_path(&path).exists());
        assert_eq!(
            read_json::<Vec<i32>>(&dir.path().join("missing")).expect("read"),
            None
        );
    }

    #[test]
    fn leftover_temp_files_are_removed() {
        let dir = tempfile::tempdir().expect("tempdir");
        fs::write(dir.path().join("vote.json.tmp"), b"garbage").expect("write");
        fs::write(dir.path().join("keep.json"), b"{}").expect("write");
        remove_tmp_files(dir.path()).expect("cleanup");
        assert!(!dir.path().join("vote.json.tmp").exists());
        assert!(dir.path().join("keep.json").exists());
    }

    #[test]
    fn a_damaged_json_file_is_reported_as_corrupt() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("vote.json");
        fs::write(&path, b"{not json").expect("write");
        let err = read_json::<Vec<i32>>(&path).expect_err("must fail");
        assert!(matches!(err, MetadataError::Corrupt(_)), "{err}");
    }
}
