//! Table tests of loading and resolution, and property tests over expansion
//! and validation.

use std::path::{Path, PathBuf};

use super::*;
use crate::egress::PrivateAnswers;
use crate::error::{Error, Result};
use crate::expand::{self, TokenValues};
use crate::host::FixedHost;
use crate::paths;
use proptest::prelude::*;

fn host() -> FixedHost {
    let mut host = FixedHost { home: Some("/home/u".into()), uid: 1000, ..FixedHost::default() };
    host.vars.insert("XDG_RUNTIME_DIR".into(), "/run/user/1000".into());
    host.vars.insert("API_TOKEN".into(), "s3cret".into());
    host
}

fn parse(text: &str) -> Result<Config> {
    Config::parse(text, Path::new("/home/u/.config/lazaret/config.toml"), &host())
}

fn resolve(text: &str, profile: &str) -> Result<ResolvedProfile> {
    parse(text)?.resolve(profile, Path::new("/home/u/project"), &host())
}

fn message(error: &Error) -> String {
    error.to_string()
}

const GOOD: &str = r#"
data_root = "~/lazaret-data"

[network]
allow_egress = ["10.0.0.0/8"]
dns_upstream = ["10.0.0.53", "[fd00::53]:5353"]

[escalation]
enabled = true
socket_dir = "/run/user/1000/lazaret"
auto_approve = ["cargo check"]

[profiles.claude]
image = "localhost/agent:1.0"
persistent_dirs = ["/usr", "/home/agent/{profile_name}"]
allow_egress = ["10.0.0.0/8", "github.com"]
env = { TOKEN = "env:API_TOKEN", CACHE = "{profile_dir}/cache" }
volumes = [
  { host = "{profile_dir}/npm", container = "/home/agent/.npm", mode = "rw,z" },
  { host = "~/shared", container = "/shared" },
]
"#;

#[test]
fn good_configuration_resolves_with_tokens_expanded() {
    let resolved = resolve(GOOD, "claude").expect("resolves");
    assert_eq!(resolved.data_root, Path::new("/home/u/lazaret-data"));
    assert_eq!(resolved.profile_dir, Path::new("/home/u/lazaret-data/claude"));
    assert_eq!(resolved.persistent_dirs, vec![PathBuf::from("/usr"), PathBuf::from("/home/agent/claude")]);
    assert_eq!(resolved.allow_egress.iter().map(ToString::to_string).collect::<Vec<_>>(), ["10.0.0.0/8", "github.com"]);
    assert_eq!(resolved.dns_upstream.iter().map(ToString::to_string).collect::<Vec<_>>(), ["10.0.0.53:53", "[fd00::53]:5353"]);
    assert_eq!(resolved.private_answers, PrivateAnswers::Refuse, "a name's private answers are refused unless the file says otherwise");
    assert_eq!(
        resolve(&GOOD.replace("[network]\n", "[network]\nprivate_answers = \"allow\"\n"), "claude").expect("resolves").private_answers,
        PrivateAnswers::Allow
    );
    assert_eq!(
        resolve(&GOOD.replace("[network]\n", "[network]\nprivate_answers = \"refuse\"\n"), "claude").expect("resolves").private_answers,
        PrivateAnswers::Refuse
    );
    assert_eq!(resolved.env["TOKEN"].value, "s3cret");
    assert_eq!(resolved.env["TOKEN"].from_host.as_deref(), Some("API_TOKEN"));
    assert_eq!(resolved.env["CACHE"].value, "/home/u/lazaret-data/claude/cache");
    assert_eq!(resolved.volumes[0].podman_argument(), "/home/u/lazaret-data/claude/npm:/home/agent/.npm:rw,z");
    assert_eq!(resolved.volumes[1].podman_argument(), "/home/u/shared:/shared:ro");
    assert_eq!(
        resolved.domain.control_socket.parent(),
        Some(Path::new("/run/user/1000/lazaret").join(&resolved.domain.domain_hash).as_path())
    );
}

#[test]
fn no_file_means_the_built_in_default_profile() {
    let config = Config::load(None, &host()).expect("built-in");
    assert!(matches!(config.source, ConfigSource::BuiltIn { .. }));
    let resolved = config.resolve(DEFAULT_PROFILE, Path::new("/home/u/project"), &host()).expect("resolves");
    assert_eq!(resolved.image, DEFAULT_IMAGE);
    assert_eq!(resolved.data_root, Path::new("/home/u/.local/share/lazaret"));
    assert!(resolved.volumes.is_empty() && resolved.env.is_empty() && resolved.allow_egress.is_empty());
}

