//! `lazaret init --agent claude|codex|aider`: add a commented profile for an
//! agent to the user's configuration file, leaving every other line as it
//! was. The API key is written as `env:VAR`, never as a value. The new file
//! is validated as a whole before it replaces the old one, atomically.

use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use lazaret_core::config::{default_config_path, Config};
use lazaret_core::host::RealHost;

use crate::agents::{Agent, Preset, Why};

pub struct InitOptions<'a> {
    pub agent: Agent,
    pub profile: Option<&'a str>,
    pub workspace: Option<&'a Path>,
    pub print: bool,
    pub force: bool,
}

pub fn run(config_path: Option<&Path>, options: &InitOptions) -> Result<u8> {
    let preset = options.agent.preset();
    let name = options.profile.unwrap_or(preset.name);
    if !lazaret_core::config::is_valid_profile_name(name) || name == "domains" || name == lazaret_core::config::DEFAULT_PROFILE {
        bail!("`{name}` cannot be a profile name here: it must match ^[a-z0-9_-]{{2,32}}$ and not be `domains` or `default`");
    }
    let block = profile_text(preset, name);
    if options.print {
        print!("{block}");
        return Ok(0);
    }
    let path = match config_path {
        Some(path) => path.to_path_buf(),
        None => default_config_path(&RealHost)?,
    };
    // Replace the file a symlink points to, not the symlink.
    let path = std::fs::canonicalize(&path).unwrap_or(path);
    let existing = match std::fs::read_to_string(&path) {
        Ok(text) => Some(text),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => None,
        Err(error) => return Err(error).with_context(|| format!("cannot read {}", path.display())),
    };
    let kept = match &existing {
        Some(text) => without_profile(text, name, options.force, &path)?,
        None => String::new(),
    };
    let mut text = kept.trim_end().to_owned();
    if !text.is_empty() {
        text.push_str("\n\n");
    }
    text.push_str(&block);
    // The whole new file must load before it replaces the old one.
    let config = Config::parse(&text, &path, &RealHost)
        .with_context(|| format!("the configuration with the new `{name}` profile would not load; {} is unchanged", path.display()))?;
    if let Some(workspace) = options.workspace {
        check_against_workspace(&config, name, workspace, preset)?;
    }
    write_atomically(&path, &text)?;
    let verb = if existing.as_deref().is_some_and(|old| old.contains(&format!("[profiles.{name}]"))) { "replaced" } else { "added" };
    eprintln!("lazaret: {verb} profile `{name}` ({}) in {}", preset.title, path.display());
    let workspace = options.workspace.map(|dir| format!(" --workspace {}", dir.display())).unwrap_or_default();
    eprintln!("next:");
    eprintln!("  lazaret image build --agent {}      # {} {} into {}", preset.name, preset.title, preset.version, preset.image());
    eprintln!("  export {}=...                        # the API key stays in your shell", preset.api_key.value);
    eprintln!("  lazaret run --profile {name}{workspace}");
    Ok(0)
}

/// The configuration text without profile `name`; refuses when it exists
/// unless `force`.
fn without_profile(text: &str, name: &str, force: bool, path: &Path) -> Result<String> {
    let mut document: toml_edit::DocumentMut =
        text.parse().with_context(|| format!("{} is not valid TOML; fix it (or move it away) before adding a profile", path.display()))?;
    let Some(profiles) = document.get_mut("profiles").and_then(toml_edit::Item::as_table_like_mut) else {
        return Ok(text.to_owned());
    };
    if profiles.get(name).is_none() {
        return Ok(text.to_owned());
    }
    if !force {
        bail!(
            "the profile `{name}` already exists in {}; choose another name with --profile NAME, or replace it with --force",
            path.display()
        );
    }
    profiles.remove(name);
    Ok(document.to_string())
}

