//! The escalation policy engine: decides whether a command the sandbox asks
//! to run on the host may run without asking the human (`auto_approve`,
//! DECISIONS D9), and which risks the human
//! prompt should point out when it may not.
//!
//! Everything here is pure: no I/O, no environment, no clock, no async. The
//! one host fact it needs, "is this path an executable file", comes in as a
//! closure to [`resolve_program`].
//!
//! # The rules
//!
//! - **The argv is authoritative** (D9). [`EscalationRequest::argv`] is what
//!   runs (through `execve`, never a shell); [`display_command`] renders it
//!   for the prompt only.
//! - **Exact argv, unless the rule says otherwise** (DECISIONS D11). The rule
//!   `cat /etc/hostname` approves `cat /etc/hostname` and nothing else: not
//!   `cat /etc/hostname ~/.ssh/id_ed25519`. A rule whose last word is a lone
//!   `*` (`cargo check *`) also takes further arguments: its words are then
//!   a token prefix of the request (`cargo check`, `cargo check --tests`;
//!   not `cargo checkx`). When several rules match, the longest one (then
//!   the first) is reported, and the arguments beyond it are the "extra"
//!   arguments below.
//! - **Extra arguments stay in the project.** An extra argument that is an
//!   absolute path, starts with `~`, or has a `..` segment (also as the value
//!   of `--opt=VALUE` or `-oVALUE`) sends the request to the human: host
//!   commands run in the user's project directory, and a path out of it can
//!   name any file of the user's.
//! - **No forbidden character** in any argument ([`has_forbidden_characters`]):
//!   shell metacharacters, `#`, quotes, backslash, newline, carriage return,
//!   NUL, every control character (so ANSI escapes), Unicode bidi controls,
//!   invisible formatting characters and whitespace other than the space.
//! - **No banned program**, checked again on the request even though
//!   [`parse_auto_approve_entry`] refuses such entries (defense in depth; the
//!   rule fields are public and can be built by hand).
//! - **No command-running option among the extra arguments.** The user
//!   allowlisted `cargo check`, not `cargo check --config
//!   build.rustc-wrapper=/tmp/x`: an extra argument that [`risk_notes`] would
//!   flag as an option that runs a command, loads code or picks another
//!   project (in any spelling: `--exe`, `--exec=x`, `-xvfI`, `-ec`) sends the
//!   request to the human. Notes that merely say the allowlisted command runs
//!   project code do not (the user chose that).
//! - **No exec-like subcommand** (`npm exec`, `yarn dlx`, `bundle exec`,
//!   `uv run`, …) anywhere in the arguments: those run whatever program they
//!   name. Conservatively, the word anywhere counts (`npm test x` goes to the
//!   human too).
//!
//! # Banned programs and the decisions behind the list
//!
//! See `policy/tables.rs` for the full list with reasons. Categories: version
//! control (git and every `git-*`, hg, jj), shells, interpreters (including
//! sed, java, R), command runners and privilege or namespace wrappers (env,
//! xargs, sudo, find, nice, nohup, timeout, time, strace, gdb, watch, chroot,
//! setsid, stdbuf, flock, nsenter, unshare, runuser, setpriv, npx, …, and the
//! dynamic loader itself), remote access and transfer tools, container and
//! cluster control, editors and pagers, and Lazaret itself.
//!
//! - `make` is **allowed** (with a risk note): it runs the project's
//!   Makefile, the same class of risk as `npm test` or `cargo check` that D9
//!   accepts for an explicit allowlist entry; its command-running options
//!   (`-f`, `-C`, `--eval`, `-E`, `-I`) and `NAME=value` overrides (`SHELL=`)
//!   in extra arguments still go to the human.
//! - `ssh`, `scp`, `sftp`, `rsync` (and curl, wget, nc, socat) are **banned**:
//!   the arguments after any prefix name a remote command or local programs
//!   (`-o ProxyCommand=`, `-e`, `-S`), they carry the user's credentials,
//!   read and upload any host file, and bypass the sandbox's egress rules.
//! - `docker`, `podman`, `kubectl` (and other container runtimes) are
//!   **banned**: `run -v /:/host --privileged` is root-equivalent, and podman
//!   reaches Lazaret's own sandboxes.
//!
//! # Names
//!
//! A program is judged by the lowercased basename of `argv[0]`; a table entry
//! matches it exactly or followed by a digit, `.`, `-` or `_` (`python3.12`,
//! `git-upload-pack`, `docker-compose`).

