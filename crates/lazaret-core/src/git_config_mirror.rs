//! The agent's view of the host repository's `.git/config` (DECISIONS D2):
//! the same text with credentials removed, followed by the few settings the
//! sandbox itself needs ([`SANDBOX_SETTINGS`]). The coordinator writes the
//! result into a file it owns, in place, which is bind-mounted read-only at
//! `/workspace/.git/config` inside the sandbox.

/// Keys whose whole value is a secret (compared case-insensitively on the
/// last dotted component or the bare key inside a section).
const SECRET_KEYS: [&str; 5] = ["extraheader", "password", "token", "oauthtoken", "bearertoken"];

pub const REDACTED: &str = "<redacted by lazaret>";

/// Appended after the host's text, so that it wins over the host's own
/// values. `core.checkStat = minimal`: git compares an index entry with its
/// file by mtime (seconds) and size only, not by inode number, owner or
/// ctime. gVisor numbers inodes afresh in every sandbox, in the order files
/// are first looked up, so with git's default every session's first `git
/// status` found all inode numbers changed and read every tracked file again
/// (1.5 to 3.8 s in a 10,000-file checkout against 0.3 to 0.5 s); and the
/// index the host writes for a first checkout (`first_checkout` in the
/// coordinator) has the host's inode numbers and owners. Git's racy-entry
/// check still catches a file changed in the second the index was written.
pub const SANDBOX_SETTINGS: &str = "# Added by Lazaret for the sandbox (not in the host's config):\n[core]\n\tcheckStat = minimal\n";

/// The mirror's text for the host config `config`: [`redact`]ed, then
/// [`SANDBOX_SETTINGS`].
pub fn mirror(config: &str) -> String {
    let mut text = redact(config);
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(SANDBOX_SETTINGS);
    text
}

/// Redacts a git configuration text: userinfo in any URL
/// (`https://user:token@host` becomes `https://host`) anywhere on a line,
/// section headers included, and the values of secret-bearing keys.
pub fn redact(config: &str) -> String {
    let mut output = String::with_capacity(config.len());
    for line in config.split_inclusive('\n') {
        let without_userinfo = strip_url_userinfo(line);
        output.push_str(&redact_secret_value(&without_userinfo));
    }
    output
}

/// Removes `userinfo@` after every `scheme://`.
fn strip_url_userinfo(line: &str) -> String {
    let mut output = String::with_capacity(line.len());
    let mut rest = line;
    while let Some(index) = rest.find("://") {
        let (before, after) = rest.split_at(index + 3);
        output.push_str(before);
        // The authority ends at the first '/', whitespace, quote or bracket.
        let authority_end = after.find(|c: char| c == '/' || c.is_whitespace() || c == '"' || c == ']').unwrap_or(after.len());
        let authority = &after[..authority_end];
        match authority.rfind('@') {
            Some(at) => output.push_str(&authority[at + 1..]),
            None => output.push_str(authority),
        }
        rest = &after[authority_end..];
    }
    output.push_str(rest);
    output
}

fn redact_secret_value(line: &str) -> String {
    let trimmed = line.trim_start();
    if trimmed.starts_with('[') || trimmed.starts_with('#') || trimmed.starts_with(';') {
        return line.to_owned();
    }
    let Some((key, _)) = trimmed.split_once('=') else { return line.to_owned() };
    let key = key.trim().to_ascii_lowercase();
    let last = key.rsplit('.').next().unwrap_or(&key);
    if SECRET_KEYS.contains(&last) {
        let indent = &line[..line.len() - trimmed.len()];
        let newline = if line.ends_with('\n') { "\n" } else { "" };
        return format!("{indent}{} = {REDACTED}{newline}", key_as_written(trimmed));
    }
    line.to_owned()
}

fn key_as_written(trimmed: &str) -> &str {
    trimmed.split_once('=').map(|(key, _)| key.trim()).unwrap_or(trimmed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn removes_credentials_and_keeps_everything_else() {
        let config = "[core]\n\trepositoryformatversion = 0\n[remote \"origin\"]\n\turl = https://alice:ghp_secret@github.com/a/b.git\n\tpushurl = ssh://git@example.com/x\n\tfetch = +refs/heads/*:refs/remotes/origin/*\n[url \"https://bob:pw@mirror.example/\"]\n\tinsteadOf = https://github.com/\n[http]\n\textraHeader = Authorization: Bearer abc\n";
        let redacted = redact(config);
        assert!(!redacted.contains("ghp_secret") && !redacted.contains("alice"), "{redacted}");
        assert!(!redacted.contains("bob:pw") && !redacted.contains("Bearer abc"), "{redacted}");
        assert!(redacted.contains("url = https://github.com/a/b.git"), "{redacted}");
        assert!(redacted.contains("pushurl = ssh://example.com/x"), "{redacted}");
        assert!(redacted.contains("[url \"https://mirror.example/\"]"), "{redacted}");
        assert!(redacted.contains("extraHeader = <redacted by lazaret>"), "{redacted}");
        assert!(redacted.contains("repositoryformatversion = 0"));
        assert!(redacted.contains("fetch = +refs/heads/*:refs/remotes/origin/*"));
        assert_eq!(redact("a = b"), "a = b");
    }

    #[test]
    fn the_sandbox_settings_come_last_and_start_on_a_line_of_their_own() {
        let text = mirror("[core]\n\tcheckStat = default\n[user]\n\tname = x");
        assert!(text.starts_with("[core]\n\tcheckStat = default\n[user]\n\tname = x\n# Added by Lazaret"), "{text}");
        assert!(text.ends_with("[core]\n\tcheckStat = minimal\n"), "{text}");
        assert_eq!(mirror(""), SANDBOX_SETTINGS);
    }

    #[test]
    fn redaction_is_idempotent() {
        let config = "\turl = https://u:p@h/x\n\tpassword = hunter2\n";
        assert_eq!(redact(&redact(config)), redact(config));
    }
}
