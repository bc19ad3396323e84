//! Files generated from the CLI definition itself, so they cannot drift from
//! it: shell completions (`lazaret completions SHELL`) and man pages
//! (`lazaret man DIR`: `lazaret.1` and one `lazaret-<command>.1` per
//! subcommand, as git names its pages).

use std::path::Path;

use anyhow::{Context, Result};
use clap::CommandFactory;

use crate::cli::Cli;

pub fn completions(shell: clap_complete::Shell) -> Result<u8> {
    let mut command = Cli::command();
    clap_complete::generate(shell, &mut command, "lazaret", &mut std::io::stdout());
    Ok(0)
}

pub fn man_pages(dir: &Path) -> Result<u8> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut command = Cli::command();
    command.build();
    let mut written = 0usize;
    write_page(dir, &command, "lazaret", &mut written)?;
    eprintln!("lazaret: wrote {written} man pages into {}", dir.display());
    Ok(0)
}

/// One page for `command` (named `name`), then one for each visible subcommand.
fn write_page(dir: &Path, command: &clap::Command, name: &str, written: &mut usize) -> Result<()> {
    let page = command.clone().name(name.to_owned());
    let mut bytes = Vec::new();
    clap_mangen::Man::new(page).render(&mut bytes)?;
    let path = dir.join(format!("{name}.1"));
    std::fs::write(&path, bytes).with_context(|| format!("cannot write {}", path.display()))?;
    *written += 1;
    for subcommand in command.get_subcommands().filter(|subcommand| !subcommand.is_hide_set()) {
        if subcommand.get_name() == "help" {
            continue;
        }
        write_page(dir, subcommand, &format!("{name}-{}", subcommand.get_name()), written)?;
    }
    Ok(())
}