mod tables;
#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};

use tables::{
    ArgumentTextRule, BannedProgramCategory, CommandOptionRule, ExecSubcommandRule, ProjectCodeRule, SubcommandCondition,
    ARGUMENT_TEXT_RULES, BANNED_PROGRAM_CATEGORIES, COMMAND_OPTION_RULES, EXEC_SUBCOMMAND_RULES, PROJECT_CODE_RULES,
};

/// Errors of the policy engine. Texts from the request or the configuration
/// are shown with control and invisible characters escaped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error("auto_approve entry `{entry}` is empty")]
    EmptyEntry { entry: String },

    #[error("auto_approve entry `{entry}` is refused: {reason}")]
    RefusedEntry { entry: String, reason: String },

    #[error("program `{program}` cannot be run: {reason}")]
    UnresolvableProgram { program: String, reason: String },

    #[error("built-in policy rule `{rule}` is inconsistent: {problem}")]
    InconsistentBuiltInRule { rule: String, problem: String },
}

/// A parsed and validated `auto_approve` entry.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AutoApproveRule {
    /// The words of the entry, without a trailing `*`.
    pub argv: Vec<String>,
    /// The entry ended in ` *`: further arguments are accepted (each checked).
    pub trailing_arguments: bool,
}

/// The last word of an entry that accepts further arguments (`cargo check *`).
pub const TRAILING_ARGUMENTS_MARK: &str = "*";

/// What the sandbox asked to run. The argv is authoritative (D9): it is what
/// the human approves and what runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EscalationRequest {
    pub argv: Vec<String>,
}

/// The outcome of [`decide`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Run without asking; `rule_index` is the index in the rules given to
    /// [`decide`] of the (longest) matching rule.
    AutoApprove { rule_index: usize },
    /// Ask the human; every reason auto-approval was refused, for the prompt
    /// and the audit log.
    NeedsHuman { reasons: Vec<String> },
}

/// Parses and validates one configured `auto_approve` entry such as
/// `cargo check` (exactly that argv) or `cargo check *` (that, or that
/// followed by further arguments).
///
/// Refused, with the entry and the reason: an empty entry; any forbidden
/// character ([`has_forbidden_characters`]; quotes included, so an entry is
/// plain words); a program containing `/` (commands are looked up on the
/// host's PATH, never named by path) or `=` (an environment assignment, which
/// has no meaning without a shell); a banned program; an exec-like
/// subcommand (`npm exec`, `bundle exec`, …).
pub fn parse_auto_approve_entry(text: &str) -> Result<AutoApproveRule, PolicyError> {
    let refuse = |reason: String| PolicyError::RefusedEntry { entry: escape_for_message(text), reason };
    if text.trim().is_empty() {
        return Err(PolicyError::EmptyEntry { entry: escape_for_message(text) });
    }
    let (words, trailing_arguments) = match text.trim_end().strip_suffix(TRAILING_ARGUMENTS_MARK) {
        Some(rest) if rest.ends_with(' ') => (rest, true),
        _ => (text, false),
    };
    if words.trim().is_empty() {
        return Err(refuse("`*` alone would approve any command; name the command before it".to_owned()));
    }
    let text = words;
    if let Some(reason) = has_forbidden_characters(text) {
        return Err(refuse(reason));
    }
    let argv = shell_words::split(text).map_err(|error| refuse(format!("cannot be split into words: {error}")))?;
    let Some(program) = argv.first() else {
        return Err(PolicyError::EmptyEntry { entry: escape_for_message(text) });
    };
    if program.contains('/') {
        return Err(refuse(format!(
            "the program `{program}` contains `/`; entries name a command that is looked up on the host's PATH, not a file"
        )));
    }
    if program.contains('=') {
        return Err(refuse(format!(
            "`{program}` looks like an environment assignment; entries run without a shell, so name the command first"
        )));
    }
    if let Some(reason) = banned_program_reason(program) {
        return Err(refuse(reason));
    }
    if let Some(note) = exec_subcommand_notes(&argv).into_iter().next() {
        return Err(refuse(format!("it includes a subcommand that runs any program: {note}")));
    }
    Ok(AutoApproveRule { argv, trailing_arguments })
}