/// DECISIONS D17 (issue 27): `[escalation] enabled = true` alone is a
/// configuration; `socket_dir` defaults to `$XDG_RUNTIME_DIR/lazaret`, and
/// an empty table means what no table means.
#[test]
fn the_escalation_tables_keys_have_their_documented_defaults() {
    for text in ["[escalation]\nenabled = true\n", "[escalation]\n"] {
        let config = parse(text).unwrap_or_else(|error| panic!("{text:?}: {error}"));
        assert_eq!(config.socket_root, Path::new("/run/user/1000/lazaret"), "{text:?}");
        assert!(config.escalation_enabled, "{text:?}");
    }
    assert!(!parse("[escalation]\nenabled = false\n").expect("parses").escalation_enabled);
}

/// A missing required key names its table and key, not `1:1` (issue 27).
#[test]
fn a_profile_without_an_image_is_named() {
    let error = parse("data_root = \"/tmp/x\"\n\n[profiles.ab]\npersistent_dirs = []\n").expect_err("no image");
    let text = message(&error);
    assert!(text.contains(":3:1: profiles.ab.image: `[profiles.ab]` has no `image`"), "{text}");
}

#[test]
fn explicit_missing_file_is_an_error() {
    let error = Config::load(Some(Path::new("/nonexistent/lazaret.toml")), &host()).expect_err("missing");
    assert!(message(&error).contains("/nonexistent/lazaret.toml"), "{error}");
}

/// Each bad input: the message names the value and the line:column, and the
/// exit status tells a security abort from an invalid configuration.
#[test]
fn bad_inputs_are_named_with_their_location() {
    let cases: &[(&str, &str, &str, u8)] = &[
        ("[profiles.ab]\nimage = \"i:1\"\nbogus = 1\n", "bogus", ":3:1", 78),
        ("[profiles.ab]\n", "image", ":1:1", 78),
        ("[profiles.\"Bad.Name\"]\nimage = \"i:1\"\n", "Bad.Name", ":1:11", 78),
        ("[profiles.ab]\nimage = \"i:1\"\nvolumes = [{ host = \"/x/{nope}\", container = \"/c\" }]\n", "{nope}", ":3:21", 78),
        ("[profiles.ab]\nimage = \"i:1\"\nvolumes = [{ host = \"/x/../etc\", container = \"/c\" }]\n", "/x/../etc", ":3:21", 77),
        ("[profiles.ab]\nimage = \"i:1\"\nenv = { A = \"env:NOT_SET_ANYWHERE\" }\n", "NOT_SET_ANYWHERE", ":3:13", 78),
        ("[profiles.ab]\nimage = \"i:1\"\nvolumes = [{ host = \"/x\", container = \"relative/c\" }]\n", "relative/c", ":3:39", 78),
        ("[network]\nallow_egress = [\"10.0.0.0/33\"]\n", "10.0.0.0/33", ":2:17", 78),
        ("[network]\ndns_upstream = [\"resolver.example\"]\n", "resolver.example", ":2:17", 78),
        ("[network]\nprivate_answers = \"yes\"\n", "yes", ":2:19", 78),
        ("[profiles.ab]\nimage = \"i:1\"\nallow_egress = [\"300.0.0.0/8\"]\n", "300.0.0.0/8", ":3:17", 78),
        ("[profiles.ab]\nimage = \"i:1\"\nvolumes = [{ host = \"/x\", container = \"/workspace\" }]\n", "/workspace", ":3:39", 78),
        (
            "[profiles.ab]\nimage = \"i:1\"\nvolumes = [{ host = \"/x\", container = \"/workspace/.git/hooks\" }]\n",
            "/workspace/.git/hooks",
            ":3:39",
            78,
        ),
        ("[profiles.ab]\nimage = \"i:1\"\nvolumes = [{ host = \"/x\", container = \"/run\" }]\n", "/run/lazaret", ":3:39", 78),
        ("[profiles.ab]\nimage = \"i:1\"\nvolumes = [{ host = \"/x\", container = \"/c\", mode = \"rw,exec\" }]\n", "exec", ":3:52", 78),
        ("[profiles.ab]\nimage = \"i:1\"\nvolumes = [{ host = \"/x\", container = \"/c\", mode = \"ro,rw\" }]\n", "ro,rw", ":3:52", 78),
        ("[profiles.ab]\nimage = \"i:1\"\npersistent_dirs = [\"/proc/x\"]\n", "/proc/x", ":3:20", 78),
        ("[profiles.ab]\nimage = \"i:1\"\nenv = { LAZARET_X = \"1\" }\n", "LAZARET_X", ":3:9", 78),
        ("[profiles.domains]\nimage = \"i:1\"\n", "domains", ":1:11", 78),
        ("data_root = \"/data/../etc\"\n", "/data/../etc", ":1:13", 77),
        (
            "[profiles.ab]\nimage = \"i:1\"\nvolumes = [{ host = \"/home/u/project/.git\", container = \"/c\" }]\n",
            "/home/u/project/.git",
            ":3:21",
            77,
        ),
        ("[profiles.ab]\nimage = \"i:1\"\nvolumes = [{ host = \"/run/user/1000\", container = \"/c\" }]\n", "/run/user/1000", ":3:21", 77),
        ("[profiles.ab]\nimage = \"i:1\"\nvolumes = [{ host = \"~\", container = \"/c\", mode = \"rw\" }]\n", "/home/u", ":3:21", 77),
        ("[profiles.ab]\nimage = \"i:1\"\nvolumes = [{ host = \"~root/x\", container = \"/c\" }]\n", "~root/x", ":3:21", 78),
        ("[escalation]\nenabled = true\nsocket_dir = \"/run/x\"\nauto_approve = [\"git status\"]\n", "git status", ":4:17", 78),
        ("[escalation]\nenabled = true\nsocket_dir = \"/run/x\"\nauto_approve = [\"bash -c\"]\n", "bash -c", ":4:17", 78),
        ("[escalation]\nenabled = true\nsocket_dir = \"/run/x\"\napproval_timeout_seconds = 0\n", "approval_timeout_seconds", ":4:28", 78),
    ];
    for (text, named, at, status) in cases {
        let error = resolve(text, "ab").expect_err(text);
        let shown = message(&error);
        assert!(shown.contains(named), "message should name `{named}`: {shown}");
        assert!(shown.contains(&format!("config.toml{at}")), "message should point at {at}: {shown}");
        assert_eq!(error.exit_status(), *status, "{shown}");
    }
}

