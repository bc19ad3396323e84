//! `lazaret image build --agent claude|codex|aider`: an agent's image on top
//! of the default image, with no network inside the build.
//!
//! 1. The default image is built (or found up to date).
//! 2. The Debian packages of the agent's runtime, and the host's fetching
//!    client (npm, pip), are installed on the host with apt if missing.
//! 3. The agent's package is fetched on the host with its ordinary client,
//!    pinned by version, into a staging directory under
//!    `$XDG_CACHE_HOME/lazaret/agents/<agent>-<version>` (kept: a second
//!    build fetches nothing). No package code runs on the host: npm runs
//!    with `--ignore-scripts` and every install script found is reported;
//!    pip takes binary wheels only.
//! 4. One layer (the runtime's files as `dpkg-query -L` lists them, the
//!    staged package, the shared libraries their ELF files need according to
//!    the host's dynamic loader, the entry point) is written as a tar archive
//!    and added by `podman build --network=none` with a Containerfile of
//!    `FROM <default image>`, `ADD`, `LABEL` and `CMD` only: nothing runs
//!    inside the build. A content key label makes an unchanged rebuild a
//!    cache hit; a failed build leaves the old image and no new tag.

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use lazaret_coordinator::podman::Podman;
use lazaret_core::config::DEFAULT_IMAGE;

use super::image::{self, progress, Entry, CONTENT_LABEL};
use crate::agents::{Agent, Package, Preset};

/// Bump when what goes into an agent image changes.
const RECIPE_VERSION: &str = "1";
/// Debian's interpreter: the one whose files go into the aider image.
const DEBIAN_PYTHON: &str = "/usr/bin/python3";
/// The host's dynamic loader, asked (`--list`) which libraries a fetched ELF
/// file needs. Unlike `ldd`, it never runs the file's own interpreter.
const HOST_LOADER: &str = "/lib64/ld-linux-x86-64.so.2";
/// What the runtime's packages bring that the agent never reads.
const UNNEEDED: [&str; 4] = ["usr/share/doc", "usr/share/man", "usr/include", "usr/share/info"];
/// The CA bundle update-ca-certificates generates (dpkg does not list it).
const CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

pub fn build(agent: Agent, tag: Option<&str>, force: bool) -> Result<u8> {
    let preset = agent.preset();
    let tag = tag.map(str::to_owned).unwrap_or_else(|| preset.image());
    let started = Instant::now();
    progress(&format!("{} {} into {tag}: first the base image {DEFAULT_IMAGE}", preset.title, preset.version));
    image::build(DEFAULT_IMAGE, false)?;
    let podman = Podman::default();
    let base_id = image_id(&podman, DEFAULT_IMAGE)?;
    ensure_host_packages(preset)?;
    let staged = stage(preset)?;
    for note in &staged.notes {
        progress(note);
    }

    let base = image::collect_entries()?;
    let mut layer = BTreeMap::new();
    let runtime: Vec<String> = preset.runtime_packages.iter().map(|package| (*package).to_owned()).collect();
    image::add_package_files(&mut layer, &runtime)?;
    // Documentation and C headers of the runtime are of no use to the agent.
    layer.retain(|path, _| !UNNEEDED.iter().any(|prefix| path.starts_with(prefix)));
    image::add_host_path(&mut layer, Path::new(CA_BUNDLE), &mut Vec::new())?;
    let mut elf_files = Vec::new();
    add_staged_tree(&mut layer, &staged.root, Path::new(""), &mut elf_files)?;
    let missing = add_needed_libraries(&mut layer, &elf_files, &staged.root)?;
    if !missing.is_empty() {
        progress(&format!(
            "not on this host, so not in the image: {} (needed by optional parts of the package; those parts will fail)",
            missing.join(", ")
        ));
    }
    add_entry_point(&mut layer, preset)?;
    for dir in preset.persistent_dirs {
        layer.insert(PathBuf::from(dir.value.trim_start_matches('/')), Entry::Directory { mode: 0o700 });
    }
    layer.retain(|path, entry| !same_as_base(base.get(path), entry));

    let key = image::content_key(&format!("agent recipe {RECIPE_VERSION} {} {} base {base_id}", preset.name, preset.version), &layer);
    if !force && podman.image_label(&tag, CONTENT_LABEL).as_deref() == Some(key.as_str()) {
        progress(&format!("{tag} is up to date (content {})", &key[..12]));
        print_versions(preset, &staged, &tag, &podman);
        return Ok(0);
    }
    let total_bytes: u64 = layer.values().map(|entry| if let Entry::File { size, .. } = entry { *size } else { 0 }).sum();
    progress(&format!("packing {} entries ({:.1} MB) as one layer on {DEFAULT_IMAGE}", layer.len(), total_bytes as f64 / 1e6));
    podman_build(&podman, preset, &tag, &key, &layer, total_bytes)?;
    progress(&format!("built {tag} in {:.1} s", started.elapsed().as_secs_f64()));
    print_versions(preset, &staged, &tag, &podman);
    Ok(0)
}