/// Renders an argv for display (the prompt, logs): each argument quoted with
/// shell-words so that `shell_words::split` gives the argv back.
///
/// An argument containing a control, bidi, invisible or unusual whitespace
/// character is instead shown in bash's `$'…'` form with those characters
/// escaped (`$'a\eb'`, `$'\u202E'`), so that nothing in a request can
/// recolour, reorder, hide or break the line the human reads. Such arguments
/// never auto-approve; shell-words does not parse the `$'…'` form, so the
/// round trip holds only for arguments without those characters.
pub fn display_command(argv: &[String]) -> String {
    argv.iter().map(|argument| display_argument(argument)).collect::<Vec<_>>().join(" ")
}

/// Decides whether the request may run without the human. See the module
/// documentation for the rules; every failed condition becomes a reason.
pub fn decide(request: &EscalationRequest, rules: &[AutoApproveRule]) -> Decision {
    let argv = &request.argv;
    let Some(program) = argv.first() else {
        return Decision::NeedsHuman { reasons: vec!["the request names no program (its argv is empty)".to_owned()] };
    };
    let mut reasons = Vec::new();
    for (index, argument) in argv.iter().enumerate() {
        if let Some(reason) = has_forbidden_characters(argument) {
            reasons.push(format!("{} {} {reason}", argument_label(index), display_argument(argument)));
        }
    }
    if program.is_empty() {
        reasons.push("the program name is empty".to_owned());
    }
    if program.contains('/') {
        reasons.push(format!("the program {} contains `/`; only commands found on the host's PATH can run", display_argument(program)));
    }
    if let Some(reason) = banned_program_reason(program) {
        reasons.push(reason);
    }
    reasons.extend(exec_subcommand_notes(argv));
    match longest_matching_rule(argv, rules) {
        None => reasons.push(format!(
            "no auto_approve rule matches {} (a rule matches its exact argv; one ending in ` *` also takes further arguments)",
            display_command(argv)
        )),
        Some(rule_index) => {
            let rule_length = rules.get(rule_index).map_or(argv.len(), |rule| rule.argv.len());
            let rule_display = display_command(argv.get(..rule_length).unwrap_or(argv));
            for note in argument_notes(argv, rule_length) {
                reasons.push(format!("beyond the auto_approve rule `{rule_display} *`: {note}"));
            }
            for argument in argv.iter().skip(rule_length.max(1)) {
                if let Some(note) = path_out_of_project_note(argument) {
                    reasons.push(format!("beyond the auto_approve rule `{rule_display} *`: {} {note}", display_argument(argument)));
                }
            }
            if reasons.is_empty() {
                return Decision::AutoApprove { rule_index };
            }
        }
    }
    Decision::NeedsHuman { reasons }
}

