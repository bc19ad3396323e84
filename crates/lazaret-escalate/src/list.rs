//! `lazaret-escalate --list-state DIR...`: the facts of every path under
//! the given persistent directories of a pod on a cluster (issue 32), for
//! the coordinator's `state diff` (`lazaret_coordinator::state_anchor::pod`).
//! The pod's image may have no GNU `find` (busybox has no `-printf`), so
//! the walk is here, in the static binary the pod already gets.
//!
//! Output: one record per path, sorted by directory and path, each field
//! ended by a NUL byte: the directory's index among the arguments, find's
//! kind letter (`f d l c b p s`), size, mtime and ctime (`SECONDS.NANOS`),
//! permission bits (octal), uid, gid, link target (empty but for a link)
//! and the path relative to its directory. The top directories themselves
//! are not listed. Links are never followed and nothing is opened but
//! directories. A path that vanishes during the walk is skipped; any other
//! failure ends the listing with a one-line reason and status 1.

use std::io::{BufWriter, ErrorKind, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

/// Lists `dirs` on stdout.
pub fn run(dirs: &[String]) -> Result<(), String> {
    let stdout = std::io::stdout();
    let mut output = BufWriter::with_capacity(1 << 16, stdout.lock());
    for (index, dir) in dirs.iter().enumerate() {
        list_dir(index, Path::new(dir), &mut output)?;
    }
    output.flush().map_err(|error| format!("cannot write the listing: {error}"))
}

fn list_dir(index: usize, root: &Path, output: &mut impl Write) -> Result<(), String> {
    let mut pending = vec![PathBuf::new()];
    while let Some(relative_dir) = pending.pop() {
        let dir = root.join(&relative_dir);
        let mut children = match std::fs::read_dir(&dir) {
            Ok(children) => children.filter_map(Result::ok).map(|child| child.file_name()).collect::<Vec<_>>(),
            // The top directory may be gone; a subdirectory deleted or
            // replaced during the walk is skipped.
            Err(error) if matches!(error.kind(), ErrorKind::NotFound | ErrorKind::NotADirectory) => continue,
            Err(error) => return Err(format!("cannot list {}: {error}", dir.display())),
        };
        children.sort();
        let mut subdirs = Vec::new();
        for name in children {
            let relative = relative_dir.join(&name);
            let path = root.join(&relative);
            let metadata = match std::fs::symlink_metadata(&path) {
                Ok(metadata) => metadata,
                Err(error) if error.kind() == ErrorKind::NotFound => continue,
                Err(error) => return Err(format!("cannot stat {}: {error}", path.display())),
            };
            let file_type = metadata.file_type();
            let kind = if file_type.is_file() {
                b'f'
            } else if file_type.is_dir() {
                subdirs.push(relative.clone());
                b'd'
            } else if file_type.is_symlink() {
                b'l'
            } else if file_type.is_char_device() {
                b'c'
            } else if file_type.is_block_device() {
                b'b'
            } else if file_type.is_fifo() {
                b'p'
            } else if file_type.is_socket() {
                b's'
            } else {
                b'?'
            };
            let target = if kind == b'l' {
                match std::fs::read_link(&path) {
                    Ok(target) => target.into_os_string(),
                    Err(error) if error.kind() == ErrorKind::NotFound => continue,
                    Err(error) => return Err(format!("cannot read the link {}: {error}", path.display())),
                }
            } else {
                Default::default()
            };
            let fields = format!(
                "{index}\0{kind}\0{size}\0{mtime}.{mtime_nsec:09}\0{ctime}.{ctime_nsec:09}\0{mode:o}\0{uid}\0{gid}\0",
                kind = char::from(kind),
                size = metadata.size(),
                mtime = metadata.mtime(),
                mtime_nsec = metadata.mtime_nsec(),
                ctime = metadata.ctime(),
                ctime_nsec = metadata.ctime_nsec(),
                mode = metadata.mode() & 0o7777,
                uid = metadata.uid(),
                gid = metadata.gid(),
            );
            let written = output
                .write_all(fields.as_bytes())
                .and_then(|()| output.write_all(target.as_bytes()))
                .and_then(|()| output.write_all(b"\0"))
                .and_then(|()| output.write_all(relative.as_os_str().as_bytes()))
                .and_then(|()| output.write_all(b"\0"));
            written.map_err(|error| format!("cannot write the listing: {error}"))?;
        }
        pending.extend(subdirs.into_iter().rev());
    }
    Ok(())
}
