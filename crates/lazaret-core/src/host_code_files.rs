//! DECISIONS D4: files that editors, shells or build tools execute on the
//! host. Agent changes to them are listed as warnings when the user reviews
//! the agent branch.

/// Why a changed path deserves a warning, or `None`.
pub fn warning_for(path: &str) -> Option<&'static str> {
    let path = path.trim_start_matches("./");
    let file_name = path.rsplit('/').next().unwrap_or(path);
    let components: Vec<&str> = path.split('/').collect();
    let under = |directory: &str| components.iter().rev().skip(1).any(|component| *component == directory);
    if components.contains(&".git") {
        return Some("a nested .git directory: git on the host may read its configuration and hooks");
    }
    if under(".vscode") && (file_name == "tasks.json" || file_name == "settings.json" || file_name == "launch.json") {
        return Some("VS Code runs tasks and honours settings from this file when the folder is opened");
    }
    if under(".devcontainer") || file_name == ".devcontainer.json" {
        return Some("dev container definitions run commands when the folder is opened");
    }
    if under(".claude") || file_name == ".mcp.json" {
        return Some("agent tool configuration (hooks, MCP servers) runs commands on the host");
    }
    match file_name {
        ".envrc" => Some("direnv runs this file when you enter the directory"),
        ".nvim.lua" | ".nvimrc" | ".exrc" => Some("Neovim/Vim may execute this file when opening the directory (exrc)"),
        ".gitmodules" => Some("submodule definitions: URLs and update commands used by git on the host"),
        ".gitattributes" => Some("attributes can select filters and diff drivers configured on the host"),
        "package.json" => Some("npm/yarn/pnpm run its scripts on install, test and start"),
        "Makefile" | "makefile" | "GNUmakefile" => Some("make runs its recipes"),
        "build.rs" => Some("cargo runs build scripts on build, check and test"),
        "config.toml" | "config" if under(".cargo") => Some("cargo configuration can set rustc-wrapper and runners"),
        "pyproject.toml" | "setup.py" | "setup.cfg" | "conftest.py" => {
            Some("Python build and test tools execute project code from this file")
        }
        ".pre-commit-config.yaml" => Some("pre-commit runs the hooks it lists"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_the_files_of_d4() {
        for path in [
            ".vscode/tasks.json",
            ".vscode/settings.json",
            ".devcontainer/devcontainer.json",
            ".envrc",
            "sub/.envrc",
            ".nvim.lua",
            ".claude/settings.json",
            ".mcp.json",
            ".cargo/config.toml",
            "package.json",
            "web/package.json",
            "vendor/lib/.git/config",
            ".gitmodules",
            "build.rs",
        ] {
            assert!(warning_for(path).is_some(), "{path}");
        }
        for path in ["src/main.rs", "README.md", "config.toml", ".vscode/extensions.json", "docs/package.md", "gitmodules"] {
            assert!(warning_for(path).is_none(), "{path}");
        }
    }
}