/// Human-readable risk notes for the prompt: commands known to run project
/// code (npm scripts, cargo build scripts, Makefiles, setup.py, conftest.py,
/// …), exec-like subcommands, options that run commands or load code (in
/// every spelling: `--exec`, `--exe`, `--exec=x`, `-exec`, bundled `-ec`,
/// tar's `xvfI`), dynamic loader variables, and a program named by path.
/// Empty when nothing is known about the command.
pub fn risk_notes(argv: &[String]) -> Vec<String> {
    let mut notes = Vec::new();
    let Some(program) = argv.first() else {
        return vec!["the request names no program (its argv is empty)".to_owned()];
    };
    if program.is_empty() {
        notes.push("the program name is empty".to_owned());
    } else if program.starts_with('/') {
        notes.push(format!(
            "the program {} is an absolute path: it names a file on the host, not a command from the host's PATH",
            display_argument(program)
        ));
    } else if program.contains('/') {
        notes.push(format!(
            "the program {} is a relative path: it would be resolved on the host, in the directory the command runs in, \
             not in the sandbox",
            display_argument(program)
        ));
    }
    let name = program_name(program);
    for rule in PROJECT_CODE_RULES {
        if project_code_rule_applies(rule, &name, argv) {
            notes.push(rule.note.to_owned());
        }
    }
    notes.extend(exec_subcommand_notes(argv));
    notes.extend(argument_notes(argv, 1));
    deduplicate(notes)
}

/// A note for the prompt when the program cannot be resolved on the host
/// (not found on the host's PATH, or named by path); `None` when it can.
pub fn program_resolution_note(program: &str, host_path: &str, is_executable_file: &dyn Fn(&Path) -> bool) -> Option<String> {
    resolve_program(program, host_path, is_executable_file).err().map(|error| error.to_string())
}

/// Resolves a program name to an absolute path with the **host's** PATH
/// string (never a PATH from the request).
///
/// A program containing `/` is refused, so nothing in the request can pick
/// a file; so are an empty name, `.` and `..`. Empty and relative PATH
/// entries are skipped (they would mean the current directory). The first
/// candidate for which `is_executable_file` is true wins.
pub fn resolve_program(program: &str, host_path: &str, is_executable_file: &dyn Fn(&Path) -> bool) -> Result<PathBuf, PolicyError> {
    let refuse = |reason: &str| PolicyError::UnresolvableProgram { program: escape_for_message(program), reason: reason.to_owned() };
    if program.is_empty() {
        return Err(refuse("the program name is empty"));
    }
    if program.contains('/') {
        return Err(refuse("it contains `/`; only a command name looked up on the host's PATH can run, never a path"));
    }
    if program == "." || program == ".." {
        return Err(refuse("`.` and `..` are not command names"));
    }
    if program.contains('\0') {
        return Err(refuse("it contains a NUL character"));
    }
    for directory in host_path.split(':').map(Path::new).filter(|directory| directory.is_absolute()) {
        let candidate = directory.join(program);
        if is_executable_file(&candidate) {
            return Ok(candidate);
        }
    }
    Err(refuse("it was not found on the host's PATH (empty and relative PATH entries are ignored)"))
}

/// Why `text` may not pass automatically: the first shell metacharacter
/// (`` ; | & $ ` < > ( ) { } * ? [ ] ~ ! \ ' " # ``), newline, carriage return,
/// NUL, other control character (ESC starts ANSI escapes), Unicode bidi
/// control (U+202A..U+202E, U+2066..U+2069, U+200E, U+200F, U+061C),
/// invisible formatting character (zero-width characters, tags, variation
/// selectors, …) or whitespace other than the space, named with its code
/// point, e.g. "contains `;` (shell metacharacter)". `None` when clean.
pub fn has_forbidden_characters(text: &str) -> Option<String> {
    text.chars().find_map(forbidden_character_reason)
}

/// Why a program can never be auto-approved, or `None`.
pub fn banned_program_reason(program: &str) -> Option<String> {
    banned_category(program)
        .map(|category| format!("{} is never auto-approved ({}: {})", display_argument(program), category.name, category.reason))
}

