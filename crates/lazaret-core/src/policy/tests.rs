//! Table tests of every policy function and property tests of the
//! auto-approve invariants.

use std::cell::RefCell;
use std::collections::BTreeSet;

use proptest::prelude::*;

use super::tables::BANNED_PROGRAM_CATEGORIES;
use super::*;

fn words(text: &str) -> Vec<String> {
    text.split_whitespace().map(str::to_owned).collect()
}

fn rule(text: &str) -> AutoApproveRule {
    parse_auto_approve_entry(text).unwrap()
}

fn request(text: &str) -> EscalationRequest {
    EscalationRequest { argv: words(text) }
}

fn reasons_of(decision: &Decision) -> Vec<String> {
    match decision {
        Decision::AutoApprove { .. } => Vec::new(),
        Decision::NeedsHuman { reasons } => reasons.clone(),
    }
}

/// Every character the brief lists as forbidden, plus a sample of the extra
/// invisible ones.
const FORBIDDEN_CHARACTERS: &[char] = &[
    ';',
    '|',
    '&',
    '$',
    '`',
    '<',
    '>',
    '(',
    ')',
    '{',
    '}',
    '*',
    '?',
    '[',
    ']',
    '~',
    '!',
    '\\',
    '\'',
    '"',
    '#',
    '\n',
    '\r',
    '\0',
    '\t',
    '\u{1}',
    '\u{7}',
    '\u{8}',
    '\u{1B}',
    '\u{7F}',
    '\u{85}',
    '\u{9B}',
    '\u{202A}',
    '\u{202B}',
    '\u{202C}',
    '\u{202D}',
    '\u{202E}',
    '\u{2066}',
    '\u{2067}',
    '\u{2068}',
    '\u{2069}',
    '\u{200E}',
    '\u{200F}',
    '\u{061C}',
    '\u{200B}',
    '\u{200D}',
    '\u{FEFF}',
    '\u{A0}',
    '\u{2028}',
    '\u{3000}',
    '\u{E0041}',
    '\u{FE0F}',
];

/// The banned programs the brief names, plus this module's decisions.
const BRIEF_BANNED_PROGRAMS: &[&str] = &[
    "git",
    "sh",
    "bash",
    "dash",
    "zsh",
    "fish",
    "ksh",
    "csh",
    "tcsh",
    "busybox",
    "python",
    "python3",
    "python2",
    "perl",
    "ruby",
    "node",
    "deno",
    "bun",
    "php",
    "lua",
    "tclsh",
    "awk",
    "gawk",
    "mawk",
    "osascript",
    "pwsh",
    "env",
    "xargs",
    "sudo",
    "doas",
    "su",
    "find",
    "nice",
    "nohup",
    "timeout",
    "time",
    "strace",
    "ltrace",
    "gdb",
    "watch",
    "chroot",
    "setsid",
    "stdbuf",
    "flock",
    "nsenter",
    "unshare",
    "runuser",
    "setpriv",
    "ssh",
    "scp",
    "sftp",
    "rsync",
    "docker",
    "podman",
    "kubectl",
    "npx",
    "lazaret",
];

// ---------------------------------------------------------------- built-ins

#[test]
fn built_in_rules_match_their_examples() {
    assert_eq!(validate_built_in_rules(), Ok(()));
}

#[test]
fn every_brief_banned_program_is_in_a_category() {
    for program in BRIEF_BANNED_PROGRAMS {
        assert!(banned_program_reason(program).is_some(), "{program} is not banned");
    }
    for program in ["make", "cargo", "npm", "yarn", "pnpm", "pytest", "go", "ls", "cat", "tar", "shellcheck", "envsubst"] {
        assert_eq!(banned_program_reason(program), None, "{program} is banned");
    }
}

#[test]
fn banned_names_are_matched_by_basename_case_and_version_suffix() {
    let banned = [
        "/usr/bin/git",
        "GIT",
        "Git",
        "git-upload-pack",
        "git-receive-pack",
        "python3.12",
        "python2.7",
        "perl5.36",
        "ruby3.1",
        "lua5.4",
        "sh.distrib",
        "ld-linux-x86-64.so.2",
        "docker-compose",
        "bash_5",
        "ssh-agent",
    ];
    for program in banned {
        assert!(banned_program_reason(program).is_some(), "{program} is not banned");
    }
    for program in ["pythonic", "shellcheck", "findmnt", "timedatectl", "envsubst", "javac", "gitleaks", "ocaml", "vite"] {
        assert_eq!(banned_program_reason(program), None, "{program} is banned");
    }
}

#[test]
fn banned_reason_names_program_and_category() {
    let reason = banned_program_reason("sudo").unwrap();
    assert!(reason.contains("sudo is never auto-approved"), "{reason}");
    assert!(reason.contains("command runner"), "{reason}");
}

#[test]
fn categories_have_no_duplicate_programs() {
    let mut seen = BTreeSet::new();
    for category in BANNED_PROGRAM_CATEGORIES {
        for program in category.programs {
            assert!(seen.insert(*program), "{program} listed twice");
        }
    }
}

// ------------------------------------------------------ has_forbidden_characters

