//! Agent presets: what `lazaret init --agent` writes into the configuration
//! and what `lazaret image build --agent` puts into the agent's image.
//!
//! Each preset pins the agent's package version, so the profile written by
//! `init` names exactly the image `image build` makes. Everything here is
//! data; the commands that use it are `commands::init` and
//! `commands::agent_image`.

use clap::ValueEnum;

/// The agents Lazaret has presets for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Agent {
    /// Claude Code (npm `@anthropic-ai/claude-code`, a native binary).
    Claude,
    /// OpenAI Codex CLI (npm `@openai/codex`, a Node launcher and a static binary).
    Codex,
    /// aider (PyPI `aider-chat`, Python).
    Aider,
}

/// How the agent's package is fetched on the host.
#[derive(Debug, Clone, Copy)]
pub enum Package {
    /// `npm install --global --ignore-scripts` into `<staging>/usr/local`.
    Npm { name: &'static str },
    /// `pip download --only-binary=:all:` then `pip install --no-index
    /// --target <staging>/usr/local/lib/<dir>`, with Debian's `/usr/bin/python3`.
    Pip { name: &'static str, target_dir: &'static str },
}

/// A line of the profile with the reason it is there.
#[derive(Debug, Clone, Copy)]
pub struct Why {
    pub value: &'static str,
    pub why: &'static str,
}

/// An install script of the agent's package that Lazaret does not run, and
/// what it does instead.
#[derive(Debug, Clone, Copy)]
pub struct KnownScript {
    pub package: &'static str,
    pub effect: &'static str,
}

#[derive(Debug, Clone, Copy)]
pub struct Preset {
    /// The profile name `init` writes and the command the profile runs.
    pub name: &'static str,
    pub title: &'static str,
    pub package: Package,
    /// Pinned: the newest version that was shown to work in the sandbox.
    pub version: &'static str,
    /// The command inside the sandbox.
    pub command: &'static str,
    /// Debian packages whose files go into the image (the agent's runtime).
    pub runtime_packages: &'static [&'static str],
    /// Debian packages the host needs to fetch the package (not in the image).
    pub host_tools: &'static [(&'static str, &'static str)],
    /// `usr/local/bin/<command>` points here (absolute container path); `None`:
    /// the link the package manager made, or `launcher`.
    pub entry_point: Option<&'static str>,
    /// A generated `usr/local/bin/<command>` script.
    pub launcher: Option<&'static str>,
    pub known_scripts: &'static [KnownScript],
    /// Container paths the fetched package must provide (the native binary
    /// of an optional dependency, for example), with the package that brings it.
    pub required_files: &'static [(&'static str, &'static str)],
    /// The host variable holding the API key; the profile's credential
    /// endpoint pulls it with `env:` (the sandbox gets a placeholder).
    pub api_key: Why,
    /// How the key reaches the API from outside the sandbox.
    pub credential: CredentialPreset,
    pub env: &'static [(&'static str, Why)],
    pub allow_egress: &'static [Why],
    /// Hosts offered as commented-out `allow_egress` entries.
    pub optional_egress: &'static [Why],
    /// Variables offered as commented-out `env` entries.
    pub optional_env: &'static [(&'static str, Why)],
    pub persistent_dirs: &'static [Why],
}

/// The credential endpoint a preset writes: the Network Sidecar adds the
/// key to the requests for `origin`; the agent is pointed at the endpoint by
/// `base_url_env` and holds only [`PLACEHOLDER_KEY`].
#[derive(Debug, Clone, Copy)]
pub struct CredentialPreset {
    pub origin: &'static str,
    pub header: &'static str,
    /// `Authorization: Bearer <key>`.
    pub bearer: bool,
    pub base_url_env: &'static str,
    /// What the agent's client expects after the host in its base URL.
    pub base_path: &'static str,
}

/// What the sandbox sees where a program insists on having an API key.
pub const PLACEHOLDER_KEY: &str = "lazaret-injected";

impl Preset {
    /// `localhost/lazaret-<agent>:<version>`: the version pins the image.
    pub fn image(&self) -> String {
        format!("localhost/lazaret-{}:{}", self.name, self.version)
    }

    pub fn package_name(&self) -> &'static str {
        match self.package {
            Package::Npm { name } | Package::Pip { name, .. } => name,
        }
    }
}

const NPM_REGISTRY: Why =
    Why { value: "registry.npmjs.org", why: "the npm registry: packages the agent installs for the project (npm install, npx)" };

const GITHUB: Why = Why { value: "github.com", why: "git clone/fetch over HTTPS" };