/// Checks every example of every built-in rule: each rule must match all its
/// `examples_matching` and none of its `examples_not_matching`. Cheap; a unit
/// test runs it, and callers may run it at startup.
pub fn validate_built_in_rules() -> Result<(), PolicyError> {
    let inconsistent = |rule: &str, problem: String| PolicyError::InconsistentBuiltInRule { rule: rule.to_owned(), problem };
    let check = |rule: &str, matching: &[&str], not_matching: &[&str], matches: &dyn Fn(&[String]) -> bool| {
        if matching.is_empty() {
            return Err(inconsistent(rule, "it has no examples_matching".to_owned()));
        }
        for example in matching {
            if !matches(&example_argv(example)) {
                return Err(inconsistent(rule, format!("it does not match its example `{example}`")));
            }
        }
        for example in not_matching {
            if matches(&example_argv(example)) {
                return Err(inconsistent(rule, format!("it matches its counter-example `{example}`")));
            }
        }
        Ok(())
    };
    for category in BANNED_PROGRAM_CATEGORIES {
        let matches = |argv: &[String]| {
            argv.first().is_some_and(|program| category.programs.iter().any(|entry| program_matches(&program_name(program), entry)))
        };
        check(category.name, category.examples_matching, category.examples_not_matching, &matches)?;
    }
    for rule in PROJECT_CODE_RULES {
        let matches = |argv: &[String]| argv.first().is_some_and(|program| project_code_rule_applies(rule, &program_name(program), argv));
        check(rule.name, rule.examples_matching, rule.examples_not_matching, &matches)?;
    }
    for rule in COMMAND_OPTION_RULES {
        let matches = |argv: &[String]| !command_option_notes(rule, argv, 1).is_empty();
        check(rule.name, rule.examples_matching, rule.examples_not_matching, &matches)?;
    }
    for rule in ARGUMENT_TEXT_RULES {
        let matches = |argv: &[String]| argv.iter().skip(1).any(|argument| argument_text_rule_matches(rule, argument));
        check(rule.name, rule.examples_matching, rule.examples_not_matching, &matches)?;
    }
    for rule in EXEC_SUBCOMMAND_RULES {
        let matches = |argv: &[String]| exec_subcommand_rule_matches(rule, argv);
        check(rule.name, rule.examples_matching, rule.examples_not_matching, &matches)?;
    }
    Ok(())
}

fn example_argv(example: &str) -> Vec<String> {
    example.split_whitespace().map(str::to_owned).collect()
}

/// `true` when `rule` is non-empty, not longer than `argv`, and equal to its
/// first elements.
fn is_token_prefix(rule: &[String], argv: &[String]) -> bool {
    !rule.is_empty() && rule.len() <= argv.len() && rule.iter().zip(argv).all(|(rule_word, argument)| rule_word == argument)
}

/// Whether `rule` matches `argv`: exactly, or (a rule ending in ` *`) as a
/// token prefix.
fn rule_matches(rule: &AutoApproveRule, argv: &[String]) -> bool {
    if rule.trailing_arguments {
        is_token_prefix(&rule.argv, argv)
    } else {
        !rule.argv.is_empty() && rule.argv == argv
    }
}

/// Why an extra argument may name something outside the project directory:
/// an absolute path, a home directory (`~`), or a `..` segment, also as the
/// value of `--opt=VALUE` or a short option's attached `-oVALUE`.
pub fn path_out_of_project_note(argument: &str) -> Option<&'static str> {
    let mut values = vec![argument];
    if argument.starts_with('-') {
        if let Some((_, value)) = argument.split_once('=') {
            values.push(value);
        }
        if !argument.starts_with("--") {
            values.push(argument.get(2..).unwrap_or(""));
        }
    }
    for value in values {
        if value.starts_with('/') {
            return Some("is an absolute path: it can name any file on the host, not only the project's");
        }
        if value.starts_with('~') {
            return Some("names a home directory: outside the project");
        }
        if value.split('/').any(|segment| segment == "..") {
            return Some("has a `..` segment: it can leave the project directory");
        }
    }
    None
}