#[test]
fn forbidden_characters_are_named() {
    let cases: &[(&str, &str)] = &[
        ("a;b", "contains `;` (shell metacharacter)"),
        ("a|b", "contains `|` (shell metacharacter)"),
        ("a&b", "contains `&` (shell metacharacter)"),
        ("$(x)", "contains `$` (shell metacharacter)"),
        ("a`b", "contains `` ` `` (shell metacharacter)"),
        ("<x", "contains `<` (shell metacharacter)"),
        (">x", "contains `>` (shell metacharacter)"),
        ("(x", "contains `(` (shell metacharacter)"),
        (")x", "contains `)` (shell metacharacter)"),
        ("{x", "contains `{` (shell metacharacter)"),
        ("}x", "contains `}` (shell metacharacter)"),
        ("*.rs", "contains `*` (shell metacharacter)"),
        ("a?", "contains `?` (shell metacharacter)"),
        ("[a", "contains `[` (shell metacharacter)"),
        ("a]", "contains `]` (shell metacharacter)"),
        ("~/x", "contains `~` (shell metacharacter)"),
        ("!x", "contains `!` (shell metacharacter)"),
        ("a\\b", "contains `\\` (shell escape character)"),
        ("it's", "contains `'` (shell quote)"),
        ("\"x\"", "contains `\"` (shell quote)"),
        ("x #comment", "contains `#` (shell comment character)"),
        ("a\nb", "contains a newline (U+000A)"),
        ("a\rb", "contains a carriage return (U+000D)"),
        ("a\0b", "contains a NUL character (U+0000)"),
        ("a\tb", "contains a tab (U+0009, a control character)"),
        ("\u{1B}[31mred", "contains an ANSI escape character (ESC, U+001B)"),
        ("\u{9B}31m", "contains an ANSI control sequence introducer (CSI, U+009B)"),
        ("a\u{7}", "contains a control character (U+0007)"),
        ("a\u{7F}", "contains a control character (U+007F)"),
        ("a\u{85}", "contains a control character (U+0085)"),
        ("\u{202A}", "contains a Unicode bidirectional control character (U+202A, LEFT-TO-RIGHT EMBEDDING)"),
        ("\u{202B}", "contains a Unicode bidirectional control character (U+202B, RIGHT-TO-LEFT EMBEDDING)"),
        ("\u{202C}", "contains a Unicode bidirectional control character (U+202C, POP DIRECTIONAL FORMATTING)"),
        ("\u{202D}", "contains a Unicode bidirectional control character (U+202D, LEFT-TO-RIGHT OVERRIDE)"),
        ("\u{202E}", "contains a Unicode bidirectional control character (U+202E, RIGHT-TO-LEFT OVERRIDE)"),
        ("\u{2066}", "contains a Unicode bidirectional control character (U+2066, LEFT-TO-RIGHT ISOLATE)"),
        ("\u{2067}", "contains a Unicode bidirectional control character (U+2067, RIGHT-TO-LEFT ISOLATE)"),
        ("\u{2068}", "contains a Unicode bidirectional control character (U+2068, FIRST STRONG ISOLATE)"),
        ("\u{2069}", "contains a Unicode bidirectional control character (U+2069, POP DIRECTIONAL ISOLATE)"),
        ("\u{200E}", "contains a Unicode bidirectional control character (U+200E, LEFT-TO-RIGHT MARK)"),
        ("\u{200F}", "contains a Unicode bidirectional control character (U+200F, RIGHT-TO-LEFT MARK)"),
        ("\u{061C}", "contains a Unicode bidirectional control character (U+061C, ARABIC LETTER MARK)"),
        ("a\u{200B}b", "contains an invisible Unicode formatting character (U+200B)"),
        ("a\u{FEFF}", "contains an invisible Unicode formatting character (U+FEFF)"),
        ("a\u{E0041}", "contains an invisible Unicode formatting character (U+E0041)"),
        ("a\u{A0}b", "contains whitespace other than a space (U+00A0)"),
        ("a\u{2028}b", "contains whitespace other than a space (U+2028)"),
    ];
    for (text, expected) in cases {
        assert_eq!(has_forbidden_characters(text).as_deref(), Some(*expected), "{text:?}");
    }
}

#[test]
fn every_forbidden_character_is_caught() {
    for character in FORBIDDEN_CHARACTERS {
        assert!(has_forbidden_characters(&format!("x{character}y")).is_some(), "{character:?}");
    }
    for value in (0u32..0x20).chain(0x7F..0xA0) {
        let character = char::from_u32(value).unwrap();
        assert!(has_forbidden_characters(&character.to_string()).is_some(), "{value:#x}");
    }
}

#[test]
fn ordinary_text_is_clean() {
    for text in ["", "cargo", "--exec=x", "a b", "./x", "/usr/bin/x", "über", "日本語", "@:,.+-=/%^_", "-j8", "émoji😀"] {
        assert_eq!(has_forbidden_characters(text), None, "{text:?}");
    }
}

#[test]
fn first_forbidden_character_is_reported() {
    assert_eq!(has_forbidden_characters("a|b;c").as_deref(), Some("contains `|` (shell metacharacter)"));
}

// ------------------------------------------------------ parse_auto_approve_entry

#[test]
fn entries_parse_into_words() {
    let cases: &[(&str, &[&str])] = &[
        ("cargo check", &["cargo", "check"]),
        ("npm test", &["npm", "test"]),
        ("  make   test  ", &["make", "test"]),
        ("cargo test --workspace", &["cargo", "test", "--workspace"]),
        ("go test ./...", &["go", "test", "./..."]),
        ("pytest -x", &["pytest", "-x"]),
        ("npm", &["npm"]),
        ("ls", &["ls"]),
        ("cargo check --config=net.offline=true", &["cargo", "check", "--config=net.offline=true"]),
    ];
    for (text, expected) in cases {
        assert_eq!(
            parse_auto_approve_entry(text),
            Ok(AutoApproveRule { argv: expected.iter().map(|word| word.to_string()).collect(), trailing_arguments: false })
        );
        let open = format!("{text} *");
        assert_eq!(
            parse_auto_approve_entry(&open),
            Ok(AutoApproveRule { argv: expected.iter().map(|word| word.to_string()).collect(), trailing_arguments: true })
        );
    }
}