#[test]
fn all_problems_are_reported_at_once() {
    let text = "[profiles.ab]\nimage = \"i:1\"\nallow_egress = [\"x/1\", \"1.1.1.1/40\"]\n";
    let Err(Error::Config(diagnostics)) = parse(text) else { panic!("expected diagnostics") };
    assert_eq!(diagnostics.len(), 2);
}

#[test]
fn unpinned_images_warn() {
    for (image, warns) in [("img", true), ("img:latest", true), ("img:1", false)] {
        let config = parse(&format!("[profiles.ab]\nimage = \"{image}\"\n")).expect("parses");
        assert_eq!(!config.warnings.is_empty(), warns, "{image}");
        if warns {
            assert!(config.warnings[0].to_string().contains(image));
        }
    }
}

#[test]
fn read_only_home_volume_is_allowed_but_sockets_never() {
    let ok = "[profiles.ab]\nimage = \"i:1\"\nvolumes = [{ host = \"~\", container = \"/h\", mode = \"ro\" }]\n";
    assert!(resolve(ok, "ab").is_ok());
    let sockets =
        "[profiles.ab]\nimage = \"i:1\"\nvolumes = [{ host = \"/run/user/1000/lazaret/x\", container = \"/h\", mode = \"ro\" }]\n";
    assert!(resolve(sockets, "ab").expect_err("socket dir").is_security());
}

#[test]
fn profile_names() {
    for name in ["ab", "claude", "a_b-c9", &"a".repeat(32)] {
        assert!(is_valid_profile_name(name), "{name}");
    }
    for name in ["a", "Ab", "a.b", "a/b", "a b", "a$b", &"a".repeat(33), "ä1"] {
        assert!(!is_valid_profile_name(name), "{name}");
    }
}

fn token_values() -> TokenValues {
    TokenValues {
        profile_name: "ab".into(),
        profile_dir: "/d/ab".into(),
        domain_hash: "0123456789ab".into(),
        domain_dir: "/d/domains/0123456789ab".into(),
        workspace_dir: "/w/p".into(),
    }
}

fn path_text() -> impl Strategy<Value = String> {
    let token = prop::sample::select(vec!["{profile_name}", "{profile_dir}", "{domain_hash}", "{domain_dir}", "{workspace_dir}"]);
    let segment =
        prop_oneof!["[a-z0-9._~-]{1,6}".prop_map(|s| s), Just("..".to_owned()), Just(".".to_owned()), token.prop_map(str::to_owned),];
    (prop::bool::ANY, prop::collection::vec(segment, 0..6), prop::bool::ANY).prop_map(|(tilde, segments, absolute)| {
        let body = segments.join("/");
        if tilde {
            format!("~/{body}")
        } else if absolute {
            format!("/{body}")
        } else {
            body
        }
    })
}

