//! The objects a domain becomes, without a cluster: golden files (run with
//! `LAZARET_UPDATE_GOLDEN=1` to rewrite them after a deliberate change, and
//! review the diff) and the properties the security model rests on, checked
//! one by one so that a golden file rewritten in a hurry cannot hide them.
//! `tests/cluster.rs` applies the same objects to a real cluster.

use std::path::PathBuf;

use lazaret_core::egress::EgressRule;
use lazaret_core::limits::Limits;
use lazaret_dns::special::{cluster_denied, Form, RangeClass};
use lazaret_kube::egress::{cilium_policy, fqdn_selectors, no_egress_policy, FqdnSelector};
use lazaret_kube::objects::{sandbox, sandbox_name, SandboxPlan, DOMAIN_LABEL};

fn golden(name: &str, value: &impl serde::Serialize) {
    golden_text(name, serde_json::to_string_pretty(value).expect("serialize") + "\n");
}

fn golden_text(name: &str, text: String) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden").join(name);
    if std::env::var_os("LAZARET_UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, &text).expect("write golden");
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
    assert_eq!(text, expected, "{} differs (LAZARET_UPDATE_GOLDEN=1 rewrites it)", path.display());
}

fn plan() -> SandboxPlan {
    SandboxPlan {
        domain_hash: "0123456789ab".into(),
        profile: "claude".into(),
        namespace: "lazaret".into(),
        image: "localhost/lazaret-default:1".into(),
        image_pull_policy: "IfNotPresent".into(),
        runtime_class: "gvisor".into(),
        storage_class: Some("standard".into()),
        state_size: "10Gi".into(),
        persistent_dirs: vec!["/root".into(), "/usr/local".into()],
        // `/usr/local` was reset twice.
        seed_epochs: vec![0, 2],
        limits: Limits { memory: Some(2 << 30), processes: Some(512), cpus: Some(1.5) },
    }
}

/// The allowlist every policy test uses: names, a wildcard, public and
/// private CIDRs, IPv6.
fn allowlist() -> Vec<EgressRule> {
    ["github.com", "*.npmjs.org", "203.0.113.0/24", "10.1.0.0/16", "2001:db8::/32", "github.com"]
        .iter()
        .map(|entry| entry.parse().expect(entry))
        .collect()
}

#[test]
fn the_sandbox_matches_its_golden_file() {
    golden("sandbox.json", &sandbox(&plan()));
}

#[test]
fn the_sandbox_pod_has_nothing_it_does_not_need() {
    let sandbox = sandbox(&plan());
    assert_eq!(sandbox.metadata.name.as_deref(), Some("lazaret-0123456789ab"));
    assert_eq!(sandbox.metadata.labels.as_ref().and_then(|labels| labels.get(DOMAIN_LABEL)).map(String::as_str), Some("0123456789ab"));
    let pod = &sandbox.spec.pod_template.spec;
    assert_eq!(pod.runtime_class_name.as_deref(), Some("gvisor"));
    assert_eq!(pod.automount_service_account_token, Some(false));
    assert_eq!(pod.enable_service_links, Some(false));
    for flag in [pod.host_network, pod.host_pid, pod.host_ipc] {
        assert_eq!(flag, Some(false));
    }
    let containers = pod.containers.iter().chain(pod.init_containers.iter().flatten());
    for container in containers {
        let security = container.security_context.as_ref().expect("a security context");
        assert_eq!(security.allow_privilege_escalation, Some(false), "{}", container.name);
        assert_eq!(security.privileged, Some(false), "{}", container.name);
        let dropped = security.capabilities.as_ref().and_then(|capabilities| capabilities.drop.clone()).unwrap_or_default();
        for capability in ["SETUID", "SETGID", "NET_RAW"] {
            assert!(dropped.iter().any(|name| name == capability), "{}: {capability} dropped", container.name);
        }
        assert!(container.env.is_none() && container.env_from.is_none(), "{}: no environment in an API object", container.name);
        let limits = container.resources.as_ref().and_then(|resources| resources.limits.clone()).expect("limits");
        assert_eq!(limits.get("cpu").map(|quantity| quantity.0.as_str()), Some("1500m"));
        assert_eq!(limits.get("memory").map(|quantity| quantity.0.as_str()), Some("2147483648"));
    }
    // The run directory is memory-backed: what comes over exec stdin never
    // reaches a disk.
    let volumes = pod.volumes.as_ref().expect("volumes");
    let run = volumes.iter().find(|volume| volume.name == "run").expect("run volume");
    assert_eq!(run.empty_dir.as_ref().and_then(|dir| dir.medium.as_deref()), Some("Memory"));
    // The persistent directories are the claim's parts, seeded by paths
    // and seed epochs passed as arguments (never spliced into the script).
    let seed = &pod.init_containers.as_ref().expect("a seed container")[0];
    let command = seed.command.as_ref().expect("command");
    assert_eq!(&command[command.len() - 4..], ["/root", "0", "/usr/local", "2"]);
    assert!(!command[2].contains("/usr/local"));
}