#[test]
fn a_star_is_only_a_trailing_word_and_never_alone() {
    for text in ["*", "  * ", "cargo check*", "cargo * check", "cargo check **"] {
        assert!(parse_auto_approve_entry(text).is_err(), "{text:?}");
    }
}

#[test]
fn empty_entries_are_refused() {
    for text in ["", "   ", "\u{20}\u{20}"] {
        assert!(matches!(parse_auto_approve_entry(text), Err(PolicyError::EmptyEntry { .. })), "{text:?}");
    }
}

#[test]
fn entries_with_forbidden_characters_are_refused_naming_entry_and_reason() {
    for character in FORBIDDEN_CHARACTERS {
        let text = format!("cargo check {character}x");
        let error = parse_auto_approve_entry(&text).unwrap_err();
        let PolicyError::RefusedEntry { entry, reason } = &error else { panic!("{error:?}") };
        assert!(entry.starts_with("cargo check "), "{entry:?}");
        assert_eq!(Some(reason.clone()), has_forbidden_characters(&text));
        let message = error.to_string();
        assert!(message.starts_with("auto_approve entry `cargo check "), "{message}");
        assert!(!message.chars().any(is_display_unsafe), "{message:?}");
    }
    let error = parse_auto_approve_entry("cargo check # fast").unwrap_err().to_string();
    assert_eq!(error, "auto_approve entry `cargo check # fast` is refused: contains `#` (shell comment character)");
    let error = parse_auto_approve_entry("cargo check\n rm").unwrap_err().to_string();
    assert_eq!(error, "auto_approve entry `cargo check\\n rm` is refused: contains a newline (U+000A)");
}

#[test]
fn entries_naming_banned_programs_are_refused() {
    for program in BRIEF_BANNED_PROGRAMS {
        for text in [program.to_string(), format!("{program} status"), format!("{} --version", program.to_uppercase())] {
            let error = parse_auto_approve_entry(&text).unwrap_err();
            let message = error.to_string();
            assert!(message.contains(&format!("auto_approve entry `{text}` is refused")), "{message}");
            assert!(message.contains("never auto-approved"), "{message}");
        }
    }
    for text in ["git status", "git log", "git-upload-pack x", "python3.12 -m pytest", "sh.distrib -c x", "docker-compose up"] {
        assert!(parse_auto_approve_entry(text).is_err(), "{text}");
    }
}

#[test]
fn entries_with_paths_assignments_or_exec_subcommands_are_refused() {
    let cases: &[(&str, &str)] = &[
        ("/usr/bin/cargo check", "contains `/`"),
        ("./gradlew build", "contains `/`"),
        ("bin/test", "contains `/`"),
        ("RUST_LOG=debug cargo test", "environment assignment"),
        ("npm exec cowsay", "runs any program"),
        ("npm x cowsay", "runs any program"),
        ("yarn dlx create-app", "runs any program"),
        ("pnpm exec tsc", "runs any program"),
        ("bundle exec rspec", "runs any program"),
        ("uv run pytest", "runs any program"),
        ("poetry run pytest", "runs any program"),
        ("nix run nixpkgs#hello", "contains `#`"),
    ];
    for (text, expected) in cases {
        let message = parse_auto_approve_entry(text).unwrap_err().to_string();
        assert!(message.contains(expected), "{text}: {message}");
    }
}

#[test]
fn make_is_allowed_as_an_entry() {
    assert_eq!(rule("make test").argv, words("make test"));
    assert_eq!(rule("make").argv, words("make"));
}

// ------------------------------------------------------------------ decide

#[test]
fn a_rule_matches_its_exact_argv_only() {
    // D11: the attack review read host files with `cat /etc/hostname ANY-FILE`.
    let rules = [rule("cat /etc/hostname"), rule("touch /tmp/ok")];
    for (text, auto) in [
        ("cat /etc/hostname", true),
        ("touch /tmp/ok", true),
        ("cat /etc/hostname /any/host/file", false),
        ("cat /etc/hostname .git/config", false),
        ("touch /tmp/ok /tmp/anything", false),
        ("touch /tmp/ok -- -x", false),
        ("cat", false),
    ] {
        let decision = decide(&request(text), &rules);
        assert_eq!(matches!(decision, Decision::AutoApprove { .. }), auto, "{text}: {decision:?}");
    }
}

#[test]
fn a_trailing_star_takes_further_arguments_as_a_token_prefix() {
    let rules = [rule("npm test *")];
    let cases: &[(&str, bool)] = &[
        ("npm test", true),
        ("npm test --x", true),
        ("npm test --watch --coverage", true),
        ("npm test -- --grep=foo", true),
        ("npm testx", false),
        ("npm tes", false),
        ("npm", false),
        ("npm run test", false),
        ("npm Test", false),
        ("test npm", false),
        ("npx test", false),
    ];
    for (text, auto) in cases {
        let decision = decide(&request(text), &rules);
        assert_eq!(matches!(decision, Decision::AutoApprove { rule_index: 0 }), *auto, "{text}: {decision:?}");
    }
}