proptest! {
    /// Expanding the output of an expansion changes nothing.
    #[test]
    fn expansion_is_idempotent_on_its_output(text in path_text()) {
        let home = Path::new("/home/u");
        if let Ok(once) = expand::expand(&text, &token_values(), Some(home)) {
            prop_assert_eq!(expand::expand(&once, &token_values(), Some(home)), Ok(once.clone()));
        }
    }

    /// No accepted configuration ever yields a resolved path with a `..`
    /// segment, and every accepted host path is absolute.
    #[test]
    fn accepted_configurations_never_resolve_to_parent_segments(
        host_path in path_text(),
        container in path_text(),
        persistent in path_text(),
        data_root in path_text(),
    ) {
        let text = format!(
            "data_root = {data_root:?}\n[profiles.ab]\nimage = \"i:1\"\npersistent_dirs = [{persistent:?}]\nvolumes = [{{ host = {host_path:?}, container = {container:?} }}]\n"
        );
        if let Ok(resolved) = resolve(&text, "ab") {
            let mut all: Vec<&Path> = vec![&resolved.data_root, &resolved.profile_dir, &resolved.domain.domain_dir];
            all.extend(resolved.persistent_dirs.iter().map(PathBuf::as_path));
            for volume in &resolved.volumes {
                all.push(&volume.host);
                all.push(&volume.container);
            }
            for path in all {
                prop_assert!(path.is_absolute(), "{}", path.display());
                prop_assert!(!paths::has_parent_segment(&path.to_string_lossy()), "{}", path.display());
            }
            for volume in &resolved.volumes {
                for reserved in RESERVED_CONTAINER_PATHS {
                    prop_assert!(!paths::overlaps(&volume.container, Path::new(reserved)));
                }
            }
        } else if host_path.split('/').any(|s| s == "..") && !data_root.contains("..") {
            // A `..` written in a host path is always refused as a security abort
            // (unless an earlier field already failed).
            let error = resolve(&text, "ab").expect_err("refused");
            prop_assert!(error.to_string().contains(".."), "{}", error);
        }
    }
}

#[test]
fn runtime_runsc_is_an_absolute_path_without_parent_segments() {
    let config = parse("[runtime]\nrunsc = \"/usr/local/lib/lazaret/runsc-20260905/runsc\"\n").expect("valid");
    assert_eq!(config.runsc.as_deref(), Some(Path::new("/usr/local/lib/lazaret/runsc-20260905/runsc")));
    let resolved = resolve("[runtime]\nrunsc = \"~/bin/runsc\"\n", "default").expect("valid");
    assert_eq!(resolved.runsc.as_deref(), Some(Path::new("/home/u/bin/runsc")));
    assert_eq!(parse("").expect("valid").runsc, None, "no key: the newest runsc found is used");

    let relative = parse("[runtime]\nrunsc = \"bin/runsc\"\n").expect_err("relative");
    assert!(message(&relative).contains("`bin/runsc` is not an absolute path"), "{}", message(&relative));
    assert!(message(&relative).contains("runtime.runsc"), "{}", message(&relative));
    let parent = parse("[runtime]\nrunsc = \"/usr/../tmp/runsc\"\n").expect_err("dot-dot");
    assert_eq!(parent.exit_status(), crate::exit_status::SECURITY_ABORT, "{}", message(&parent));
    let unknown = parse("[runtime]\nrunc = \"/usr/bin/runc\"\n").expect_err("unknown key");
    assert!(message(&unknown).contains("runc"), "{}", message(&unknown));
}

