//! `lazaret image build`: the default profile's image, built offline.
//!
//! No registry is reachable on many machines that need a sandbox, so the
//! image is assembled from files this host already has: the files of a few
//! Debian packages (a shell, coreutils, git and friends, as `dpkg-query -L`
//! lists them) plus the shared libraries their ELF files need (`ldd`). The
//! root file system is streamed as a tar archive into `podman import`.
//! A content key over every file (path, size, mtime, mode, link target) is
//! stored as an image label, so a rebuild happens only when something changed.

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use lazaret_coordinator::podman::Podman;
use sha2::{Digest, Sha256};

/// Bump when the recipe (packages, generated files, image settings) changes.
const RECIPE_VERSION: &str = "5";
pub(crate) const CONTENT_LABEL: &str = "io.lazaret.content";

/// Packages the image cannot do without.
/// `bsdutils` brings `script`, which gives sessions a terminal inside the
/// sandbox (see `session_terminal`).
const REQUIRED_PACKAGES: [&str; 5] = ["bash", "dash", "coreutils", "git", "bsdutils"];
/// Packages taken when installed on the host.
const OPTIONAL_PACKAGES: [&str; 18] = [
    "busybox",
    "grep",
    "sed",
    "findutils",
    "tar",
    "gzip",
    "xz-utils",
    "bzip2",
    "diffutils",
    "patch",
    "util-linux",
    "procps",
    "ncurses-base",
    "ncurses-bin",
    "less",
    "mawk",
    "hostname",
    "netcat-openbsd",
];

/// Merged-/usr links, taken from the host when they are links there.
const TOP_LEVEL_LINKS: [&str; 4] = ["bin", "sbin", "lib", "lib64"];

/// One entry of the image's root file system.
#[derive(Debug, Clone)]
pub(crate) enum Entry {
    File { source: PathBuf, mode: u32, size: u64, mtime: i64 },
    Symlink { target: PathBuf },
    Generated { contents: Vec<u8>, mode: u32 },
    Directory { mode: u32 },
}

pub fn build(tag: &str, force: bool) -> Result<u8> {
    let started = Instant::now();
    let podman = Podman::default();
    // Asked first: a podman that does not work fails here, not after the
    // files were collected and packed.
    let exists = podman.image_exists(tag)?;
    progress(&format!("collecting files for {tag} from this host's Debian packages"));
    let entries = collect_entries()?;
    let key = content_key(&format!("recipe {RECIPE_VERSION}"), &entries);
    if !force && exists && podman.image_label(tag, CONTENT_LABEL).as_deref() == Some(key.as_str()) {
        progress(&format!("{tag} is up to date (content {})", &key[..12]));
        return Ok(0);
    }
    let total_bytes: u64 = entries.values().map(|entry| if let Entry::File { size, .. } = entry { *size } else { 0 }).sum();
    progress(&format!("packing {} entries ({:.1} MB) into {tag}", entries.len(), total_bytes as f64 / 1e6));
    import(&podman, tag, &key, &entries, total_bytes)?;
    progress(&format!("built {tag} in {:.1} s", started.elapsed().as_secs_f64()));
    Ok(0)
}

pub(crate) fn progress(message: &str) {
    eprintln!("lazaret: {message}");
}

/// The image's root file system: destination path (relative, no leading
/// slash) to entry.
pub(crate) fn collect_entries() -> Result<BTreeMap<PathBuf, Entry>> {
    let mut wanted = REQUIRED_PACKAGES.to_vec();
    wanted.extend(OPTIONAL_PACKAGES);
    let installed = installed_packages(&wanted)?;
    for required in REQUIRED_PACKAGES {
        if !installed.iter().any(|package| package == required) {
            bail!("the Debian package `{required}` is not installed on this host; install it (apt-get install {required}) and retry");
        }
    }
    let mut entries = BTreeMap::new();
    for link in TOP_LEVEL_LINKS {
        if let Ok(target) = std::fs::read_link(Path::new("/").join(link)) {
            entries.insert(PathBuf::from(link), Entry::Symlink { target });
        }
    }
    add_package_files(&mut entries, &installed)?;
    add_generated_files(&mut entries);
    Ok(entries)
}

/// Adds the files of installed Debian `packages` (as `dpkg-query -L` lists
/// them) and the shared libraries of their ELF files.
pub(crate) fn add_package_files(entries: &mut BTreeMap<PathBuf, Entry>, packages: &[String]) -> Result<()> {
    let listed = run_text(
        "dpkg-query",
        &packages.iter().map(String::as_str).fold(vec!["-L"], |mut arguments, package| {
            arguments.push(package);
            arguments
        }),
    )?;
    let mut elf_files = Vec::new();
    for line in listed.lines() {
        let path = Path::new(line.trim());
        if path.is_absolute() {
            add_host_path(entries, path, &mut elf_files)?;
        }
    }
    for library in shared_libraries(&elf_files)? {
        add_host_path(entries, &library, &mut Vec::new())?;
    }
    Ok(())
}