#[test]
fn extra_arguments_that_leave_the_project_need_human() {
    let rules = [rule("cat *"), rule("cargo check *")];
    for (text, auto) in [
        ("cat README.md", true),
        ("cat src/lib.rs docs/a.md", true),
        ("cat /etc/shadow", false),
        ("cat README.md /proc/1/environ", false),
        ("cat ../other/secret", false),
        ("cat src/../../x", false),
        ("cat ..", false),
        ("cat ~/.ssh/id_ed25519", false),
        ("cat ~", false),
        ("cargo check --target-dir=/tmp/x", false),
        ("cargo check --target-dir=target/x", true),
        ("cargo check -p/x", false),
        ("cargo check --message-format=short", true),
    ] {
        let decision = decide(&request(text), &rules);
        assert_eq!(matches!(decision, Decision::AutoApprove { .. }), auto, "{text}: {decision:?}");
    }
    let reasons = reasons_of(&decide(&request("cat /etc/shadow"), &rules));
    assert_eq!(
        reasons,
        ["beyond the auto_approve rule `cat *`: /etc/shadow is an absolute path: it can name any file on the host, not only the project's"]
    );
}

#[test]
fn equal_length_prefix_auto_approves() {
    assert_eq!(decide(&request("cargo check"), &[rule("cargo check")]), Decision::AutoApprove { rule_index: 0 });
    assert_eq!(decide(&request("cargo check"), &[rule("cargo check *")]), Decision::AutoApprove { rule_index: 0 });
}

#[test]
fn longest_rule_then_first_is_reported() {
    let rules = [rule("cargo *"), rule("cargo test *"), rule("cargo test *")];
    assert_eq!(decide(&request("cargo test --release"), &rules), Decision::AutoApprove { rule_index: 1 });
    assert_eq!(decide(&request("cargo build"), &rules), Decision::AutoApprove { rule_index: 0 });
}

#[test]
fn no_rules_or_no_match_needs_human() {
    let reasons = reasons_of(&decide(&request("cargo check"), &[]));
    let no_match = |command: &str| {
        format!("no auto_approve rule matches {command} (a rule matches its exact argv; one ending in ` *` also takes further arguments)")
    };
    assert_eq!(reasons, [no_match("cargo check")]);
    let reasons = reasons_of(&decide(&request("cargo build"), &[rule("cargo check")]));
    assert_eq!(reasons, [no_match("cargo build")]);
}

#[test]
fn empty_request_and_empty_rule_never_auto_approve() {
    let empty_rule = AutoApproveRule { argv: Vec::new(), trailing_arguments: true };
    let reasons = reasons_of(&decide(&EscalationRequest { argv: Vec::new() }, std::slice::from_ref(&empty_rule)));
    assert_eq!(reasons, ["the request names no program (its argv is empty)"]);
    assert!(matches!(decide(&request("ls"), &[empty_rule]), Decision::NeedsHuman { .. }));
    let empty_program = EscalationRequest { argv: vec![String::new()] };
    let reasons = reasons_of(&decide(&empty_program, &[AutoApproveRule { argv: vec![String::new()], trailing_arguments: true }]));
    assert!(reasons.contains(&"the program name is empty".to_owned()), "{reasons:?}");
}

#[test]
fn forbidden_characters_in_any_argument_need_human() {
    let rules = [rule("npm test *")];
    for character in FORBIDDEN_CHARACTERS {
        for argv in [
            vec!["npm".to_owned(), "test".to_owned(), format!("a{character}b")],
            vec!["npm".to_owned(), "test".to_owned(), "--x".to_owned(), format!("{character}")],
        ] {
            let decision = decide(&EscalationRequest { argv: argv.clone() }, &rules);
            let reasons = reasons_of(&decision);
            assert!(!reasons.is_empty(), "{argv:?}");
            assert!(reasons.iter().any(|reason| reason.contains("argument ") && reason.contains("contains")), "{reasons:?}");
            assert!(reasons.iter().all(|reason| !reason.chars().any(is_display_unsafe)), "{reasons:?}");
        }
    }
    let reasons = reasons_of(&decide(&EscalationRequest { argv: vec!["npm".into(), "test".into(), "; rm -rf ~".into()] }, &rules));
    assert_eq!(reasons, ["argument 2 '; rm -rf ~' contains `;` (shell metacharacter)"]);
    let reasons = reasons_of(&decide(&EscalationRequest { argv: vec!["npm".into(), "test".into(), "\u{1B}[2Kok".into()] }, &rules));
    assert_eq!(reasons, ["argument 2 $'\\e[2Kok' contains an ANSI escape character (ESC, U+001B)"]);
}

#[test]
fn banned_programs_never_auto_approve_even_with_a_hand_built_rule() {
    for program in BRIEF_BANNED_PROGRAMS {
        let rules = [AutoApproveRule { argv: vec![program.to_string()], trailing_arguments: true }];
        let reasons = reasons_of(&decide(&EscalationRequest { argv: vec![program.to_string(), "status".into()] }, &rules));
        assert!(reasons.iter().any(|reason| reason.contains("never auto-approved")), "{program}: {reasons:?}");
    }
    let rules = [AutoApproveRule { argv: words("git status"), trailing_arguments: true }];
    assert!(matches!(decide(&request("git status"), &rules), Decision::NeedsHuman { .. }));
}