/// The fetched package, ready to be copied into the image.
struct Staged {
    /// A root file system fragment (`usr/local/...`).
    root: PathBuf,
    /// What the fetch found worth saying (install scripts not run, ...).
    notes: Vec<String>,
    /// `name version` of the agent's package and what came with it.
    versions: Vec<String>,
}

fn cache_dir() -> Result<PathBuf> {
    let base = match std::env::var_os("XDG_CACHE_HOME").map(PathBuf::from).filter(|dir| dir.is_absolute()) {
        Some(dir) => dir,
        None => lazaret_core::host::HostEnvironment::home_dir(&lazaret_core::host::RealHost)?.join(".cache"),
    };
    Ok(base.join("lazaret").join("agents"))
}

/// Fetches the pinned package into the cache once; later builds reuse it.
fn stage(preset: &Preset) -> Result<Staged> {
    let cache = cache_dir()?;
    let dir = cache.join(format!("{}-{}", preset.name, preset.version));
    let record = dir.join("fetched.json");
    if !record.exists() {
        std::fs::create_dir_all(&cache).with_context(|| format!("cannot create {}", cache.display()))?;
        // A fetch that fails leaves nothing behind: it happens in a
        // temporary directory that is renamed into place only when complete.
        let partial = tempfile::Builder::new()
            .prefix(&format!(".{}-{}.partial-", preset.name, preset.version))
            .tempdir_in(&cache)
            .with_context(|| format!("cannot create a staging directory in {}", cache.display()))?;
        let root = partial.path().join("root");
        std::fs::create_dir_all(&root)?;
        let (notes, versions) = match preset.package {
            Package::Npm { name } => fetch_npm(preset, name, &cache, &root)?,
            Package::Pip { name, target_dir } => fetch_pip(preset, name, target_dir, &cache, &root)?,
        };
        for (path, brought_by) in preset.required_files {
            if !root.join(path.trim_start_matches('/')).exists() {
                bail!(
                    "the fetched {} {} lacks {path}, which {brought_by} should bring; it was not fetched from the registry \
                     (see the client's output above), and Lazaret downloads nothing else",
                    preset.package_name(),
                    preset.version
                );
            }
        }
        let json = serde_json::json!({ "notes": notes, "versions": versions });
        std::fs::write(partial.path().join("fetched.json"), serde_json::to_vec_pretty(&json)?)?;
        if dir.exists() {
            std::fs::remove_dir_all(&dir).with_context(|| format!("cannot remove the incomplete {}", dir.display()))?;
        }
        let partial = partial.keep();
        std::fs::rename(&partial, &dir).with_context(|| format!("cannot move the fetched package to {}", dir.display()))?;
    } else {
        progress(&format!("using {} {} fetched earlier into {}", preset.package_name(), preset.version, dir.display()));
    }
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&record)?)
        .with_context(|| format!("{} is damaged; remove {} and build again", record.display(), dir.display()))?;
    let strings = |key: &str| -> Vec<String> {
        json[key].as_array().map(|items| items.iter().filter_map(|item| item.as_str().map(str::to_owned)).collect()).unwrap_or_default()
    };
    Ok(Staged { root: dir.join("root"), notes: strings("notes"), versions: strings("versions") })
}