/// The index of the longest rule that matches `argv` (the first one among
/// equals).
fn longest_matching_rule(argv: &[String], rules: &[AutoApproveRule]) -> Option<usize> {
    let mut best: Option<(usize, usize)> = None;
    for (index, rule) in rules.iter().enumerate() {
        if rule_matches(rule, argv) && best.is_none_or(|(_, length)| rule.argv.len() > length) {
            best = Some((index, rule.argv.len()));
        }
    }
    best.map(|(index, _)| index)
}

fn argument_label(index: usize) -> String {
    if index == 0 {
        "the program".to_owned()
    } else {
        format!("argument {index}")
    }
}

/// The lowercased basename of `argv[0]`.
fn program_name(program: &str) -> String {
    program.rsplit('/').next().unwrap_or(program).to_lowercase()
}

/// `name` is `entry`, or `entry` followed by a digit, `.`, `-` or `_`
/// (`python3.12`, `git-upload-pack`, `sh.distrib`).
fn program_matches(name: &str, entry: &str) -> bool {
    match name.strip_prefix(entry) {
        Some("") => true,
        Some(rest) => rest.starts_with(|character: char| character.is_ascii_digit() || matches!(character, '.' | '-' | '_')),
        None => false,
    }
}

fn program_in(name: &str, programs: &[&str]) -> bool {
    programs.iter().any(|entry| program_matches(name, entry))
}

fn banned_category(program: &str) -> Option<&'static BannedProgramCategory> {
    let name = program_name(program);
    BANNED_PROGRAM_CATEGORIES.iter().find(|category| program_in(&name, category.programs))
}

fn operands(argv: &[String]) -> impl Iterator<Item = &String> {
    argv.iter().skip(1).filter(|argument| !argument.starts_with('-'))
}

fn project_code_rule_applies(rule: &ProjectCodeRule, name: &str, argv: &[String]) -> bool {
    if !program_in(name, rule.programs) {
        return false;
    }
    match &rule.condition {
        SubcommandCondition::Always => true,
        SubcommandCondition::AnyOperandIn(subcommands) => operands(argv).any(|operand| subcommands.contains(&operand.as_str())),
        SubcommandCondition::FirstOperandNotIn { harmless, bare_runs_code } => match operands(argv).next() {
            None => *bare_runs_code,
            Some(operand) => !harmless.contains(&operand.as_str()),
        },
    }
}

fn exec_subcommand_rule_matches(rule: &ExecSubcommandRule, argv: &[String]) -> bool {
    let Some(program) = argv.first() else {
        return false;
    };
    program_in(&program_name(program), rule.programs) && argv.iter().skip(1).any(|argument| rule.subcommands.contains(&argument.as_str()))
}

fn exec_subcommand_notes(argv: &[String]) -> Vec<String> {
    EXEC_SUBCOMMAND_RULES.iter().filter(|rule| exec_subcommand_rule_matches(rule, argv)).map(|rule| rule.note.to_owned()).collect()
}

fn argument_text_rule_matches(rule: &ArgumentTextRule, argument: &str) -> bool {
    let lowercase = argument.to_lowercase();
    rule.needles.iter().any(|needle| lowercase.contains(needle))
}

/// Notes about `argv[from_index..]`: command-running options and argument
/// texts, in the context of the program `argv[0]`.
fn argument_notes(argv: &[String], from_index: usize) -> Vec<String> {
    let mut notes = Vec::new();
    for rule in COMMAND_OPTION_RULES {
        notes.extend(command_option_notes(rule, argv, from_index));
    }
    for argument in argv.iter().skip(from_index.max(1)) {
        for rule in ARGUMENT_TEXT_RULES {
            if argument_text_rule_matches(rule, argument) {
                notes.push(format!("{}: {}", display_argument(argument), rule.note));
            }
        }
    }
    deduplicate(notes)
}

fn command_option_notes(rule: &CommandOptionRule, argv: &[String], from_index: usize) -> Vec<String> {
    let Some(program) = argv.first() else {
        return Vec::new();
    };
    if !rule.programs.is_empty() && !program_in(&program_name(program), rule.programs) {
        return Vec::new();
    }
    let mut notes = Vec::new();
    for (index, argument) in argv.iter().enumerate().skip(from_index.max(1)) {
        if let Some(how) = option_match(rule, argument, index == 1) {
            notes.push(format!("{}{how}: {}", display_argument(argument), rule.note));
        }
    }
    notes
}