#[test]
fn programs_named_by_path_need_human() {
    for program in ["./x", "/usr/bin/cargo", "bin/x"] {
        let rules = [AutoApproveRule { argv: vec![program.to_owned()], trailing_arguments: true }];
        let reasons = reasons_of(&decide(&EscalationRequest { argv: vec![program.to_owned()] }, &rules));
        assert!(reasons.iter().any(|reason| reason.contains("contains `/`")), "{reasons:?}");
    }
}

#[test]
fn command_running_options_beyond_the_rule_need_human() {
    let cases: &[(&str, &str, bool)] = &[
        ("cargo check", "cargo check --release", true),
        ("cargo check", "cargo check --all-targets --workspace", true),
        ("cargo check", "cargo check --config build.rustc-wrapper=/tmp/x", false),
        ("cargo check", "cargo check --conf=x", false),
        ("cargo check", "cargo check --manifest-path /x/Cargo.toml", false),
        ("cargo check", "cargo check -Zscript", false),
        ("cargo", "cargo --config x check", false),
        ("npm test", "npm test --script-shell=/tmp/x", false),
        ("npm test", "npm test --exe=x", false),
        ("npm test", "npm test --exec x", false),
        ("npm test", "npm test -- --exe", false),
        ("npm test", "npm test --node-options=--require=/x", false),
        ("npm test", "npm test LD_PRELOAD=/x.so", false),
        ("npm test", "npm test --output=/x", false),
        ("npm test", "npm test --ex", true),
        ("make test", "make test -j8", true),
        ("make test", "make test -k", true),
        ("make test", "make test SHELL=/tmp/x", false),
        ("make test", "make test -f /tmp/x.mk", false),
        ("make test", "make test -kf /tmp/x.mk", false),
        ("make test", "make test --eval=x", false),
        ("tar -tf", "tar -tf a.tar", true),
        ("tar -tf", "tar -tf a.tar --to-command=x", false),
        ("tar -tf", "tar -tf a.tar --checkpoint-action=exec=x", false),
        ("tar -tf", "tar -tf a.tar --use-compress=x", false),
        ("tar -tf", "tar -tf a.tar -I x", false),
        ("tar", "tar xvfI a.tar", false),
        ("tar", "tar -xvfI a.tar", false),
        ("tar", "tar tvf a.tar", true),
        ("go test", "go test -exec=x ./pkg", false),
        ("go test", "go test -toolexec x ./pkg", false),
        ("go test", "go test -count=1 ./pkg", true),
        ("pytest", "pytest -p evil", false),
        ("pytest", "pytest -x -k one", true),
        ("cargo check --config=net.offline=true", "cargo check --config=net.offline=true", true),
        ("npm test", "npm test x", false),
    ];
    for (rule_text, request_text, auto) in cases {
        let decision = decide(&request(request_text), &[rule(&format!("{rule_text} *"))]);
        assert_eq!(matches!(decision, Decision::AutoApprove { .. }), *auto, "{rule_text} / {request_text}: {decision:?}");
        if !auto {
            assert!(!reasons_of(&decision).is_empty());
        }
    }
    let reasons = reasons_of(&decide(&request("npm test --exe=x"), &[rule("npm test *")]));
    assert_eq!(reasons, ["beyond the auto_approve rule `npm test *`: '--exe=x' (abbreviates `--exec`): runs a command or code given as its value or in the following arguments"]);
}

#[test]
fn all_reasons_are_collected() {
    let argv = vec!["git".to_owned(), "a;b".to_owned(), "c\u{202E}".to_owned()];
    let reasons = reasons_of(&decide(&EscalationRequest { argv }, &[]));
    assert_eq!(reasons.len(), 4, "{reasons:?}");
    assert!(reasons[0].starts_with("argument 1 'a;b' contains `;`"), "{reasons:?}");
    assert!(reasons[1].starts_with("argument 2 $'c\\u202E' contains a Unicode bidirectional"), "{reasons:?}");
    assert!(reasons[2].starts_with("git is never auto-approved"), "{reasons:?}");
    assert!(reasons[3].starts_with("no auto_approve rule matches git 'a;b' $'c\\u202E'"), "{reasons:?}");
}

// ------------------------------------------------------------ display_command

#[test]
fn display_quotes_with_shell_words() {
    let cases: &[(&[&str], &str)] = &[
        (&[], ""),
        (&["cargo", "check"], "cargo check"),
        (&["echo", "a b"], "echo 'a b'"),
        (&["x", ""], "x ''"),
        (&["x", "it's"], "x 'it'\\''s'"),
        (&["x", "a;b"], "x 'a;b'"),
        (&["x", "$(id)"], "x '$(id)'"),
        (&["x", "a\u{1B}[31m"], "x $'a\\e[31m'"),
        (&["x", "\u{202E}abc"], "x $'\\u202Eabc'"),
        (&["x", "a\nb"], "x $'a\\nb'"),
        (&["x", "it's\n"], "x $'it\\'s\\n'"),
        (&["x", "a\\b\t"], "x $'a\\\\b\\t'"),
        (&["x", "\u{E0041}"], "x $'\\U000E0041'"),
        (&["x", "a\u{A0}b"], "x $'a\\xA0b'"),
        (&["x", "a\0"], "x $'a\\x00'"),
        (&["x", "über"], "x über"),
    ];
    for (argv, expected) in cases {
        let argv: Vec<String> = argv.iter().map(|word| word.to_string()).collect();
        assert_eq!(display_command(&argv), *expected, "{argv:?}");
    }
}

// --------------------------------------------------------------- risk_notes

fn notes(text: &str) -> Vec<String> {
    risk_notes(&words(text))
}