fn fetch_npm(preset: &Preset, name: &str, cache: &Path, root: &Path) -> Result<(Vec<String>, Vec<String>)> {
    let spec = format!("{name}@{}", preset.version);
    let prefix = root.join("usr/local");
    progress(&format!("fetching {spec} with npm (install scripts are not run)"));
    let mut command = Command::new("npm");
    command
        .args(["install", "--global", "--ignore-scripts", "--no-audit", "--no-fund", "--update-notifier=false", "--prefer-offline"])
        .arg("--prefix")
        .arg(&prefix)
        .arg("--cache")
        .arg(cache.join("npm"))
        .arg(&spec);
    run_to_stderr(&mut command, &format!("npm install {spec}"))?;
    let modules = prefix.join("lib/node_modules");
    let mut packages = Vec::new();
    find_npm_packages(&modules, &mut packages)?;
    let mut notes = Vec::new();
    let mut versions = Vec::new();
    for (directory, manifest) in &packages {
        let package = manifest["name"].as_str().unwrap_or("?");
        let version = manifest["version"].as_str().unwrap_or("?");
        versions.push(format!("{package} {version}"));
        let mut scripts: Vec<String> = ["preinstall", "install", "postinstall"]
            .iter()
            .filter_map(|stage| manifest["scripts"][stage].as_str().map(|script| format!("{stage} `{script}`")))
            .collect();
        if manifest["gypfile"].as_bool() == Some(true) || directory.join("binding.gyp").exists() {
            scripts.push("a native addon (node-gyp rebuild)".to_owned());
        }
        if scripts.is_empty() {
            continue;
        }
        let scripts = scripts.join(", ");
        match preset.known_scripts.iter().find(|known| known.package == package) {
            Some(known) => notes.push(format!("{package} {version}: {scripts} not run: {}", known.effect)),
            None => notes.push(format!(
                "{package} {version} has an install step, {scripts}, which was not run (no package code runs on the host); \
                 if it downloads something at install time beyond the npm registry, the agent may fail until it does. \
                 Tried: npm install --ignore-scripts {spec}"
            )),
        }
    }
    Ok((notes, versions))
}

/// Every `package.json` of installed packages under `modules` (scoped and nested).
fn find_npm_packages(modules: &Path, found: &mut Vec<(PathBuf, serde_json::Value)>) -> Result<()> {
    let Ok(entries) = std::fs::read_dir(modules) else { return Ok(()) };
    for entry in entries.flatten() {
        let path = entry.path();
        if !entry.file_type().is_ok_and(|kind| kind.is_dir()) {
            continue;
        }
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('@') {
            find_npm_packages(&path, found)?;
            continue;
        }
        if name.starts_with('.') {
            continue;
        }
        if let Ok(bytes) = std::fs::read(path.join("package.json")) {
            if let Ok(manifest) = serde_json::from_slice(&bytes) {
                found.push((path.clone(), manifest));
            }
        }
        find_npm_packages(&path.join("node_modules"), found)?;
    }
    Ok(())
}