pub const CLAUDE: Preset = Preset {
    name: "claude",
    title: "Claude Code",
    package: Package::Npm { name: "@anthropic-ai/claude-code" },
    version: "2.1.332",
    command: "claude",
    // A native (Bun-compiled, glibc) binary: no Node.js in the image.
    runtime_packages: &["ca-certificates"],
    host_tools: &[("npm", "npm")],
    entry_point: Some("/usr/local/lib/node_modules/@anthropic-ai/claude-code/node_modules/@anthropic-ai/claude-code-linux-x64/claude"),
    launcher: None,
    known_scripts: &[KnownScript {
        package: "@anthropic-ai/claude-code",
        effect: "it only copies the platform binary of the optional dependency \
                 @anthropic-ai/claude-code-linux-x64, which npm fetched from the registry, over the bin/claude.exe \
                 placeholder; Lazaret links /usr/local/bin/claude to that binary instead, so nothing is downloaded \
                 beyond the registry",
    }],
    required_files: &[(
        "/usr/local/lib/node_modules/@anthropic-ai/claude-code/node_modules/@anthropic-ai/claude-code-linux-x64/claude",
        "@anthropic-ai/claude-code-linux-x64 (an optional dependency)",
    )],
    api_key: Why {
        value: "ANTHROPIC_API_KEY",
        why: "the Anthropic API key, pulled from your shell at `lazaret run`; never written to disk",
    },
    credential: CredentialPreset {
        origin: "https://api.anthropic.com",
        header: "x-api-key",
        bearer: false,
        base_url_env: "ANTHROPIC_BASE_URL",
        base_path: "",
    },
    env: &[
        ("CLAUDE_CONFIG_DIR", Why { value: "/root/.claude", why: "settings, login and ~/.claude.json in one persistent directory" }),
        ("DISABLE_AUTOUPDATER", Why { value: "1", why: "the image pins the version; update with `lazaret image build --agent claude`" }),
        (
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC",
            Why { value: "1", why: "no telemetry or error reporting, so their hosts need not be allowed" },
        ),
    ],
    allow_egress: &[
        Why { value: "api.anthropic.com", why: "the Claude API: every model request" },
        Why { value: "console.anthropic.com", why: "signing in with an Anthropic Console account (OAuth token exchange)" },
        Why { value: "claude.ai", why: "signing in with a Claude subscription (`/login`)" },
        NPM_REGISTRY,
    ],
    optional_egress: &[GITHUB, Why { value: "*.githubusercontent.com", why: "raw files and release downloads from GitHub" }],
    optional_env: &[],
    persistent_dirs: &[Why {
        value: "/root/.claude",
        why: "Claude Code's settings, login, memory and session history (CLAUDE_CONFIG_DIR)",
    }],
};

pub const CODEX: Preset = Preset {
    name: "codex",
    title: "OpenAI Codex CLI",
    package: Package::Npm { name: "@openai/codex" },
    version: "0.171.0",
    command: "codex",
    // bin/codex.js (Node >= 16) execs the static musl binary of the optional
    // dependency @openai/codex-linux-x64; Debian 12's nodejs (18) suffices.
    runtime_packages: &["nodejs", "ca-certificates"],
    host_tools: &[("npm", "npm")],
    entry_point: None,
    // Codex 0.171 reads no base URL from its environment and speaks
    // WebSockets to the OpenAI API, which the credential endpoint refuses
    // (it forwards plain HTTP requests only): with the endpoint given, the
    // launcher names a model provider for it with `-c` (plain HTTP, the
    // placeholder key as its `env_key`; the sidecar sets the real one).
    launcher: Some(CODEX_LAUNCHER),
    known_scripts: &[],
    required_files: &[(
        "/usr/local/lib/node_modules/@openai/codex/node_modules/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex",
        "@openai/codex-linux-x64 (an optional dependency, npm:@openai/codex@<version>-linux-x64)",
    )],
    api_key: Why { value: "OPENAI_API_KEY", why: "the OpenAI API key, pulled from your shell at `lazaret run`; never written to disk" },
    // Codex's built-in OpenAI provider takes its base URL (with /v1) from OPENAI_BASE_URL.
    credential: CredentialPreset {
        origin: "https://api.openai.com",
        header: "authorization",
        bearer: true,
        base_url_env: "OPENAI_BASE_URL",
        base_path: "/v1",
    },
    env: &[("CODEX_HOME", Why { value: "/root/.codex", why: "Codex's config.toml, login (auth.json) and sessions, persistent" })],
    allow_egress: &[
        Why { value: "api.openai.com", why: "the OpenAI API: every model request with an API key" },
        Why { value: "auth.openai.com", why: "signing in with ChatGPT (`codex login --device-auth`)" },
        Why { value: "chatgpt.com", why: "model requests when signed in with a ChatGPT plan" },
        NPM_REGISTRY,
    ],
    optional_egress: &[GITHUB],
    optional_env: &[],
    persistent_dirs: &[Why { value: "/root/.codex", why: "Codex's config, login and session history (CODEX_HOME)" }],
};