#[test]
fn risk_notes_name_project_code() {
    let cases: &[(&str, &str)] = &[
        ("npm test", "package.json"),
        ("npm t", "package.json"),
        ("npm run build", "package.json"),
        ("npm start", "package.json"),
        ("npm install", "package.json"),
        ("npm i left-pad", "package.json"),
        ("yarn", "package.json"),
        ("yarn test", "package.json"),
        ("pnpm run lint", "package.json"),
        ("pnpm install", "package.json"),
        ("cargo build", "build.rs"),
        ("cargo check", "build.rs"),
        ("cargo test", "build.rs"),
        ("cargo run", "build.rs"),
        ("cargo clippy", "rustc-wrapper"),
        ("cargo b", "build.rs"),
        ("make", "Makefile"),
        ("make test", "Makefile"),
        ("pip install .", "setup.py"),
        ("pip3 install requests", "setup.py"),
        ("go generate ./...", "go:generate"),
        ("go test ./...", "go test"),
        ("mvn test", "pom.xml"),
        ("gradle build", "build.gradle"),
        ("./gradlew build", "build.gradle"),
        ("pytest", "conftest.py"),
        ("tox", "tox.ini"),
        ("bundle exec rspec", "Gemfile"),
        ("bundle exec rspec", "bundle exec and gem exec run any program"),
        ("rake test", "Rakefile"),
        ("npm exec cowsay", "npm exec and npm x run any package"),
        ("uv run pytest", "run any program"),
        ("git status", "hooks"),
    ];
    for (text, expected) in cases {
        let found = notes(text);
        assert!(found.iter().any(|note| note.contains(expected)), "{text}: {found:?}");
    }
}

#[test]
fn risk_notes_name_command_running_options_in_every_spelling() {
    let cases: &[(&str, &str)] = &[
        ("tool --exec x", "--exec: runs a command"),
        ("tool --exec=x", "'--exec=x': runs a command"),
        ("tool --exe x", "--exe (abbreviates `--exec`): runs a command"),
        ("tool --exe=x", "'--exe=x' (abbreviates `--exec`): runs a command"),
        ("tool -exec x", "-exec: runs a command"),
        ("find . -exec rm", "-exec: runs a command"),
        ("find . -execdir rm", "-execdir: runs a command"),
        ("tool --command=x", "runs a command"),
        ("tool --com x", "--com (abbreviates `--command`)"),
        ("cargo check --config x", "--config: loads configuration"),
        ("cargo check --conf=x", "(abbreviates `--config`): loads configuration"),
        ("node -e x", "-e: runs code given on the command line"),
        ("node --eval=x", "runs code given on the command line"),
        ("node --eva x", "--eva (abbreviates `--eval`)"),
        ("perl -ne x", "-ne (includes `-e`): runs code"),
        ("bash --rcfile x", "--rcfile: runs a command"),
        ("bash --init-file x", "--init-file: runs a command"),
        ("sh -ec x", "-ec (includes `-c`): runs the command string"),
        ("bash -c x", "-c: runs the command string"),
        ("git clone --upload-pack=x u", "'--upload-pack=x': runs a command"),
        ("git push --receive-pack=x u", "'--receive-pack=x': runs a command"),
        ("git -c core.pager=x log", "git's -c and --config-env"),
        ("ssh -o ProxyCommand=x host", "ProxyCommand"),
        ("ssh -oProxyCommand=x host", "'-oProxyCommand=x' (includes `-o`)"),
        ("scp -S prog a b", "-S: ssh, scp and sftp"),
        ("rsync -e x a b", "-e: rsync runs the remote shell"),
        ("rsync -avze x a b", "-avze (includes `-e`): rsync"),
        ("rsync --rsh=x a b", "rsync runs the remote shell"),
        ("tar -xf a --to-command=x", "tar runs the program"),
        ("tar --checkpoint-action=exec=x -cf a .", "tar runs the program"),
        ("tar --use-compress-program=zstd -xf a", "tar runs the program"),
        ("tar -I zstd -xf a", "-I: tar runs the program"),
        ("tar -xvfI a", "-xvfI (includes `-I`): tar"),
        ("tar xvfI a", "xvfI (includes `-I`) (old-style bundled options): tar"),
        ("curl -o /x u", "-o: curl writes files"),
        ("tool --output=/x", "writes a file the request chooses"),
        ("tool --out /x", "--out (abbreviates `--output`)"),
        ("tool LD_PRELOAD=/x.so", "dynamic loader"),
        ("make CC=/x", "(a variable override): make"),
        ("go build -toolexec=x", "go's -exec and -toolexec"),
        ("cargo check --config build.rustc-wrapper=/x", "names a program to run"),
    ];
    for (text, expected) in cases {
        let found = notes(text);
        assert!(found.iter().any(|note| note.contains(expected)), "{text}: {found:?}");
    }
}

#[test]
fn risk_notes_about_the_program_itself() {
    assert_eq!(risk_notes(&[]), ["the request names no program (its argv is empty)"]);
    assert_eq!(risk_notes(&[String::new()]), ["the program name is empty"]);
    assert!(notes("./gradlew build")[0].contains("is a relative path: it would be resolved on the host"));
    assert!(notes("bin/x")[0].contains("is a relative path"));
    assert!(notes("/usr/bin/cargo --version")[0].contains("is an absolute path"));
}

#[test]
fn harmless_commands_have_no_notes() {
    for text in ["ls -la", "cat README.md", "npm --version", "cargo --version", "cargo tree", "go version", "pip list", "grep -rn foo src"]
    {
        assert_eq!(notes(text), Vec::<String>::new(), "{text}");
    }
}