fn fetch_pip(preset: &Preset, name: &str, target_dir: &str, cache: &Path, root: &Path) -> Result<(Vec<String>, Vec<String>)> {
    let spec = format!("{name}=={}", preset.version);
    let wheels = cache.join("wheels").join(format!("{name}-{}", preset.version));
    let downloaded = wheels.join(".complete");
    if !downloaded.exists() {
        progress(&format!("downloading {spec} and its dependencies as binary wheels with pip into {}", wheels.display()));
        let mut command = pip();
        command.args(["download", "--only-binary=:all:", "--dest"]).arg(&wheels).arg(&spec);
        run_to_stderr(&mut command, &format!("pip download --only-binary=:all: {spec}")).map_err(|error| {
            error.context(format!(
                "{spec} needs a package that has no binary wheel for this host (Python {}), which would have to be built \
                 (running its code) at install time; Lazaret installs binary wheels only",
                python_version()
            ))
        })?;
        std::fs::write(&downloaded, b"")?;
    }
    let target = root.join("usr/local/lib").join(target_dir);
    progress(&format!("installing {spec} from the downloaded wheels (offline)"));
    let mut command = pip();
    command
        .args(["install", "--no-index", "--only-binary=:all:", "--no-compile", "--find-links"])
        .arg(&wheels)
        .arg("--target")
        .arg(&target)
        .arg(&spec);
    run_to_stderr(&mut command, &format!("pip install --no-index {spec}"))?;
    // Byte-compile once here, naming the path the files have in the image.
    let mut compile = Command::new(DEBIAN_PYTHON);
    compile.args(["-m", "compileall", "-q", "-j", "0", "-d"]).arg(Path::new("/usr/local/lib").join(target_dir)).arg(&target);
    run_to_stderr(&mut compile, "python3 -m compileall")?;
    let mut versions: Vec<String> = std::fs::read_dir(&target)?
        .flatten()
        .filter_map(|entry| entry.file_name().to_str().and_then(|file| file.strip_suffix(".dist-info")).map(str::to_owned))
        .filter_map(|stem| stem.rsplit_once('-').map(|(package, version)| format!("{package} {version}")))
        .collect();
    versions.sort();
    let main = name.replace('-', "_");
    if let Some(index) = versions.iter().position(|line| line.starts_with(&format!("{main} "))) {
        let line = versions.remove(index);
        versions.insert(0, line);
    }
    let notes = vec![format!("{spec}: {} packages, all binary wheels from PyPI: nothing was built or run at install time", versions.len())];
    Ok((notes, versions))
}

fn pip() -> Command {
    let mut command = Command::new(DEBIAN_PYTHON);
    command.args(["-m", "pip"]).env("PIP_DISABLE_PIP_VERSION_CHECK", "1").env("PIP_ROOT_USER_ACTION", "ignore");
    command
}

fn python_version() -> String {
    Command::new(DEBIAN_PYTHON)
        .arg("--version")
        .output()
        .map(|output| String::from_utf8_lossy(&output.stdout).trim().trim_start_matches("Python ").to_owned())
        .unwrap_or_else(|_| "?".to_owned())
}

/// Runs a fetching client with its output on our stderr (progress).
fn run_to_stderr(command: &mut Command, what: &str) -> Result<()> {
    let stderr = std::io::stderr();
    let stdout = std::os::fd::AsFd::as_fd(&stderr).try_clone_to_owned().context("cannot duplicate stderr")?;
    let status = command
        .stdin(Stdio::null())
        .stdout(Stdio::from(stdout))
        .status()
        .with_context(|| format!("cannot run `{what}`: is {:?} installed?", command.get_program()))?;
    if !status.success() {
        bail!("`{what}` failed ({status}); its output is above");
    }
    Ok(())
}

/// Installs the runtime's Debian packages and the fetching client when missing.
fn ensure_host_packages(preset: &Preset) -> Result<()> {
    let mut wanted: Vec<&str> = preset.runtime_packages.to_vec();
    for (package, tool) in preset.host_tools {
        let works = match *tool {
            "pip" => pip().arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok_and(|s| s.success()),
            other => Command::new(other).arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok_and(|s| s.success()),
        };
        if !works {
            wanted.push(package);
        }
    }
    let installed = image::installed_packages(&wanted)?;
    let missing: Vec<&str> = wanted.into_iter().filter(|package| !installed.iter().any(|have| have == package)).collect();
    if missing.is_empty() {
        return Ok(());
    }
    progress(&format!("installing Debian packages on this host with apt: {}", missing.join(" ")));
    let apt = |arguments: &[&str]| -> Result<()> {
        let mut command = if nix::unistd::geteuid().is_root() {
            Command::new("apt-get")
        } else {
            let mut sudo = Command::new("sudo");
            sudo.args(["-n", "apt-get"]);
            sudo
        };
        command.args(arguments).env("DEBIAN_FRONTEND", "noninteractive");
        run_to_stderr(&mut command, &format!("apt-get {}", arguments.join(" ")))
    };
    let mut install = vec!["install", "-y", "--no-install-recommends"];
    install.extend(&missing);
    if apt(&install).is_err() {
        apt(&["update"]).and_then(|()| apt(&install)).with_context(|| {
            format!(
                "cannot install {} on this host; install them (sudo apt-get install {}) and retry",
                missing.join(", "),
                missing.join(" ")
            )
        })?;
    }
    Ok(())
}