#[test]
fn a_profile_command_and_auto_approve_resolve_and_are_checked() {
    let text = "[escalation]\nenabled = true\nsocket_dir = \"/run/user/1000/lazaret\"\nauto_approve = [\"cargo check\"]\n\n\
                [profiles.agent]\nimage = \"localhost/agent:1\"\ncommand = [\"claude\", \"--verbose\"]\nauto_approve = [\"npm test\"]\n";
    let resolved = resolve(text, "agent").expect("resolves");
    assert_eq!(resolved.command, ["claude", "--verbose"]);
    let rules: Vec<Vec<String>> = resolved.auto_approve_rules.iter().map(|rule| rule.argv.clone()).collect();
    assert_eq!(rules, [vec!["cargo".to_owned(), "check".to_owned()], vec!["npm".to_owned(), "test".to_owned()]]);
    assert!(resolve(text, "default").expect("default").auto_approve_rules.len() == 1, "a profile's rules are its own");

    let empty = parse("[profiles.agent]\nimage = \"localhost/agent:1\"\ncommand = []\n").expect_err("empty command");
    assert!(message(&empty).contains("profiles.agent.command") && message(&empty).contains("config.toml:3:"), "{}", message(&empty));
    let shell = parse("[profiles.agent]\nimage = \"localhost/agent:1\"\nauto_approve = [\"bash *\"]\n").expect_err("a shell");
    assert!(message(&shell).contains("profiles.agent.auto_approve"), "{}", message(&shell));
}

#[test]
fn limits_are_global_and_per_profile_key_by_key() {
    let text = "[limits]\nmemory = \"8G\"\nprocesses = 2048\n\n[profiles.small]\nimage = \"localhost/a:1\"\nlimits = { processes = 256, cpus = 1.5 }\n";
    let small = resolve(text, "small").expect("valid");
    assert_eq!(small.limits, crate::limits::Limits { memory: Some(8 << 30), processes: Some(256), cpus: Some(1.5) });
    let default = resolve(text, "default").expect("valid");
    assert_eq!(default.limits, crate::limits::Limits { memory: Some(8 << 30), processes: Some(2048), cpus: None });
    let none = resolve("", "default").expect("valid");
    assert_eq!(none.limits, crate::limits::Limits::default(), "unset: the defaults apply");
    assert_eq!(none.limits.processes(), crate::limits::DEFAULT_PROCESSES);
    let whole = resolve("[limits]\ncpus = 2\n", "default").expect("an integer number of CPUs");
    assert_eq!(whole.limits.cpus, Some(2.0));
}

#[test]
fn bad_limits_are_refused_naming_the_key() {
    for (text, field, says) in [
        ("[limits]\nmemory = \"lots\"\n", "limits.memory", "`lots` is not a memory size"),
        ("[limits]\nmemory = \"1M\"\n", "limits.memory", "below the minimum"),
        ("[limits]\nmemory = 4096\n", "", "expected a string"),
        ("[limits]\nprocesses = 0\n", "limits.processes", "out of range"),
        ("[limits]\ncpus = 0.0\n", "limits.cpus", "out of range"),
        ("[limits]\nswap = \"1G\"\n", "", "unknown field `swap`"),
        ("[profiles.xx]\nimage = \"localhost/a:1\"\nlimits = { processes = -5 }\n", "profiles.xx.limits.processes", "out of range"),
        ("[profiles.xx]\nimage = \"localhost/a:1\"\nlimits = { pids = 5 }\n", "", "unknown field `pids`"),
    ] {
        let error = parse(text).expect_err(text);
        let shown = message(&error);
        assert!(shown.contains(field) && shown.contains(says), "{text}: {shown}");
        assert!(shown.contains("config.toml:"), "the value is located: {shown}");
    }
}

/// The first ```toml block of `document` (a file of the repository).
fn toml_example(document: &str) -> String {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(document)).expect("the document");
    let start = text.find("```toml\n").expect("a toml example") + "```toml\n".len();
    text[start..].split("```").next().expect("its end").to_owned()
}