/// Whether `argument` is one of the rule's options; `Some` with how it was
/// recognised ("" when the argument spells the option out in full).
fn option_match(rule: &CommandOptionRule, argument: &str, is_first_argument: bool) -> Option<String> {
    if let Some(body) = argument.strip_prefix("--") {
        let name = body.split('=').next().unwrap_or(body).to_lowercase();
        if name.is_empty() || rule.real_long_options.contains(&name.as_str()) {
            return None;
        }
        for option in rule.long_options {
            if name == *option {
                return Some(String::new());
            }
            if rule.abbreviations && name.chars().count() >= 3 && option.starts_with(name.as_str()) {
                return Some(format!(" (abbreviates `--{option}`)"));
            }
        }
        return None;
    }
    if let Some(body) = argument.strip_prefix('-') {
        let name = body.split('=').next().unwrap_or(body).to_lowercase();
        if rule.single_dash_long_options.iter().any(|option| option.to_lowercase() == name) {
            return Some(String::new());
        }
        return short_option_match(rule, body);
    }
    if rule.first_argument_is_bundle && is_first_argument {
        return short_option_match(rule, argument).map(|how| format!("{how} (old-style bundled options)"));
    }
    if rule.variable_assignments && argument.contains('=') {
        return Some(" (a variable override)".to_owned());
    }
    None
}

fn short_option_match(rule: &CommandOptionRule, bundle: &str) -> Option<String> {
    let found = if rule.bundles_short_options {
        bundle.chars().find(|character| rule.short_options.contains(character))
    } else {
        bundle.chars().next().filter(|character| rule.short_options.contains(character))
    }?;
    if bundle.chars().count() == 1 {
        Some(String::new())
    } else {
        Some(format!(" (includes `-{found}`)"))
    }
}

fn deduplicate(notes: Vec<String>) -> Vec<String> {
    let mut unique: Vec<String> = Vec::with_capacity(notes.len());
    for note in notes {
        if !unique.contains(&note) {
            unique.push(note);
        }
    }
    unique
}

fn shell_metacharacter_kind(character: char) -> Option<&'static str> {
    match character {
        '#' => Some("shell comment character"),
        '\'' | '"' => Some("shell quote"),
        '\\' => Some("shell escape character"),
        ';' | '|' | '&' | '$' | '`' | '<' | '>' | '(' | ')' | '{' | '}' | '*' | '?' | '[' | ']' | '~' | '!' => Some("shell metacharacter"),
        _ => None,
    }
}

fn bidi_control_name(character: char) -> Option<&'static str> {
    match character {
        '\u{202A}' => Some("LEFT-TO-RIGHT EMBEDDING"),
        '\u{202B}' => Some("RIGHT-TO-LEFT EMBEDDING"),
        '\u{202C}' => Some("POP DIRECTIONAL FORMATTING"),
        '\u{202D}' => Some("LEFT-TO-RIGHT OVERRIDE"),
        '\u{202E}' => Some("RIGHT-TO-LEFT OVERRIDE"),
        '\u{2066}' => Some("LEFT-TO-RIGHT ISOLATE"),
        '\u{2067}' => Some("RIGHT-TO-LEFT ISOLATE"),
        '\u{2068}' => Some("FIRST STRONG ISOLATE"),
        '\u{2069}' => Some("POP DIRECTIONAL ISOLATE"),
        '\u{200E}' => Some("LEFT-TO-RIGHT MARK"),
        '\u{200F}' => Some("RIGHT-TO-LEFT MARK"),
        '\u{061C}' => Some("ARABIC LETTER MARK"),
        _ => None,
    }
}

