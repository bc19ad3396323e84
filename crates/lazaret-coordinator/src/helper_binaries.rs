//! Finding the static helper binaries (`lazaret-escalate`, `lazaret-sidecar`)
//! and checking that they really are static: they run inside the sandbox and
//! in a `scratch` image, where no dynamic loader exists.

use std::path::{Path, PathBuf};

pub const HELPER_NAMES: [&str; 2] = ["lazaret-escalate", "lazaret-sidecar"];

/// Where a helper is looked for, in order: `$LAZARET_HELPER_DIR`, next to the
/// running `lazaret`, `../lib/lazaret/` from it (the installed layout:
/// `/usr/bin/lazaret` and `/usr/lib/lazaret/`, or the same under
/// `~/.local`), then the musl build directories of a source checkout.
pub fn candidate_paths(name: &str) -> Vec<PathBuf> {
    let mut directories = Vec::new();
    if let Some(dir) = std::env::var_os("LAZARET_HELPER_DIR") {
        directories.push(PathBuf::from(dir));
    }
    if let Some(exe_dir) = std::env::current_exe().ok().and_then(|exe| exe.parent().map(Path::to_path_buf)) {
        directories.push(exe_dir.clone());
        if let Some(prefix) = exe_dir.parent() {
            directories.push(prefix.join("lib").join("lazaret"));
        }
        // target/<profile>/lazaret -> target/x86_64-unknown-linux-musl/static/
        if let Some(target_dir) = exe_dir.parent() {
            for profile in ["static", "release", "debug"] {
                directories.push(target_dir.join("x86_64-unknown-linux-musl").join(profile));
            }
        }
    }
    directories.into_iter().map(|dir| dir.join(name)).collect()
}

/// The first static candidate; failing that, the first one that exists (so
/// that `doctor` can say what is wrong with it).
pub fn find(name: &str) -> Option<PathBuf> {
    let existing: Vec<PathBuf> = candidate_paths(name).into_iter().filter(|path| path.is_file()).collect();
    existing.iter().find(|path| linkage(path).is_ok_and(|linkage| linkage == Linkage::Static)).or(existing.first()).cloned()
}

/// The first line of `helper --version`, e.g. `lazaret-escalate 0.1.0 (commit 1a2b3c4d5e6f)`.
pub fn version(path: &Path) -> Option<String> {
    let output = std::process::Command::new(path).arg("--version").stdin(std::process::Stdio::null()).output().ok()?;
    let text = String::from_utf8_lossy(&output.stdout);
    output.status.success().then(|| text.lines().next().unwrap_or("").trim().to_owned())
}

/// How an ELF file is linked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Linkage {
    Static,
    Dynamic,
    NotElf,
}

const PT_INTERP: u32 = 3;

/// Reads the program headers of a 64-bit little-endian ELF file: a file with
/// a `PT_INTERP` header needs a dynamic loader; one without is static
/// (including static-pie).
pub fn linkage(path: &Path) -> std::io::Result<Linkage> {
    let bytes = std::fs::read(path)?;
    Ok(linkage_of(&bytes))
}

pub fn linkage_of(bytes: &[u8]) -> Linkage {
    let read_u16 = |at: usize| bytes.get(at..at + 2).map(|b| u16::from_le_bytes([b[0], b[1]]));
    let read_u32 = |at: usize| bytes.get(at..at + 4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
    let read_u64 = |at: usize| bytes.get(at..at + 8).and_then(|b| <[u8; 8]>::try_from(b).ok()).map(u64::from_le_bytes);
    // Magic, ELFCLASS64, ELFDATA2LSB.
    if bytes.get(..6) != Some(&[0x7f, b'E', b'L', b'F', 2, 1][..]) {
        return Linkage::NotElf;
    }
    let (Some(table), Some(entry_size), Some(count)) = (read_u64(0x20), read_u16(0x36), read_u16(0x38)) else {
        return Linkage::NotElf;
    };
    let Ok(table) = usize::try_from(table) else { return Linkage::NotElf };
    for index in 0..usize::from(count) {
        match read_u32(table + index * usize::from(entry_size)) {
            Some(PT_INTERP) => return Linkage::Dynamic,
            Some(_) => {}
            None => return Linkage::NotElf,
        }
    }
    Linkage::Static
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_tools_are_dynamic_and_text_is_not_elf() {
        assert_eq!(linkage(Path::new("/bin/sh")).expect("read /bin/sh"), Linkage::Dynamic);
        assert_eq!(linkage_of(b"#!/bin/sh\n"), Linkage::NotElf);
        assert_eq!(linkage_of(&[0x7f, b'E', b'L', b'F', 2, 1]), Linkage::NotElf);
    }
}