#[test]
fn notes_are_deduplicated() {
    let found = notes("npm test test");
    assert_eq!(found.iter().filter(|note| note.contains("package.json")).count(), 1, "{found:?}");
}

// ---------------------------------------------------------- resolve_program

fn executable_in<'a>(files: &'a [&'a str], calls: &'a RefCell<Vec<PathBuf>>) -> impl Fn(&Path) -> bool + 'a {
    move |path: &Path| {
        calls.borrow_mut().push(path.to_owned());
        files.iter().any(|file| Path::new(file) == path)
    }
}

#[test]
fn resolves_with_the_host_path() {
    let calls = RefCell::new(Vec::new());
    let files = ["/usr/bin/cargo", "/usr/local/bin/cargo", "/usr/bin/npm"];
    let is_executable = executable_in(&files, &calls);
    assert_eq!(resolve_program("cargo", "/usr/local/bin:/usr/bin", &is_executable), Ok(PathBuf::from("/usr/local/bin/cargo")));
    assert_eq!(resolve_program("npm", "/usr/local/bin:/usr/bin", &is_executable), Ok(PathBuf::from("/usr/bin/npm")));
}

#[test]
fn empty_and_relative_path_entries_are_skipped() {
    let calls = RefCell::new(Vec::new());
    let files = ["cargo", "./cargo", "bin/cargo", "/usr/bin/cargo"];
    let is_executable = executable_in(&files, &calls);
    assert_eq!(resolve_program("cargo", ":.:bin::./x:/usr/bin:", &is_executable), Ok(PathBuf::from("/usr/bin/cargo")));
    assert_eq!(*calls.borrow(), [PathBuf::from("/usr/bin/cargo")]);
    let error = resolve_program("cargo", ":.:bin", &is_executable).unwrap_err();
    assert!(error.to_string().contains("not found on the host's PATH"), "{error}");
}

#[test]
fn programs_with_a_slash_or_no_name_are_refused_without_looking() {
    let calls = RefCell::new(Vec::new());
    let files = ["/usr/bin/cargo", "/usr/bin/./cargo"];
    let is_executable = executable_in(&files, &calls);
    for program in ["./cargo", "/usr/bin/cargo", "bin/cargo", "../cargo", "cargo/", "", ".", "..", "a\0b"] {
        let error = resolve_program(program, "/usr/bin", &is_executable).unwrap_err();
        assert!(matches!(error, PolicyError::UnresolvableProgram { .. }), "{program:?}");
    }
    assert!(calls.borrow().is_empty());
    let message = resolve_program("./cargo", "/usr/bin", &is_executable).unwrap_err().to_string();
    assert_eq!(
        message,
        "program `./cargo` cannot be run: it contains `/`; only a command name looked up on the host's PATH can run, never a path"
    );
}

#[test]
fn resolution_note() {
    let calls = RefCell::new(Vec::new());
    let files = ["/usr/bin/cargo"];
    let is_executable = executable_in(&files, &calls);
    assert_eq!(program_resolution_note("cargo", "/usr/bin", &is_executable), None);
    let note = program_resolution_note("jest", "/usr/bin", &is_executable).unwrap();
    assert_eq!(note, "program `jest` cannot be run: it was not found on the host's PATH (empty and relative PATH entries are ignored)");
}

// --------------------------------------------------------------- properties

fn plain_word() -> impl Strategy<Value = String> {
    "[a-z][a-z0-9._=-]{0,7}"
}

fn small_vocabulary_argv() -> impl Strategy<Value = Vec<String>> {
    prop::collection::vec(prop::sample::select(vec!["npm", "test", "run", "cargo", "check", "make", "--x", "-j8", "zz"]), 0..5)
        .prop_map(|argv| argv.into_iter().map(str::to_owned).collect())
}