/// Resolves the new profile for `workspace`, as `lazaret run` will. An API
/// key that is not set yet is only a reminder: it is needed at `run`.
fn check_against_workspace(config: &Config, name: &str, workspace: &Path, preset: &Preset) -> Result<()> {
    let workspace = lazaret_core::config::canonical_workspace(workspace, &RealHost)?;
    // The key is read when the domain starts (the credential endpoint), not here.
    let key_unset = std::env::var_os(preset.api_key.value).is_none();
    if key_unset {
        eprintln!("lazaret: note: {} is not set in this shell; `lazaret run --profile {name}` needs it", preset.api_key.value);
    }
    match config.resolve(name, &workspace, &RealHost) {
        Ok(_) => Ok(()),
        Err(lazaret_core::Error::Config(diagnostics)) => {
            let (unset, other): (Vec<_>, Vec<_>) =
                diagnostics.into_iter().partition(|diagnostic| diagnostic.message.contains("which is not set"));
            if !other.is_empty() {
                return Err(lazaret_core::Error::Config(other).into());
            }
            if !unset.is_empty() && !key_unset {
                eprintln!("lazaret: note: {} is not set in this shell; `lazaret run --profile {name}` needs it", preset.api_key.value);
            }
            Ok(())
        }
        Err(error) => Err(error.into()),
    }
}

fn write_atomically(path: &Path, text: &str) -> Result<()> {
    let parent = path.parent().map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from("."));
    if !parent.exists() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&parent)
            .with_context(|| format!("cannot create {}", parent.display()))?;
    }
    let mode = std::fs::metadata(path).map(|metadata| metadata.permissions().mode() & 0o777).unwrap_or(0o600);
    let mut temporary = tempfile::Builder::new()
        .prefix(".config.toml.")
        .tempfile_in(&parent)
        .with_context(|| format!("cannot create a temporary file in {}", parent.display()))?;
    temporary.write_all(text.as_bytes()).context("cannot write the new configuration")?;
    temporary.as_file().set_permissions(std::fs::Permissions::from_mode(mode))?;
    temporary.as_file().sync_all().context("cannot flush the new configuration")?;
    temporary.persist(path).map_err(|error| error.error).with_context(|| format!("cannot replace {}", path.display()))?;
    Ok(())
}

/// The profile block: every value with the reason it is there.
pub fn profile_text(preset: &Preset, name: &str) -> String {
    let mut text = String::new();
    let mut line = |content: &str| {
        text.push_str(content);
        text.push('\n');
    };
    line(&format!("# {}: written by `lazaret init --agent {}`. See docs/agents.md.", preset.title, preset.name));
    line(&format!(
        "# Build the image first: `lazaret image build --agent {}` ({2} {3} from {1}, offline inside).",
        preset.name,
        package_client(preset),
        preset.version,
        preset.package_name()
    ));
    line(&format!("[profiles.{name}]"));
    line(&format!("image = \"{}\"", preset.image()));
    line(&format!("# What `lazaret run --profile {name}` runs when no command follows `--`."));
    line(&format!("command = [\"{}\"]", preset.command));
    line("# Kept across sessions of this profile and workspace (`lazaret state diff` shows");
    line("# what changed, `lazaret state reset` discards it).");
    line(&array("persistent_dirs", preset.persistent_dirs, &[]));
    line("# The only destinations the sandbox can reach, by DNS name: the sandbox's");
    line("# resolver answers these and refuses every other name. Add a host here, or");
    line("# for the running sandbox only: `lazaret net allow HOST`.");
    line(&array("allow_egress", preset.allow_egress, preset.optional_egress));
    line("# Any other name the agent asks for waits (a few seconds) for you instead of");
    line("# failing: `lazaret pending`, the session's prompt or your editor shows it; allow");
    line("# it for the session, for a while or for this profile, or deny it.");
    line("ask = true");
    line("# Host commands the agent may run through `lazaret-escalate` without asking");
    line("# you, e.g. \"cargo check *\" or \"npm test\" (added to [escalation] auto_approve).");
    line("# Left empty: every request waits for your approval.");
    line("auto_approve = []");
    let credential = &preset.credential;
    line("# The API key never enters the sandbox: the Network Sidecar adds it to each request");
    line(&format!("# for {} (`lazaret net show` lists the endpoint). {} points the agent at", credential.origin, credential.base_url_env));
    line(&format!("# the endpoint, and {} inside is only a placeholder. `env:VAR` is read from", preset.api_key.value));
    line("# your shell at `lazaret run`; `file:PATH` (mode 600) and `command = [...]` work too.");
    let scheme = if credential.bearer { ", scheme = \"bearer\"" } else { "" };
    let base_path = if credential.base_path.is_empty() { String::new() } else { format!(", base_path = \"{}\"", credential.base_path) };
    line("credentials = [");
    line(&format!(
        "  {{ origin = \"{}\", header = \"{}\"{scheme}, value = \"env:{}\", base_url_env = \"{}\"{base_path} }},",
        credential.origin, credential.header, preset.api_key.value, credential.base_url_env
    ));
    line("]");
    line("");
    line(&format!("[profiles.{name}.env]"));
    line("# `env:VAR` copies your shell's VAR at `lazaret run` into the sandbox; the value");
    line("# is never written to a file (`lazaret config show` redacts it).");
    let placeholder_why = "a placeholder: the sidecar replaces it with your key (see credentials above)";
    let mut entries = vec![(preset.api_key.value, crate::agents::PLACEHOLDER_KEY.to_owned(), placeholder_why)];
    entries.extend(preset.env.iter().map(|(key, value)| (*key, value.value.to_owned(), value.why)));
    for (key, value, why) in entries {
        line(&format!("{key} = \"{value}\"  # {why}"));
    }
    for (key, value) in preset.optional_env {
        line(&format!("# {key} = \"{}\"  # {}", value.value, value.why));
    }
    text
}