/// Issue 27: the README's configuration example is a valid configuration,
/// and every key it calls default can be left out and then has exactly the
/// documented value (`[escalation] socket_dir` was required, against the
/// README). A new `# default` line without a check here fails this test.
#[test]
fn the_readmes_configuration_example_parses_and_every_documented_default_holds() {
    let mut host = host();
    host.vars.insert("ANTHROPIC_API_KEY".into(), "sk-test".into());
    let example = toml_example("README.md");
    let parse_with = |text: &str| Config::parse(text, Path::new("/home/u/.config/lazaret/config.toml"), &host);
    parse_with(&example).unwrap_or_else(|error| panic!("the README's example: {error}"));
    let defaults: Vec<&str> = example.lines().filter(|line| line.contains("# default")).collect();
    assert!(defaults.len() >= 6, "{defaults:?}");
    for line in defaults {
        let key = line.split('=').next().unwrap_or("").trim();
        let without: String = example.lines().filter(|other| *other != line).map(|other| format!("{other}\n")).collect();
        let config = parse_with(&without).unwrap_or_else(|error| panic!("without `{key}`: {error}"));
        match key {
            "data_root" => assert_eq!(config.data_root, Path::new("/home/u/.local/share/lazaret")),
            "private_answers" => assert_eq!(config.private_answers, PrivateAnswers::Refuse),
            "ask" => assert!(!config.ask, "names on no allow entry are refused without asking"),
            "ask_hold_seconds" => assert_eq!(config.ask_hold_seconds, crate::config::DEFAULT_ASK_HOLD_SECONDS),
            "enabled" => assert!(config.escalation_enabled),
            "socket_dir" => assert_eq!(config.socket_root, Path::new("/run/user/1000/lazaret")),
            "runsc" => assert_eq!(config.runsc, None, "the newest runsc found is chosen at start"),
            "cpus" => assert_eq!(config.limits.cpus, None, "no limit"),
            "ca_bundle" => assert_eq!(config.ca_bundle, None, "the system's bundle is found at start"),
            "backend" => assert_eq!(config.profile("claude").expect("claude").backend, Backend::Podman),
            other => panic!("the README documents a default for `{other}` that this test does not check"),
        }
    }
    // docs/agents.md's example of a profile's key.
    let agents = format!("[profiles.claude]\nimage = \"localhost/claude-agent:1\"\n{}", toml_example("docs/agents.md"));
    parse_with(&agents).unwrap_or_else(|error| panic!("docs/agents.md's example: {error}"));
    // docs/cluster.md's example of a cluster profile.
    let cluster = parse_with(&toml_example("docs/cluster.md")).unwrap_or_else(|error| panic!("docs/cluster.md's example: {error}"));
    assert!(matches!(cluster.profile("team").expect("team").backend, Backend::Kubernetes(_)));
}

/// Issue 29: `[network] ask` and a profile's `ask` (the profile's wins),
/// `ask_hold_seconds` bounded by the sidecar's longest hold.
#[test]
fn ask_comes_from_the_network_table_and_a_profile_overrides_it() {
    let with = |network: &str, profile: &str| {
        let text = GOOD
            .replace("[network]\n", &format!("[network]\n{network}"))
            .replace("[profiles.claude]\n", &format!("[profiles.claude]\n{profile}"));
        resolve(&text, "claude")
    };
    let resolved = with("", "").expect("resolves");
    assert!(!resolved.ask);
    assert_eq!(resolved.ask_hold_seconds, 10);
    let resolved = with("ask = true\nask_hold_seconds = 3\n", "").expect("resolves");
    assert!(resolved.ask);
    assert_eq!(resolved.ask_hold_seconds, 3);
    assert!(!with("ask = true\n", "ask = false\n").expect("resolves").ask, "the profile's own `ask` wins");
    assert!(with("", "ask = true\n").expect("resolves").ask);
    let error = with("ask_hold_seconds = 31\n", "").expect_err("out of range").to_string();
    assert!(error.contains("network.ask_hold_seconds") && error.contains("`31`"), "{error}");
}

const KEYS: &str = r#"
[profiles.claude]
image = "localhost/agent:1.0"
allow_egress = ["api.anthropic.com", "*.openai.test", "10.9.0.0/16"]
env = { ANTHROPIC_API_KEY = "lazaret-injected" }
credentials = [
  { origin = "https://api.anthropic.com", header = "x-api-key", value = "env:API_TOKEN", base_url_env = "ANTHROPIC_BASE_URL" },
  { origin = "https://api.openai.test/", header = "Authorization", scheme = "bearer", value = "file:{profile_dir}/openai.key", base_url_env = "OPENAI_BASE_URL", base_path = "/v1" },
  { origin = "https://10.9.0.7:8443", header = "x-key", command = ["pass", "show", "key"] },
]
"#;

