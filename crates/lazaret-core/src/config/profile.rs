//! Checks of one `[profiles.<name>]` table into a [`ProfileConfig`].
//!
//! Invariants: every diagnostic names its key as `profiles.<name>.<key>` and
//! points at the value written; a profile with any problem yields no
//! [`ProfileConfig`] (its problems stop the load); an unpinned image is a
//! warning, not a problem. Paths are only checked as written here (tokens,
//! `..`): they are expanded and canonicalized when the profile is resolved
//! for a workspace (`resolve`).

use std::collections::BTreeMap;

use toml::Spanned;

use super::check::{is_valid_env_name, is_valid_profile_name, Checker};
use super::raw::{RawProfile, RawVolume};
use super::{Located, ProfileConfig, VolumeConfig};
use crate::image_reference::{self, Pinning};
use crate::location::Location;

impl Checker<'_> {
    /// The profile `name`, or `None` if it has a problem (recorded).
    pub(super) fn profile(&mut self, name: &Spanned<String>, raw: &Spanned<RawProfile>) -> Option<ProfileConfig> {
        let profile_name = name.get_ref();
        let name_location = Some(self.locate(name.span()));
        let problems_before = self.problem_count();
        self.profile_name(profile_name, name_location.clone());
        let prefix = format!("profiles.{profile_name}");
        let raw = raw.get_ref();
        self.image(&prefix, &raw.image);
        for (index, dir) in raw.persistent_dirs.iter().enumerate() {
            self.path_template(&format!("{prefix}.persistent_dirs[{index}]"), dir);
        }
        let allow_egress = self.egress(&format!("{prefix}.allow_egress"), &raw.allow_egress);
        let env = self.env(&prefix, &raw.env);
        let credentials = self.credentials(&prefix, &raw.credentials, &env);
        let volumes = raw.volumes.iter().enumerate().map(|(index, volume)| self.volume(&prefix, index, volume.get_ref())).collect();
        let command = raw.command.as_ref().map(|command| self.command(&prefix, command)).unwrap_or_default();
        let auto_approve_rules = self.auto_approve_rules(&format!("{prefix}.auto_approve"), &raw.auto_approve);
        let limits = raw.limits.as_ref().map(|limits| self.limits(&format!("{prefix}.limits"), limits)).unwrap_or_default();
        let backend = self.backend(&prefix, raw);
        if self.problem_count() > problems_before {
            return None;
        }
        Some(ProfileConfig {
            name: profile_name.clone(),
            image: raw.image.get_ref().clone(),
            persistent_dirs: raw.persistent_dirs.iter().map(|dir| self.located(dir)).collect(),
            allow_egress,
            env,
            volumes,
            command,
            auto_approve: raw.auto_approve.iter().map(|entry| self.located(entry)).collect(),
            auto_approve_rules,
            limits,
            ask: raw.ask,
            credentials,
            backend: backend.unwrap_or_default(),
            location: name_location,
        })
    }

    /// `^[a-z0-9_-]{2,32}$`, and not `domains` (a directory of its own
    /// under `data_root`).
    fn profile_name(&mut self, name: &str, location: Option<Location>) {
        if !is_valid_profile_name(name) {
            self.error("profiles", format!("profile name `{name}` is invalid: it must match ^[a-z0-9_-]{{2,32}}$"), location);
        } else if name == "domains" {
            self.error("profiles", "profile name `domains` is reserved (it would collide with <data_root>/domains)".into(), location);
        }
    }

    /// A valid image reference; a warning unless pinned to a tag other than
    /// `latest` or to a digest.
    fn image(&mut self, prefix: &str, image: &Spanned<String>) {
        let field = format!("{prefix}.image");
        let location = Some(self.locate(image.span()));
        match image_reference::pinning(image.get_ref()) {
            Err(message) => self.error(&field, message, location),
            Ok(Pinning::Latest | Pinning::Unpinned) => self.warn(
                field,
                format!("`{}` is not pinned; pin a tag other than `latest` or a @sha256 digest to avoid silent drift", image.get_ref()),
                location,
            ),
            Ok(Pinning::Digest | Pinning::Tag(_)) => {}
        }
    }

    /// `env`: valid names Lazaret does not set itself; values are an
    /// `env:VAR` pull of a valid name, or text whose tokens exist.
    fn env(&mut self, prefix: &str, raw: &BTreeMap<Spanned<String>, Spanned<String>>) -> BTreeMap<String, Located<String>> {
        let mut env = BTreeMap::new();
        for (key, value) in raw {
            let key_name = key.get_ref();
            let name = format!("{prefix}.env.{key_name}");
            if !is_valid_env_name(key_name) {
                self.error(&name, format!("`{key_name}` is not a valid environment variable name"), Some(self.locate(key.span())));
            } else if key_name.starts_with("LAZARET_") {
                self.error(
                    &name,
                    format!("`{key_name}`: variables starting with LAZARET_ are set by Lazaret itself"),
                    Some(self.locate(key.span())),
                );
            }
            match value.get_ref().strip_prefix("env:") {
                Some(variable) if !is_valid_env_name(variable) => self.error(
                    &name,
                    format!("`env:{variable}`: `{variable}` is not a valid environment variable name"),
                    Some(self.locate(value.span())),
                ),
                Some(_) => {}
                None => self.tokens(&name, value),
            }
            env.insert(key_name.clone(), self.located(value));
        }
        env
    }

    /// `volumes[index]`: the paths as written, and the mode (`ro` when not
    /// written).
    fn volume(&mut self, prefix: &str, index: usize, volume: &RawVolume) -> VolumeConfig {
        self.path_template(&format!("{prefix}.volumes[{index}].host"), &volume.host);
        self.tokens(&format!("{prefix}.volumes[{index}].container"), &volume.container);
        let mode = match &volume.mode {
            Some(mode) => self.volume_mode(&format!("{prefix}.volumes[{index}].mode"), mode),
            None => vec!["ro".to_owned()],
        };
        VolumeConfig { host: self.located(&volume.host), container: self.located(&volume.container), mode }
    }

    /// `command`: its first word names a program.
    fn command(&mut self, prefix: &str, command: &Spanned<Vec<Spanned<String>>>) -> Vec<String> {
        let words: Vec<String> = command.get_ref().iter().map(|word| word.get_ref().clone()).collect();
        if words.first().is_none_or(|program| program.trim().is_empty()) {
            self.error(
                &format!("{prefix}.command"),
                "the command is empty: name a program (e.g. [\"claude\"]) or leave `command` out to run the image's CMD".into(),
                Some(self.locate(command.span())),
            );
        }
        words
    }
}