/// A TOML array, one commented entry a line; `optional` ones commented out.
fn array(key: &str, entries: &[Why], optional: &[Why]) -> String {
    let mut text = format!("{key} = [\n");
    for (entry, prefix) in entries.iter().map(|entry| (entry, "")).chain(optional.iter().map(|entry| (entry, "# "))) {
        text.push_str(&format!("  {prefix}\"{}\",  # {}\n", entry.value, entry.why));
    }
    text.push(']');
    text
}

fn package_client(preset: &Preset) -> &'static str {
    match preset.package {
        crate::agents::Package::Npm { .. } => "npm",
        crate::agents::Package::Pip { .. } => "PyPI",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lazaret_core::host::FixedHost;

    #[test]
    fn every_preset_profile_loads_and_holds_no_key_value() {
        for preset in crate::agents::ALL {
            let text = profile_text(&preset, preset.name);
            let host = FixedHost { home: Some(PathBuf::from("/home/u")), ..FixedHost::default() };
            let config = Config::parse(&text, Path::new("/c/config.toml"), &host).expect("parses");
            let profile = config.profile(preset.name).expect("profile");
            assert_eq!(profile.image, preset.image());
            assert_eq!(profile.command, vec![preset.command.to_owned()]);
            assert_eq!(profile.allow_egress.len(), preset.allow_egress.len());
            assert_eq!(profile.env[preset.api_key.value].value, crate::agents::PLACEHOLDER_KEY, "the sandbox gets a placeholder");
            assert_eq!(profile.credentials.len(), 1);
            let credential = &profile.credentials[0];
            assert_eq!(credential.origin.to_string(), preset.credential.origin);
            assert_eq!(credential.source, lazaret_core::config::CredentialSource::Env(preset.api_key.value.to_owned()));
            assert_eq!(credential.base_url_env.as_deref(), Some(preset.credential.base_url_env));
            assert!(
                preset.allow_egress.iter().any(|rule| preset.credential.origin.ends_with(rule.value)),
                "the credential's origin is on the allowlist"
            );
            assert!(!text.contains(&format!("= \"env:{}\"  #", preset.api_key.value)), "no env pull of the key into the sandbox");
            assert!(profile.auto_approve.is_empty());
            assert_eq!(profile.ask, Some(true), "a preset asks about names it does not allow");
        }
    }

    #[test]
    fn an_existing_profile_is_refused_without_force_and_replaced_with_it() {
        let path = Path::new("/c/config.toml");
        let old = "# mine\n[profiles.other]\nimage = \"x:1\"\n\n[profiles.claude]\nimage = \"old:1\"\n[profiles.claude.env]\nA = \"b\"\n";
        let error = without_profile(old, "claude", false, path).expect_err("refused");
        assert!(error.to_string().contains("already exists"), "{error}");
        let kept = without_profile(old, "claude", true, path).expect("replaced");
        assert!(kept.contains("# mine\n[profiles.other]\nimage = \"x:1\""), "{kept}");
        assert!(!kept.contains("claude") && !kept.contains("old:1"), "{kept}");
        assert_eq!(without_profile(old, "codex", false, path).expect("absent"), old);
    }
}