#[test]
fn credentials_resolve_to_ports_and_sources_never_to_keys() {
    let resolved = resolve(KEYS, "claude").expect("resolves");
    let expected = [
        ResolvedCredential {
            origin: "https://api.anthropic.com".into(),
            header: "x-api-key".into(),
            bearer: false,
            source: CredentialSource::Env("API_TOKEN".into()),
            port: CREDENTIAL_PORT_BASE,
            base_url_env: Some("ANTHROPIC_BASE_URL".into()),
            base_path: String::new(),
        },
        ResolvedCredential {
            origin: "https://api.openai.test".into(),
            header: "authorization".into(),
            bearer: true,
            source: CredentialSource::File("/home/u/.local/share/lazaret/claude/openai.key".into()),
            port: CREDENTIAL_PORT_BASE + 1,
            base_url_env: Some("OPENAI_BASE_URL".into()),
            base_path: "/v1".into(),
        },
        ResolvedCredential {
            origin: "https://10.9.0.7:8443".into(),
            header: "x-key".into(),
            bearer: false,
            source: CredentialSource::Command(vec!["pass".into(), "show".into(), "key".into()]),
            port: CREDENTIAL_PORT_BASE + 2,
            base_url_env: None,
            base_path: String::new(),
        },
    ];
    assert_eq!(resolved.credentials, expected);
    assert_eq!(resolved.env["ANTHROPIC_BASE_URL"].value, format!("http://127.0.0.1:{CREDENTIAL_PORT_BASE}"));
    assert_eq!(resolved.env["OPENAI_BASE_URL"].value, format!("http://127.0.0.1:{}/v1", CREDENTIAL_PORT_BASE + 1));
    assert_eq!(resolved.env["ANTHROPIC_API_KEY"].value, "lazaret-injected");
    let shown = format!("{resolved:?}");
    assert!(!shown.contains("s3cret"), "the resolved profile never holds a key: {shown}");
}

#[test]
fn bad_credentials_are_named_without_echoing_a_key() {
    for (from, to, names) in [
        ("https://api.anthropic.com\", header", "http://api.anthropic.com\", header", "credentials[0].origin"),
        ("https://api.openai.test/\"", "https://api.openai.test/v1\"", "no path"),
        ("header = \"x-api-key\"", "header = \"Host\"", "credentials[0].header"),
        ("value = \"env:API_TOKEN\"", "value = \"sk-ant-api03-secret\"", "env:VAR"),
        ("value = \"env:API_TOKEN\"", "value = \"env:API TOKEN\"", "not a valid environment variable name"),
        ("value = \"env:API_TOKEN\"", "value = \"env:API_TOKEN\", command = [\"x\"]", "not both"),
        ("command = [\"pass\", \"show\", \"key\"]", "command = []", "the command is empty"),
        ("scheme = \"bearer\"", "scheme = \"basic\"", "credentials[1].scheme"),
        ("base_url_env = \"ANTHROPIC_BASE_URL\"", "base_url_env = \"ANTHROPIC_API_KEY\"", "set twice"),
        ("base_url_env = \"ANTHROPIC_BASE_URL\"", "base_url_env = \"LAZARET_X\"", "LAZARET_"),
        ("https://api.openai.test/\"", "https://api.anthropic.com\"", "two entries"),
        ("\"api.anthropic.com\", ", "", "not on the allowlist: add `api.anthropic.com`"),
        ("\"10.9.0.0/16\"", "\"10.8.0.0/16\"", "`https://10.9.0.7:8443` is not on the allowlist"),
        ("value = \"file:{profile_dir}/openai.key\"", "value = \"file:relative/key\"", "not an absolute path"),
        ("value = \"file:{profile_dir}/openai.key\"", "value = \"file:{profile_dir}/../x\"", ".."),
        ("base_path = \"/v1\"", "base_path = \"v1 x\"", "not a URL path"),
        ("base_url_env = \"OPENAI_BASE_URL\", ", "", "goes with `base_url_env`"),
    ] {
        let text = KEYS.replacen(from, to, 1);
        assert_ne!(text, KEYS, "{from}");
        let error = message(&resolve(&text, "claude").expect_err(to));
        assert!(error.contains(names), "{to}: {error}");
        assert!(!error.contains("sk-ant-api03-secret"), "{error}");
    }
}

#[test]
fn the_backend_is_podman_unless_a_profile_names_a_cluster() {
    let resolved = resolve("[profiles.ab]\nimage = \"i:1\"\n", "ab").expect("resolves");
    assert_eq!(resolved.backend, Backend::Podman);
    let resolved = resolve("[profiles.ab]\nimage = \"i:1\"\nbackend = \"podman\"\n", "ab").expect("resolves");
    assert_eq!(resolved.backend, Backend::Podman);
    // Every key of the table, then the defaults.
    let text = "[profiles.ab]\nimage = \"i:1\"\nallow_egress = [\"github.com\"]\n\
                backend = { kubernetes = { kubeconfig = \"/k/config\", context = \"team\", namespace = \"agents\", runtime_class = \"gvisor.example\", \
                storage_class = \"fast.ssd\", image = \"registry.example/agent:2\", egress = \"cilium\" } }\n";
    let Backend::Kubernetes(cluster) = resolve(text, "ab").expect("resolves").backend else { panic!("kubernetes") };
    assert_eq!(
        cluster,
        KubernetesBackend {
            kubeconfig: Some("/k/config".into()),
            context: Some("team".into()),
            namespace: "agents".into(),
            runtime_class: "gvisor.example".into(),
            storage_class: Some("fast.ssd".into()),
            image: Some("registry.example/agent:2".into()),
            egress: KubernetesEgress::Cilium,
        }
    );
    let Backend::Kubernetes(cluster) =
        resolve("[profiles.ab]\nimage = \"i:1\"\nbackend = { kubernetes = {} }\n", "ab").expect("resolves").backend
    else {
        panic!("kubernetes")
    };
    assert_eq!((cluster.namespace.as_str(), cluster.runtime_class.as_str()), (DEFAULT_NAMESPACE, DEFAULT_RUNTIME_CLASS));
    assert_eq!((cluster.egress, cluster.kubeconfig, cluster.context, cluster.image), (KubernetesEgress::Cilium, None, None, None));
}