/// Adds every file, link and directory under `root` at its path below `root`.
fn add_staged_tree(layer: &mut BTreeMap<PathBuf, Entry>, root: &Path, relative: &Path, elf_files: &mut Vec<PathBuf>) -> Result<()> {
    let directory = root.join(relative);
    let mut children: Vec<_> = std::fs::read_dir(&directory)
        .with_context(|| format!("cannot read {}", directory.display()))?
        .collect::<std::io::Result<_>>()
        .with_context(|| format!("cannot read {}", directory.display()))?;
    children.sort_by_key(std::fs::DirEntry::file_name);
    for child in children {
        let path = child.path();
        let inside = relative.join(child.file_name());
        let metadata = std::fs::symlink_metadata(&path)?;
        let mode = metadata.permissions().mode() & 0o777;
        if metadata.file_type().is_symlink() {
            layer.insert(inside, Entry::Symlink { target: std::fs::read_link(&path)? });
        } else if metadata.is_dir() {
            layer.insert(inside.clone(), Entry::Directory { mode: mode | 0o755 });
            add_staged_tree(layer, root, &inside, elf_files)?;
        } else if metadata.is_file() {
            if image::is_elf(&path) {
                elf_files.push(path.clone());
            }
            layer.insert(inside, Entry::File { source: path, mode: mode | 0o444, size: metadata.len(), mtime: metadata.mtime() });
        }
    }
    Ok(())
}

/// Adds the host libraries the fetched ELF files need; returns the ones the
/// host lacks.
fn add_needed_libraries(layer: &mut BTreeMap<PathBuf, Entry>, elf_files: &[PathBuf], staged_root: &Path) -> Result<Vec<String>> {
    if !elf_files.is_empty() && !Path::new(HOST_LOADER).exists() {
        bail!("{HOST_LOADER} is missing: agent images are built on x86_64 glibc hosts only");
    }
    let mut missing = Vec::new();
    for file in elf_files {
        let Ok(output) = Command::new(HOST_LOADER).arg("--list").arg(file).stdin(Stdio::null()).stderr(Stdio::null()).output() else {
            continue;
        };
        for line in String::from_utf8_lossy(&output.stdout).lines() {
            let Some((name, resolved)) = line.trim().split_once(" => ") else { continue };
            if resolved.starts_with("not found") {
                if !missing.iter().any(|known| known == name) {
                    missing.push(name.to_owned());
                }
                continue;
            }
            let Some(library) = resolved.split_whitespace().next().map(Path::new) else { continue };
            if library.is_absolute() && !library.starts_with(staged_root) {
                image::add_host_path(layer, library, &mut Vec::new())?;
            }
        }
    }
    Ok(missing)
}

fn add_entry_point(layer: &mut BTreeMap<PathBuf, Entry>, preset: &Preset) -> Result<()> {
    let bin = PathBuf::from("usr/local/bin").join(preset.command);
    if let Some(target) = preset.entry_point {
        layer.insert(bin, Entry::Symlink { target: PathBuf::from(target) });
    } else if let Some(script) = preset.launcher {
        layer.insert(bin, Entry::Generated { contents: script.as_bytes().to_vec(), mode: 0o755 });
    } else if !layer.contains_key(&bin) {
        bail!("the fetched {} has no `{}` command in usr/local/bin", preset.package_name(), preset.command);
    }
    Ok(())
}