/// Which of `packages` are installed on this host.
pub(crate) fn installed_packages(packages: &[&str]) -> Result<Vec<String>> {
    let mut arguments = vec!["-W", "-f", "${Package} ${db:Status-Status}\\n"];
    arguments.extend(packages);
    // dpkg-query exits 1 when some optional package is unknown; its stdout
    // still lists the known ones.
    let output = Command::new("dpkg-query")
        .args(&arguments)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .context("cannot run dpkg-query: the offline image is assembled from Debian packages, so a Debian-based host is needed")?;
    Ok(String::from_utf8_lossy(&output.stdout).lines().filter_map(|line| line.strip_suffix(" installed")).map(str::to_owned).collect())
}

pub(crate) fn run_text(program: &str, arguments: &[&str]) -> Result<String> {
    let output = Command::new(program).args(arguments).stdin(Stdio::null()).output().with_context(|| format!("cannot run {program}"))?;
    if !output.status.success() {
        bail!("`{program}` failed: {}", String::from_utf8_lossy(&output.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// Adds a host file or symlink at its canonical location (the parent
/// directory resolved, so `/bin/bash` lands in `usr/bin/bash` on a merged-usr
/// host). Symlinks pull in their targets. Directories are implied.
pub(crate) fn add_host_path(entries: &mut BTreeMap<PathBuf, Entry>, path: &Path, elf_files: &mut Vec<PathBuf>) -> Result<()> {
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else { return Ok(()) };
    let Ok(parent) = std::fs::canonicalize(parent) else { return Ok(()) };
    let host_path = parent.join(name);
    let Ok(relative) = host_path.strip_prefix("/") else { return Ok(()) };
    if entries.contains_key(relative) {
        return Ok(());
    }
    let Ok(metadata) = std::fs::symlink_metadata(&host_path) else { return Ok(()) };
    if metadata.file_type().is_symlink() {
        let target = std::fs::read_link(&host_path)?;
        entries.insert(relative.to_path_buf(), Entry::Symlink { target: target.clone() });
        let resolved = if target.is_absolute() { target } else { parent.join(target) };
        return add_host_path(entries, &resolved, elf_files);
    }
    if !metadata.is_file() {
        return Ok(());
    }
    // Never carry setuid or setgid bits into the sandbox.
    let mode = metadata.permissions().mode() & 0o777;
    entries.insert(relative.to_path_buf(), Entry::File { source: host_path.clone(), mode, size: metadata.len(), mtime: metadata.mtime() });
    if is_elf(&host_path) {
        elf_files.push(host_path);
    }
    Ok(())
}

pub(crate) fn is_elf(path: &Path) -> bool {
    let mut magic = [0u8; 4];
    std::fs::File::open(path).and_then(|mut file| std::io::Read::read_exact(&mut file, &mut magic)).is_ok() && magic == *b"\x7fELF"
}

/// The shared libraries (and the dynamic loader) of `elf_files`, from one
/// `ldd` run over all of them.
pub(crate) fn shared_libraries(elf_files: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut libraries = Vec::new();
    for chunk in elf_files.chunks(200) {
        let output = Command::new("ldd").args(chunk).stdin(Stdio::null()).stderr(Stdio::null()).output().context("cannot run ldd")?;
        for line in String::from_utf8_lossy(&output.stdout).lines() {
            if line.ends_with(':') {
                continue; // "/usr/bin/x:" header of a multi-file ldd run
            }
            for word in line.split_whitespace() {
                if word.starts_with('/') && !libraries.iter().any(|known: &PathBuf| known.as_os_str() == word) {
                    libraries.push(PathBuf::from(word));
                }
            }
        }
    }
    Ok(libraries)
}

fn add_generated_files(entries: &mut BTreeMap<PathBuf, Entry>) {
    let mut generated = |path: &str, contents: &str, mode: u32| {
        entries.insert(PathBuf::from(path), Entry::Generated { contents: contents.as_bytes().to_vec(), mode });
    };
    generated("etc/passwd", "root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n", 0o644);
    generated("etc/group", "root:x:0:\nnogroup:x:65534:\n", 0o644);
    generated("etc/nsswitch.conf", "passwd: files\ngroup: files\nhosts: files dns\n", 0o644);
    // The agent commits under its own identity unless the profile sets one;
    // /workspace is owned by the host user, which maps to root here.
    generated("etc/gitconfig", "[user]\n\tname = Lazaret agent\n\temail = agent@lazaret.invalid\n[safe]\n\tdirectory = *\n", 0o644);
    generated("etc/os-release", "NAME=\"Lazaret default sandbox\"\nID=lazaret\n", 0o644);
    generated("etc/profile", "export PATH=/run/lazaret/bin:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin\nPS1='[lazaret] \\w\\$ '\n", 0o644);
    // Debian's runsc (2022-12) answers coreutils 9.1's statx() with EINVAL,
    // so `ls -l` and `stat` fail there; busybox's versions use lstat().
    if entries.contains_key(Path::new("usr/bin/busybox")) {
        for applet in ["ls", "stat"] {
            entries.insert(PathBuf::from(format!("usr/local/bin/{applet}")), Entry::Symlink { target: PathBuf::from("/usr/bin/busybox") });
        }
    }
    // Debian installs `nc` as an alternatives link at package configuration
    // time, which dpkg-query does not list.
    if entries.contains_key(Path::new("usr/bin/nc.openbsd")) {
        entries.insert(PathBuf::from("usr/bin/nc"), Entry::Symlink { target: PathBuf::from("nc.openbsd") });
    }
    for (dir, mode) in [("tmp", 0o1777), ("root", 0o700), ("workspace", 0o755), ("home", 0o755), ("run", 0o755), ("var/tmp", 0o1777)] {
        entries.insert(PathBuf::from(dir), Entry::Directory { mode });
    }
}

/// A key over `recipe` and every entry's path, size, mtime, mode and target.
pub(crate) fn content_key(recipe: &str, entries: &BTreeMap<PathBuf, Entry>) -> String {
    let mut hasher = Sha256::new();
    hasher.update(format!("{recipe}\n"));
    for (path, entry) in entries {
        let line = match entry {
            Entry::File { mode, size, mtime, .. } => format!("f {} {mode:o} {size} {mtime}\n", path.display()),
            Entry::Symlink { target } => format!("l {} {}\n", path.display(), target.display()),
            Entry::Generated { contents, mode } => format!("g {} {mode:o} {}\n", path.display(), String::from_utf8_lossy(contents)),
            Entry::Directory { mode } => format!("d {} {mode:o}\n", path.display()),
        };
        hasher.update(line.as_bytes());
    }
    lazaret_core::ids::hex(&hasher.finalize())
}

fn import(podman: &Podman, tag: &str, key: &str, entries: &BTreeMap<PathBuf, Entry>, total_bytes: u64) -> Result<()> {
    let label = format!("LABEL {CONTENT_LABEL}={key}");
    let mut child = podman
        .command()
        .args([
            "import",
            "--change",
            "CMD [\"/bin/bash\", \"-l\"]",
            "--change",
            "ENV PATH=/run/lazaret/bin:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin",
            "--change",
            "ENV HOME=/root",
            "--change",
            "WORKDIR /workspace",
            "--change",
            &label,
            "-",
            tag,
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("cannot start `podman import`; is podman installed? (see `lazaret doctor`)")?;
    let stdin = child.stdin.take().context("podman import has no stdin")?;
    let written = write_archive(stdin, entries, total_bytes);
    let output = child.wait_with_output().context("podman import did not finish")?;
    if !output.status.success() {
        bail!("`podman import` failed for {tag}: {}", lazaret_coordinator::podman::explain(&output.stderr));
    }
    written.with_context(|| format!("writing the root file system of {tag}"))
}

pub(crate) fn write_archive(sink: impl Write, entries: &BTreeMap<PathBuf, Entry>, total_bytes: u64) -> Result<()> {
    let mut archive = tar::Builder::new(sink);
    let interactive = std::io::stderr().is_terminal();
    let mut done_bytes = 0u64;
    let mut last_percent = 0;
    for (path, entry) in entries {
        let mut header = tar::Header::new_gnu();
        header.set_uid(0);
        header.set_gid(0);
        match entry {
            Entry::Directory { mode } => {
                header.set_entry_type(tar::EntryType::Directory);
                header.set_mode(*mode);
                header.set_size(0);
                archive.append_data(&mut header, path, std::io::empty())?;
            }
            Entry::Symlink { target } => {
                header.set_entry_type(tar::EntryType::Symlink);
                header.set_mode(0o777);
                header.set_size(0);
                archive.append_link(&mut header, path, target)?;
            }
            Entry::Generated { contents, mode } => {
                header.set_entry_type(tar::EntryType::Regular);
                header.set_mode(*mode);
                header.set_size(contents.len() as u64);
                archive.append_data(&mut header, path, contents.as_slice())?;
            }
            Entry::File { source, mode, size, mtime } => {
                let file = std::fs::File::open(source).with_context(|| format!("cannot read {}", source.display()))?;
                header.set_entry_type(tar::EntryType::Regular);
                header.set_mode(*mode);
                header.set_size(*size);
                header.set_mtime(u64::try_from(*mtime).unwrap_or(0));
                archive.append_data(&mut header, path, file)?;
                done_bytes += size;
            }
        }
        let percent = (done_bytes * 100).checked_div(total_bytes).unwrap_or(100);
        if percent >= last_percent + 10 || (interactive && percent > last_percent) {
            last_percent = percent;
            if interactive {
                eprint!("\rlazaret: packing {percent:>3}%");
            } else {
                eprintln!("lazaret: packing {percent:>3}%");
            }
        }
    }
    if interactive {
        eprintln!();
    }
    archive.finish()?;
    Ok(())
}