#[test]
fn a_bad_backend_is_named_with_its_location_and_egress_is_never_silently_open() {
    let profile = "[profiles.ab]\nimage = \"i:1\"\n";
    for (rest, field, needle, location) in [
        ("backend = \"docker\"\n", "profiles.ab.backend", "`docker` is not a backend", ":3:11"),
        ("backend = {}\n", "profiles.ab.backend", "names no backend", ":3:11"),
        ("backend = { nomad = {} }\n", "config.toml", "unknown field `nomad`, expected `kubernetes`", ":3:13"),
        ("backend = { kubernetes = { namespce = \"x\" } }\n", "config.toml", "unknown field `namespce`", ":3:28"),
        (
            "backend = { kubernetes = { namespace = \"Agents\" } }\n",
            "profiles.ab.backend.kubernetes.namespace",
            "`Agents` is not a valid name",
            ":3:40",
        ),
        ("backend = { kubernetes = { runtime_class = \"-x\" } }\n", "profiles.ab.backend.kubernetes.runtime_class", "`-x`", ":3:44"),
        (
            "backend = { kubernetes = { kubeconfig = \"k/config\" } }\n",
            "profiles.ab.backend.kubernetes.kubeconfig",
            "not an absolute path",
            ":3:41",
        ),
        ("backend = { kubernetes = { storage_class = \"a..b\" } }\n", "profiles.ab.backend.kubernetes.storage_class", "`a..b`", ":3:44"),
        ("backend = { kubernetes = { context = \"\" } }\n", "profiles.ab.backend.kubernetes.context", "context `` is empty", ":3:38"),
        (
            "backend = { kubernetes = { egress = \"calico\" } }\n",
            "profiles.ab.backend.kubernetes.egress",
            "`calico` is not an egress enforcer",
            ":3:37",
        ),
        (
            "allow_egress = [\"github.com\"]\nbackend = { kubernetes = { egress = \"none\" } }\n",
            "profiles.ab.allow_egress",
            "`github.com` is allowed, but the profile's cluster has no egress",
            ":3:17",
        ),
        (
            "volumes = [{ host = \"/x\", container = \"/y\" }]\nbackend = { kubernetes = {} }\n",
            "profiles.ab.volumes",
            "host volumes are not available on a cluster",
            ":3:12",
        ),
        ("ask = true\nbackend = { kubernetes = {} }\n", "profiles.ab.ask", "Network Sidecar", ":4:11"),
    ] {
        let error = parse(&format!("{profile}{rest}")).expect_err(rest);
        let text = message(&error);
        assert!(text.contains(field) && text.contains(needle) && text.contains(location), "{rest}: {text}");
    }
    // The global allowlist and `[network] ask` count too, once merged.
    let global =
        "[network]\nallow_egress = [\"10.0.0.0/8\"]\n[profiles.ab]\nimage = \"i:1\"\nbackend = { kubernetes = { egress = \"none\" } }\n";
    let error = resolve(global, "ab").expect_err("global allowlist");
    assert!(message(&error).contains("`10.0.0.0/8`") && message(&error).contains("egress = \"none\""), "{}", message(&error));
    assert_eq!(error.exit_status(), Error::security("x", "y", None).exit_status());
    let asking = "[network]\nask = true\n[profiles.ab]\nimage = \"i:1\"\nbackend = { kubernetes = {} }\n";
    assert!(message(&resolve(asking, "ab").expect_err("ask")).contains("set `ask = false`"));
    let answered = "[network]\nask = true\n[profiles.ab]\nimage = \"i:1\"\nask = false\nbackend = { kubernetes = { egress = \"none\" } }\n";
    assert!(matches!(resolve(answered, "ab").expect("resolves").backend, Backend::Kubernetes(_)));
}