/// The base image already has this exact entry (the same host file).
fn same_as_base(base: Option<&Entry>, entry: &Entry) -> bool {
    match (base, entry) {
        (Some(Entry::File { source: a, size: sa, mtime: ma, .. }), Entry::File { source: b, size: sb, mtime: mb, .. }) => {
            a == b && sa == sb && ma == mb
        }
        (Some(Entry::Symlink { target: a }), Entry::Symlink { target: b }) => a == b,
        (Some(Entry::Directory { .. }), Entry::Directory { .. }) => true,
        _ => false,
    }
}

fn image_id(podman: &Podman, reference: &str) -> Result<String> {
    let output = podman
        .command()
        .args(["image", "inspect", "--format", "{{.Id}}", reference])
        .stdin(Stdio::null())
        .output()
        .context("cannot run podman")?;
    if !output.status.success() {
        bail!("cannot inspect {reference}: {}", String::from_utf8_lossy(&output.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

fn podman_build(podman: &Podman, preset: &Preset, tag: &str, key: &str, layer: &BTreeMap<PathBuf, Entry>, total_bytes: u64) -> Result<()> {
    // The build context is removed whatever happens.
    let context = tempfile::Builder::new()
        .prefix(".lazaret-image-build-")
        .tempdir_in(cache_dir()?)
        .context("cannot create the build context directory")?;
    let archive = std::fs::File::create(context.path().join("layer.tar")).context("cannot create the layer archive")?;
    image::write_archive(std::io::BufWriter::new(archive), layer, total_bytes).context("writing the layer archive")?;
    let containerfile = format!(
        "FROM {DEFAULT_IMAGE}\nADD layer.tar /\nLABEL {CONTENT_LABEL}={key} io.lazaret.agent={} io.lazaret.agent.version={}\nCMD [\"{}\"]\n",
        preset.name, preset.version, preset.command
    );
    std::fs::write(context.path().join("Containerfile"), containerfile)?;
    progress(&format!("podman build --network=none {tag} (nothing runs inside: FROM, ADD, LABEL, CMD)"));
    let mut command = podman.command();
    command
        .args(["build", "--pull=never", "--network=none", "--layers=false", "--tag", tag, "--file"])
        .arg(context.path().join("Containerfile"))
        .arg(context.path());
    run_to_stderr(&mut command, &format!("podman build {tag}"))
}

fn print_versions(preset: &Preset, staged: &Staged, tag: &str, podman: &Podman) {
    let runtime: Vec<&str> = preset.runtime_packages.iter().copied().filter(|package| *package != "ca-certificates").collect();
    let runtime_versions = if runtime.is_empty() {
        "none: a native binary".to_owned()
    } else {
        let mut arguments = vec!["-W", "-f", "${Package} ${Version}, "];
        arguments.extend(&runtime);
        let listed = image::run_text("dpkg-query", &arguments).unwrap_or_default();
        format!("{} (Debian packages of this host)", listed.trim_end_matches([',', ' ']))
    };
    let size = podman
        .command()
        .args(["image", "inspect", "--format", "{{.Size}}", tag])
        .output()
        .ok()
        .and_then(|output| String::from_utf8_lossy(&output.stdout).trim().parse::<u64>().ok())
        .map(|bytes| format!("{:.0} MB", bytes as f64 / 1e6))
        .unwrap_or_else(|| "?".to_owned());
    println!("image     {tag} ({size})");
    println!("agent     {} {} (command `{}`)", preset.package_name(), preset.version, preset.command);
    println!("runtime   {runtime_versions}");
    let more = staged.versions.len().saturating_sub(1);
    for line in staged.versions.iter().take(3) {
        println!("installed {line}");
    }
    if more > 2 {
        println!("installed ... and {} more (see the build output)", more - 2);
    }
}