proptest! {
    #[test]
    fn any_argv_with_a_forbidden_character_never_auto_approves(
        argv in prop::collection::vec(plain_word(), 1..5),
        rule_length in 1usize..5,
        character in prop::sample::select(FORBIDDEN_CHARACTERS.to_vec()),
        target in any::<prop::sample::Index>(),
        position in any::<prop::sample::Index>(),
    ) {
        let rule_length = rule_length.min(argv.len());
        let rules = [AutoApproveRule { argv: argv[..rule_length].to_vec(), trailing_arguments: true }, AutoApproveRule { argv: argv.clone(), trailing_arguments: true }];
        let mut tainted = argv.clone();
        let word = &mut tainted[target.index(argv.len())];
        let mut characters: Vec<char> = word.chars().collect();
        characters.insert(position.index(characters.len() + 1), character);
        *word = characters.into_iter().collect();
        let decision = decide(&EscalationRequest { argv: tainted }, &rules);
        let needs_human = matches!(decision, Decision::NeedsHuman { .. });
        prop_assert!(needs_human);
    }

    #[test]
    fn any_control_or_bidi_character_is_forbidden(value in prop_oneof![0u32..0x20, 0x7Fu32..0xA0, 0x202Au32..0x202F, 0x2066u32..0x206A]) {
        let character = char::from_u32(value).unwrap();
        let text = format!("ok{character}ok");
        prop_assert!(has_forbidden_characters(&text).is_some());
    }

    #[test]
    fn auto_approval_implies_a_matching_rule(
        argv in small_vocabulary_argv(),
        rules in prop::collection::vec((small_vocabulary_argv(), any::<bool>()), 0..4),
    ) {
        let rules: Vec<AutoApproveRule> =
            rules.into_iter().map(|(argv, trailing_arguments)| AutoApproveRule { argv, trailing_arguments }).collect();
        let decision = decide(&EscalationRequest { argv: argv.clone() }, &rules);
        let some_match = rules.iter().any(|rule| rule_matches(rule, &argv));
        if let Decision::AutoApprove { rule_index } = decision {
            let rule = &rules[rule_index];
            prop_assert!(!rule.argv.is_empty());
            prop_assert!(rule.argv.len() <= argv.len());
            prop_assert_eq!(&rule.argv[..], &argv[..rule.argv.len()]);
            // D11: a rule without ` *` approves only its exact argv.
            prop_assert!(rule.trailing_arguments || rule.argv.len() == argv.len());
            prop_assert!(rules.iter().all(|other| !rule_matches(other, &argv) || other.argv.len() <= rule.argv.len()));
        }
        if !some_match {
            let needs_human = matches!(decide(&EscalationRequest { argv }, &rules), Decision::NeedsHuman { .. });
            prop_assert!(needs_human);
        }
    }

    #[test]
    fn a_rule_auto_approves_itself_and_harmless_extensions(entry in prop::collection::vec(plain_word(), 1..4), extra in prop::collection::vec("[a-z]{1,6}", 0..3)) {
        let Ok(rule) = parse_auto_approve_entry(&format!("{} *", entry.join(" "))) else { return Ok(()) };
        prop_assume!(extra.iter().all(|word| parse_auto_approve_entry(&format!("{} {word}", entry.join(" "))).is_ok()));
        prop_assert_eq!(decide(&EscalationRequest { argv: rule.argv.clone() }, std::slice::from_ref(&rule)), Decision::AutoApprove { rule_index: 0 });
        let mut longer = rule.argv.clone();
        longer.extend(extra);
        let decision = decide(&EscalationRequest { argv: longer.clone() }, std::slice::from_ref(&rule));
        let flagged = !argument_notes(&longer, rule.argv.len()).is_empty()
            || longer[rule.argv.len()..].iter().any(|argument| path_out_of_project_note(argument).is_some());
        prop_assert_eq!(matches!(decision, Decision::AutoApprove { rule_index: 0 }), !flagged);
    }

    #[test]
    fn display_round_trips_through_shell_words(argv in prop::collection::vec(any::<String>(), 0..6)) {
        let argv: Vec<String> = argv.into_iter().map(|argument| argument.chars().filter(|character| !is_display_unsafe(*character)).collect()).collect();
        prop_assert_eq!(shell_words::split(&display_command(&argv)).unwrap(), argv);
    }

    #[test]
    fn display_round_trips_for_metacharacter_heavy_arguments(argv in prop::collection::vec("[ a-z;|&$`<>(){}*?\\[\\]~!\\\\'\"#=%^-]{0,12}", 0..6)) {
        prop_assert_eq!(shell_words::split(&display_command(&argv)).unwrap(), argv);
    }

    #[test]
    fn nothing_shown_to_the_human_contains_display_unsafe_characters(argv in prop::collection::vec(any::<String>(), 0..5)) {
        prop_assert!(!display_command(&argv).chars().any(is_display_unsafe));
        for note in risk_notes(&argv) {
            prop_assert!(!note.chars().any(is_display_unsafe), "{:?}", note);
        }
        let rules = [AutoApproveRule { argv: argv.iter().take(1).cloned().collect(), trailing_arguments: true }];
        for reason in reasons_of(&decide(&EscalationRequest { argv }, &rules)) {
            prop_assert!(!reason.chars().any(is_display_unsafe), "{:?}", reason);
        }
    }

    #[test]
    fn accepted_entries_are_clean_words_of_allowed_programs(text in any::<String>()) {
        match parse_auto_approve_entry(&text) {
            Ok(rule) => {
                prop_assert!(!rule.argv.is_empty());
                prop_assert_eq!(rule.argv.clone(), text.split_whitespace().map(str::to_owned).collect::<Vec<_>>());
                prop_assert!(rule.argv.iter().all(|word| has_forbidden_characters(word).is_none()));
                prop_assert!(banned_program_reason(&rule.argv[0]).is_none());
                prop_assert!(!rule.argv[0].contains('/'));
            }
            Err(error) => prop_assert!(!error.to_string().chars().any(is_display_unsafe)),
        }
    }

    #[test]
    fn resolution_only_yields_absolute_candidates_from_the_host_path(
        program in "[a-z./]{0,6}",
        entries in prop::collection::vec("(/[a-z]{1,3}){0,2}|[a-z.]{0,3}", 0..5),
        executable_mask in any::<u8>(),
    ) {
        let host_path = entries.join(":");
        let calls = RefCell::new(Vec::new());
        let is_executable = |path: &Path| {
            calls.borrow_mut().push(path.to_owned());
            executable_mask & (1 << (calls.borrow().len() % 8)) != 0
        };
        if let Ok(path) = resolve_program(&program, &host_path, &is_executable) {
            prop_assert!(path.is_absolute());
            prop_assert!(!program.contains('/'));
            prop_assert_eq!(path.file_name().and_then(|name| name.to_str()), Some(program.as_str()));
            prop_assert!(entries.iter().any(|entry| Path::new(entry).join(&program) == path));
        }
        prop_assert!(calls.borrow().iter().all(|path| path.is_absolute()));
        if program.contains('/') {
            prop_assert!(calls.borrow().is_empty());
        }
    }
}