/// Characters that render as nothing (or can carry hidden text): zero-width
/// characters, fillers, tags, variation selectors and other default-ignorable
/// formatting characters.
fn is_invisible(character: char) -> bool {
    matches!(
        character,
        '\u{00AD}'
            | '\u{034F}'
            | '\u{115F}'
            | '\u{1160}'
            | '\u{17B4}'
            | '\u{17B5}'
            | '\u{180B}'..='\u{180F}'
            | '\u{200B}'..='\u{200D}'
            | '\u{2060}'..='\u{2065}'
            | '\u{206A}'..='\u{206F}'
            | '\u{3164}'
            | '\u{FE00}'..='\u{FE0F}'
            | '\u{FEFF}'
            | '\u{FFA0}'
            | '\u{FFF9}'..='\u{FFFB}'
            | '\u{1D173}'..='\u{1D17A}'
            | '\u{E0000}'..='\u{E007F}'
            | '\u{E0100}'..='\u{E01EF}'
    )
}

fn code_point(character: char) -> String {
    format!("U+{:04X}", u32::from(character))
}

/// Everything forbidden except the shell metacharacters: the characters that
/// must not reach the human's terminal unescaped.
pub(crate) fn is_display_unsafe(character: char) -> bool {
    character.is_control()
        || bidi_control_name(character).is_some()
        || is_invisible(character)
        || (character.is_whitespace() && character != ' ')
}

fn forbidden_character_reason(character: char) -> Option<String> {
    if let Some(kind) = shell_metacharacter_kind(character) {
        return Some(if character == '`' { format!("contains `` ` `` ({kind})") } else { format!("contains `{character}` ({kind})") });
    }
    let description = match character {
        '\n' => "a newline (U+000A)".to_owned(),
        '\r' => "a carriage return (U+000D)".to_owned(),
        '\0' => "a NUL character (U+0000)".to_owned(),
        '\t' => "a tab (U+0009, a control character)".to_owned(),
        '\u{1B}' => "an ANSI escape character (ESC, U+001B)".to_owned(),
        '\u{9B}' => "an ANSI control sequence introducer (CSI, U+009B)".to_owned(),
        _ if character.is_control() => format!("a control character ({})", code_point(character)),
        _ => {
            if let Some(name) = bidi_control_name(character) {
                format!("a Unicode bidirectional control character ({}, {name})", code_point(character))
            } else if is_invisible(character) {
                format!("an invisible Unicode formatting character ({})", code_point(character))
            } else if character.is_whitespace() && character != ' ' {
                format!("whitespace other than a space ({})", code_point(character))
            } else {
                return None;
            }
        }
    };
    Some(format!("contains {description}"))
}

/// One argument for display: shell-words quoting, or `$'…'` with escapes
/// when it holds display-unsafe characters.
fn display_argument(argument: &str) -> String {
    if !argument.chars().any(is_display_unsafe) {
        return shell_words::quote(argument).into_owned();
    }
    let mut rendered = String::from("$'");
    for character in argument.chars() {
        rendered.push_str(&escape_character(character, true));
    }
    rendered.push('\'');
    rendered
}

/// `text` with display-unsafe characters escaped, for error messages that
/// quote configuration or request text in backticks.
fn escape_for_message(text: &str) -> String {
    text.chars().map(|character| escape_character(character, false)).collect()
}

fn escape_character(character: char, in_ansi_c_quotes: bool) -> String {
    match character {
        '\\' if in_ansi_c_quotes => "\\\\".to_owned(),
        '\'' if in_ansi_c_quotes => "\\'".to_owned(),
        '\n' => "\\n".to_owned(),
        '\r' => "\\r".to_owned(),
        '\t' => "\\t".to_owned(),
        '\u{1B}' => "\\e".to_owned(),
        _ if is_display_unsafe(character) => match u32::from(character) {
            value @ 0..=0xFF => format!("\\x{value:02X}"),
            value @ 0x100..=0xFFFF => format!("\\u{value:04X}"),
            value => format!("\\U{value:08X}"),
        },
        _ => character.to_string(),
    }
}
