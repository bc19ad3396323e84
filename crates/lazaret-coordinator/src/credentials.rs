//! The keys of a profile's credential endpoints (`credentials`), read when
//! the coordinator starts the Network Sidecar and handed to it on its
//! control socket: `env:` from this process's environment (that of the
//! `lazaret run` that started it), `file:` from a file only its owner can
//! read, `command` from a host command's standard output (run like an
//! approved host command: no shell, the fixed environment of DECISIONS D9,
//! a time-out).
//!
//! Invariants: a key stays in memory (here, for a sidecar that is started
//! again, and in the sidecar); it is never written to disk, put in an
//! argument, the sandbox's environment, a log line or the audit store, and
//! no error message repeats it.

use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use lazaret_core::bounds;
use lazaret_core::config::{CredentialSource, ResolvedCredential};
use lazaret_protocol::sidecar::{check_credential_value, CredentialEndpoint, Secret, MAX_CREDENTIAL_LENGTH};

use crate::Result;

/// Each credential with its key, in the profile's order.
pub fn fetch(credentials: &[ResolvedCredential]) -> Result<Vec<CredentialEndpoint>> {
    credentials
        .iter()
        .map(|credential| {
            let key = read_key(&credential.source).map_err(|error| {
                crate::format_err!("the credential for {} ({}): {}", credential.origin, credential.source, error.chained())
            })?;
            let value = if credential.bearer { format!("Bearer {key}") } else { key };
            check_credential_value(&value)
                .map_err(|why| crate::format_err!("the credential for {} ({}): {why}", credential.origin, credential.source))?;
            Ok(CredentialEndpoint {
                origin: credential.origin.clone(),
                port: credential.port,
                header: credential.header.clone(),
                value: Secret::new(value),
            })
        })
        .collect()
}

/// The key itself, without the line end a file or a command's output has.
fn read_key(source: &CredentialSource) -> Result<String> {
    let text = match source {
        CredentialSource::Env(variable) => match std::env::var(variable) {
            Ok(value) => value,
            Err(std::env::VarError::NotPresent) => {
                crate::bail!("`{variable}` is not set in the shell that ran `lazaret run` (export it there, or use file: or command)")
            }
            Err(std::env::VarError::NotUnicode(_)) => crate::bail!("`{variable}` is not valid UTF-8"),
        },
        CredentialSource::File(path) => read_private_file(Path::new(path))?,
        CredentialSource::Command(argv) => run_command(argv)?,
    };
    let key = text.strip_suffix('\n').map(|rest| rest.strip_suffix('\r').unwrap_or(rest)).unwrap_or(&text);
    Ok(key.to_owned())
}

/// A regular file owned by this user that nobody else can read or write.
fn read_private_file(path: &Path) -> Result<String> {
    let file = std::fs::File::open(path).map_err(|error| crate::format_err!("cannot open {}: {error}", path.display()))?;
    let metadata = file.metadata()?;
    if !metadata.is_file() {
        crate::bail!("{} is not a regular file", path.display());
    }
    if metadata.uid() != nix::unistd::geteuid().as_raw() {
        crate::bail!("{} belongs to another user", path.display());
    }
    if metadata.mode() & 0o077 != 0 {
        crate::bail!("{} can be read or written by others (mode {:o}): `chmod 600` it", path.display(), metadata.mode() & 0o777);
    }
    let mut text = String::new();
    file.take(MAX_CREDENTIAL_LENGTH as u64 + 3)
        .read_to_string(&mut text)
        .map_err(|error| crate::format_err!("cannot read {}: {error}", path.display()))?;
    Ok(text)
}

/// The standard output of `argv`, which must exit 0 within its time-out.
fn run_command(argv: &[String]) -> Result<String> {
    let Some((program, arguments)) = argv.split_first() else { crate::bail!("the command is empty") };
    let host_path = std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".to_owned());
    let mut command = std::process::Command::new(program);
    command.args(arguments).env_clear().envs(crate::escalation::execute::fixed_environment(&host_path));
    let output = crate::bounded_process::output_bounded_blocking(command, bounds::CREDENTIAL_COMMAND, &format!("{program:?}"))?;
    if !output.status.success() {
        let said = String::from_utf8_lossy(&output.stderr);
        let first = said.lines().next().unwrap_or("").chars().take(200).collect::<String>();
        crate::bail!("{program:?} failed ({}): {first}", output.status);
    }
    if output.stdout.len() > MAX_CREDENTIAL_LENGTH + 2 {
        crate::bail!("{program:?} printed more than {MAX_CREDENTIAL_LENGTH} bytes");
    }
    String::from_utf8(output.stdout).map_err(|_| crate::format_err!("{program:?} printed something that is not UTF-8"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn credential(source: CredentialSource, bearer: bool) -> ResolvedCredential {
        ResolvedCredential {
            origin: "https://api.example.test".into(),
            header: "authorization".into(),
            bearer,
            source,
            port: 17400,
            base_url_env: None,
            base_path: String::new(),
        }
    }

    #[test]
    fn a_file_key_is_read_only_from_a_private_file_and_never_repeated_in_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("key");
        std::fs::write(&path, "sk-file-123\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let source = CredentialSource::File(path.to_string_lossy().into_owned());
        let error = fetch(&[credential(source.clone(), false)]).unwrap_err().to_string();
        assert!(error.contains("mode 644") && error.contains("chmod 600") && !error.contains("sk-file-123"), "{error}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let endpoints = fetch(&[credential(source, true)]).unwrap();
        assert_eq!(endpoints[0].value.expose(), "Bearer sk-file-123");
        assert_eq!((endpoints[0].port, endpoints[0].header.as_str()), (17400, "authorization"));
        let missing = CredentialSource::File(dir.path().join("nope").to_string_lossy().into_owned());
        assert!(fetch(&[credential(missing, false)]).unwrap_err().to_string().contains("cannot open"));
    }

    #[test]
    fn a_command_key_is_its_output_and_a_failing_command_is_named() {
        let ok = CredentialSource::Command(vec!["/bin/sh".into(), "-c".into(), "printf 'sk-cmd-1\\n'; test -z \"$SECRET_IN_ENV\"".into()]);
        assert_eq!(fetch(&[credential(ok, false)]).unwrap()[0].value.expose(), "sk-cmd-1");
        let failing =
            CredentialSource::Command(vec!["/bin/sh".into(), "-c".into(), "printf 'sk-%s' partial; echo locked >&2; exit 3".into()]);
        let error = fetch(&[credential(failing, false)]).unwrap_err().to_string();
        assert!(error.contains("locked") && error.contains("/bin/sh") && !error.contains("sk-partial"), "{error}");
        let bad = CredentialSource::Command(vec!["/bin/sh".into(), "-c".into(), "printf 'sk\\r\\nx-%s: 1' evil".into()]);
        let error = fetch(&[credential(bad, false)]).unwrap_err().to_string();
        assert!(error.contains("control") && !error.contains("x-evil"), "{error}");
    }

    #[test]
    fn an_unset_variable_is_named() {
        let error = fetch(&[credential(CredentialSource::Env("LAZARET_TEST_UNSET_KEY_VARIABLE".into()), false)]).unwrap_err().to_string();
        assert!(error.contains("LAZARET_TEST_UNSET_KEY_VARIABLE") && error.contains("https://api.example.test"), "{error}");
    }
}