/// `usr/local/bin/codex` of the codex image: Codex's own launcher
/// (`bin/codex.js`), with a model provider for the credential endpoint when
/// Lazaret gives one in `OPENAI_BASE_URL` (checked to be a plain URL before
/// it goes into the TOML of `-c`).
const CODEX_LAUNCHER: &str = r#"#!/bin/sh
# OpenAI Codex CLI, installed by `lazaret image build --agent codex`.
# With the profile's credential endpoint (OPENAI_BASE_URL, set by Lazaret),
# model requests go to it over plain HTTP: the Network Sidecar adds the API key
# and forwards them to the OpenAI API. Without it, Codex runs as installed.
codex=/usr/local/lib/node_modules/@openai/codex/bin/codex.js
if [ -n "${OPENAI_BASE_URL:-}" ]; then
  case $OPENAI_BASE_URL in
    http://*) ;;
    *) echo "codex (lazaret): OPENAI_BASE_URL is not an http:// URL: $OPENAI_BASE_URL" >&2; exit 2 ;;
  esac
  case $OPENAI_BASE_URL in
    *[!A-Za-z0-9:/._-]*) echo "codex (lazaret): OPENAI_BASE_URL has a character a URL of the credential endpoint never has: $OPENAI_BASE_URL" >&2; exit 2 ;;
  esac
  provider="{ name = \"OpenAI through the Lazaret Network Sidecar\", base_url = \"$OPENAI_BASE_URL\", env_key = \"OPENAI_API_KEY\", wire_api = \"responses\", supports_websockets = false }"
  exec node "$codex" -c 'model_provider="lazaret"' -c "model_providers.lazaret=$provider" "$@"
fi
exec node "$codex" "$@"
"#;

pub const AIDER: Preset = Preset {
    name: "aider",
    title: "aider",
    package: Package::Pip { name: "aider-chat", target_dir: "lazaret-aider" },
    version: "0.86.2",
    command: "aider",
    // aider-chat 0.86.2 needs Python >= 3.10, < 3.13: Debian 12's 3.11.
    runtime_packages: &[
        "python3",
        "python3-minimal",
        "python3.11",
        "python3.11-minimal",
        "libpython3.11-minimal",
        "libpython3.11-stdlib",
        "ca-certificates",
    ],
    host_tools: &[("python3-pip", "pip")],
    entry_point: None,
    launcher: Some(
        "#!/usr/bin/python3\n# aider-chat, installed by `lazaret image build --agent aider`.\nimport sys\n\
         sys.path.insert(0, \"/usr/local/lib/lazaret-aider\")\nfrom aider.main import main\nsys.exit(main())\n",
    ),
    known_scripts: &[],
    required_files: &[("/usr/local/lib/lazaret-aider/aider/main.py", "aider-chat")],
    api_key: Why {
        value: "ANTHROPIC_API_KEY",
        why: "aider picks Claude when this is set; pulled from your shell at `lazaret run`, never written to disk",
    },
    // litellm (aider's client) takes the Anthropic base URL from ANTHROPIC_BASE_URL.
    credential: CredentialPreset {
        origin: "https://api.anthropic.com",
        header: "x-api-key",
        bearer: false,
        base_url_env: "ANTHROPIC_BASE_URL",
        base_path: "",
    },
    env: &[
        ("AIDER_CHECK_UPDATE", Why { value: "false", why: "the image pins the version; update with `lazaret image build --agent aider`" }),
        ("AIDER_ANALYTICS", Why { value: "false", why: "no analytics, so their hosts need not be allowed" }),
        (
            "LITELLM_LOCAL_MODEL_COST_MAP",
            Why { value: "True", why: "model prices from the copy bundled with litellm, not fetched from raw.githubusercontent.com" },
        ),
    ],
    allow_egress: &[
        Why { value: "api.anthropic.com", why: "the Claude API (aider's model with ANTHROPIC_API_KEY)" },
        Why { value: "pypi.org", why: "PyPI's index: packages aider or the agent installs with pip" },
        Why { value: "files.pythonhosted.org", why: "PyPI's downloads" },
    ],
    optional_egress: &[Why { value: "api.openai.com", why: "the OpenAI API, with OPENAI_API_KEY below" }, GITHUB],
    optional_env: &[("OPENAI_API_KEY", Why { value: "env:OPENAI_API_KEY", why: "to use OpenAI models (allow api.openai.com too)" })],
    persistent_dirs: &[Why { value: "/root/.aider", why: "aider's caches, analytics choice and OAuth keys" }],
};

#[cfg(test)]
pub const ALL: [Preset; 3] = [CLAUDE, CODEX, AIDER];

impl Agent {
    pub fn preset(self) -> &'static Preset {
        match self {
            Agent::Claude => &CLAUDE,
            Agent::Codex => &CODEX,
            Agent::Aider => &AIDER,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_preset_is_consistent() {
        for preset in ALL {
            assert!(lazaret_core::config::is_valid_profile_name(preset.name));
            assert_eq!(preset.image(), format!("localhost/lazaret-{}:{}", preset.name, preset.version));
            for rule in preset.allow_egress {
                assert!(rule.value.parse::<lazaret_core::egress::EgressRule>().is_ok(), "{}", rule.value);
            }
            assert!(preset.entry_point.is_none() || preset.launcher.is_none());
        }
    }
}