#[test]
fn a_profile_without_persistent_directories_has_no_seed_container() {
    let sandbox = sandbox(&SandboxPlan { persistent_dirs: Vec::new(), limits: Limits::default(), ..plan() });
    let pod = &sandbox.spec.pod_template.spec;
    assert!(pod.init_containers.is_none());
    assert!(pod.containers[0].resources.is_none());
}

#[test]
fn the_name_is_a_dns_label_for_every_hash() {
    let name = sandbox_name("ffffffffffff");
    assert!(name.len() <= 63 && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'), "{name}");
}

#[test]
fn the_cilium_policy_matches_its_golden_file() {
    golden("cilium-policy.json", &cilium_policy("0123456789ab", "lazaret", &allowlist()));
}

/// What every cluster policy denies, one prefix a line, from the table the
/// sidecar judges answers with (`lazaret_dns::special`): a change to the
/// table shows here, apart from the policy's golden file.
#[test]
fn the_denied_ranges_match_their_golden_file() {
    let mut text = String::from("# prefix  class  what (and form: NAT64, 6to4), from lazaret_dns::special::cluster_denied\n");
    for denied in cluster_denied() {
        let class = match denied.range.class {
            RangeClass::Never => "never",
            RangeClass::Internal => "internal",
        };
        let form = match denied.form {
            Form::Itself => "",
            Form::Nat64 => " (NAT64 form)",
            Form::SixToFour => " (6to4 form)",
        };
        text.push_str(&format!("{}  {class}  {}{form}\n", denied.prefix, denied.range.what));
    }
    golden_text("cluster-denied-ranges.txt", text);
    let policy = cilium_policy("0123456789ab", "lazaret", &[]);
    let written: Vec<&str> = policy.spec.egress_deny[0].to_cidr_set.iter().map(|rule| rule.cidr.as_str()).collect();
    let listed: Vec<String> = cluster_denied().iter().map(|denied| denied.prefix.to_string()).collect();
    assert_eq!(written, listed, "without CIDR entries the policy denies exactly the list");
}

/// A wide allow opens the internal ranges it covers (as the sidecar's CIDR
/// allow opens them to a name's answer) and none of the never-ranges: before
/// issue 46, `0.0.0.0/0` took the loopback and link-local (metadata) denies
/// away.
#[test]
fn a_wide_allow_keeps_the_never_ranges_denied() {
    let allowlist: Vec<EgressRule> = ["github.com", "0.0.0.0/0", "::/0"].iter().map(|entry| entry.parse().expect(entry)).collect();
    let policy = cilium_policy("0123456789ab", "lazaret", &allowlist);
    let denied: Vec<&str> = policy.spec.egress_deny[0].to_cidr_set.iter().map(|rule| rule.cidr.as_str()).collect();
    for never in
        ["169.254.0.0/16", "127.0.0.0/8", "0.0.0.0/8", "224.0.0.0/4", "fe80::/10", "::/96", "64:ff9b::a9fe:0/112", "2002:7f00::/24"]
    {
        assert!(denied.contains(&never), "{never} stays denied under a wide allow: {denied:?}");
    }
    for internal in ["10.0.0.0/8", "198.18.0.0/15", "240.0.0.0/4", "fc00::/7", "64:ff9b::a00:0/104"] {
        assert!(!denied.contains(&internal), "{internal} is opened by the wide allow");
    }
    assert!(policy.spec.egress_deny[0].to_cidr_set.iter().all(|rule| rule.except.is_empty()), "nothing lies inside a never-range");
}

/// Every CIDR the generator writes is one Cilium's CRD takes: dotted IPv4,
/// IPv6 in hexadecimal groups only (its pattern refuses
/// `::ffff:10.0.0.0/104`), and it reads back as the prefix it stands for.
#[test]
fn every_cidr_is_written_as_ciliums_schema_takes_it() {
    let allowlist: Vec<EgressRule> = ["github.com", "10.1.0.0/16", "169.254.169.254/32", "fd00::/8", "64:ff9b::a01:0/112"]
        .iter()
        .map(|entry| entry.parse().expect(entry))
        .collect();
    let policy = cilium_policy("0123456789ab", "lazaret", &allowlist);
    let rules = policy.spec.egress.iter().chain(&policy.spec.egress_deny).flat_map(|rule| &rule.to_cidr_set);
    let texts: Vec<&String> = rules.flat_map(|rule| std::iter::once(&rule.cidr).chain(&rule.except)).collect();
    assert!(texts.iter().any(|text| *text == "64:ff9b::a00:0/104"), "{texts:?}");
    for text in texts {
        let net: ipnet::IpNet = text.parse().unwrap_or_else(|_| panic!("{text}"));
        assert_eq!(net, net.trunc(), "{text}: no host bits");
        if net.addr().is_ipv6() {
            assert!(text.bytes().all(|byte| byte.is_ascii_hexdigit() || byte == b':' || byte == b'/'), "{text}");
        } else {
            assert!(text.bytes().all(|byte| byte.is_ascii_digit() || byte == b'.' || byte == b'/'), "{text}");
        }
    }
}

#[test]
fn the_no_egress_policy_matches_its_golden_file() {
    golden("no-egress-policy.json", &no_egress_policy("0123456789ab", "lazaret"));
}

#[test]
fn a_wildcard_becomes_one_pattern_per_allowed_depth() {
    assert_eq!(fqdn_selectors("github.com"), [FqdnSelector::MatchName("github.com".into())]);
    assert_eq!(
        fqdn_selectors("*.npmjs.org"),
        ["*.npmjs.org", "*.*.npmjs.org", "*.*.*.npmjs.org"].map(|pattern| FqdnSelector::MatchPattern(pattern.into()))
    );
}

#[test]
fn names_resolving_into_private_ranges_stay_closed_unless_a_cidr_opens_them() {
    let policy = cilium_policy("0123456789ab", "lazaret", &allowlist());
    let denied = &policy.spec.egress_deny[0].to_cidr_set;
    let ten = denied.iter().find(|rule| rule.cidr == "10.0.0.0/8").expect("10/8 denied");
    assert_eq!(ten.except, ["10.1.0.0/16"], "the allowlisted 10.1.0.0/16 is carved out of the deny");
    let metadata = denied.iter().find(|rule| rule.cidr == "169.254.0.0/16").expect("link-local (metadata) denied");
    assert!(metadata.except.is_empty());
    // DNS goes only to kube-dns, and only for the allowlisted names.
    let dns = &policy.spec.egress[0];
    let rules = dns.to_ports[0].rules.as_ref().expect("DNS rules");
    assert_eq!(rules.dns.len(), 4, "github.com and the three depths of *.npmjs.org: {:?}", rules.dns);
    // An empty allowlist allows nothing at all: no egress rule.
    let closed = cilium_policy("0123456789ab", "lazaret", &[]);
    assert!(closed.spec.egress.is_empty());
}

#[test]
fn only_a_profile_that_keeps_directories_claims_a_volume() {
    let keeps = sandbox(&plan());
    assert_eq!(keeps.spec.volume_claim_templates.len(), 1);
    let claim = &keeps.spec.volume_claim_templates[0];
    assert_eq!(claim.metadata.labels.get(DOMAIN_LABEL).map(String::as_str), Some("0123456789ab"), "teardown finds the claim by its label");
    let keeps_nothing = sandbox(&SandboxPlan { persistent_dirs: Vec::new(), ..plan() });
    assert!(keeps_nothing.spec.volume_claim_templates.is_empty());
    let volumes = keeps_nothing.spec.pod_template.spec.volumes.expect("volumes");
    assert!(volumes.iter().all(|volume| volume.persistent_volume_claim.is_none()));
}

/// The seeding script, run by a real `sh` over directories standing in
/// for the image's: it seeds a part once per epoch and directory and keeps
/// the agent's changes in between, says in its termination message which
/// parts it seeded, and reads an empty marker (of before epochs) as epoch 0.
#[test]
fn the_seed_script_seeds_once_per_epoch_and_directory() {
    let root = tempfile::tempdir().expect("tempdir");
    let parts = root.path().join("parts");
    let message = root.path().join("termination-log");
    let image_dirs: Vec<std::path::PathBuf> = ["usr-local", "root"].iter().map(|name| root.path().join(name)).collect();
    for (dir, content) in image_dirs.iter().zip(["image's tool", "image's profile"]) {
        std::fs::create_dir_all(dir.join("sub")).expect("image dir");
        std::fs::write(dir.join("sub/file"), content).expect("image file");
    }
    // Seeds with `dirs` (indices into `image_dirs`) and their epochs; gives
    // the parts the termination message names.
    let seed = |dirs: &[usize], epochs: &[u64]| -> Vec<usize> {
        let sandbox = sandbox(&SandboxPlan {
            persistent_dirs: dirs.iter().map(|&index| image_dirs[index].display().to_string()).collect(),
            seed_epochs: epochs.to_vec(),
            ..plan()
        });
        let init = sandbox.spec.pod_template.spec.init_containers.expect("a seed container");
        let mut command = init[0].command.clone().expect("command");
        // The parts' place in the claim and the termination message, here
        // the test's own.
        command[2] = command[2].replace("/dev/termination-log", &message.display().to_string());
        command[4] = parts.display().to_string();
        let status = std::process::Command::new(&command[0]).args(&command[1..]).status().expect("sh");
        assert!(status.success());
        lazaret_kube::objects::seeded_parts(&std::fs::read_to_string(&message).expect("message")).expect("a seeded message")
    };
    let read = |part: usize| std::fs::read_to_string(parts.join(part.to_string()).join("sub/file")).expect("seeded file");
    assert_eq!(seed(&[0, 1], &[0, 0]), [0, 1]);
    assert_eq!((read(0), read(1)), ("image's tool".to_owned(), "image's profile".to_owned()));
    std::fs::write(parts.join("0/sub/file"), "agent's").expect("the agent writes");
    std::fs::write(parts.join("1/sub/file"), "agent's").expect("the agent writes");
    assert_eq!(seed(&[0, 1], &[0, 0]), Vec::<usize>::new(), "the same epochs seed nothing");
    assert_eq!(read(0), "agent's");
    assert_eq!(seed(&[0, 1], &[0, 7]), [1], "only the reset directory is seeded again");
    assert_eq!((read(0), read(1)), ("agent's".to_owned(), "image's profile".to_owned()));
    // The profile's directories reordered: each part now stands for the
    // other directory, so both are seeded from their new directory.
    assert_eq!(seed(&[1, 0], &[7, 0]), [0, 1]);
    assert_eq!((read(0), read(1)), ("image's profile".to_owned(), "image's tool".to_owned()));
    std::fs::write(parts.join("0/sub/file"), "agent's").expect("the agent writes");
    std::fs::write(parts.join("0.seeded"), "").expect("a marker of before epochs");
    assert_eq!(seed(&[1, 0], &[0, 0]), Vec::<usize>::new(), "an empty marker is epoch 0 of its directory");
    assert_eq!(read(0), "agent's");
}

#[test]
fn a_seed_message_is_read_strictly() {
    use lazaret_kube::objects::seeded_parts;
    assert_eq!(seeded_parts("lazaret-seeded 0 2\n"), Some(vec![0, 2]));
    assert_eq!(seeded_parts("lazaret-seeded\n"), Some(Vec::new()));
    for bad in ["", "seeded 0", "lazaret-seeded x", "lazaret-seeded  0", "lazaret-seeded -1", "lazaret-seeded 0\n1"] {
        assert_eq!(seeded_parts(bad), None, "{bad:?}");
    }
}
