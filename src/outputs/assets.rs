//! The man pages and shell completions the packages ship, rendered from the
//! CLI's own definition (`rdma-node-agent generate-assets DIR`): a page for the
//! command and one for each visible subcommand (`rdma-node-agent-check(8)` …),
//! which the main page names, and bash, zsh and fish completions.

/// Each asset's file name and bytes.
pub fn render(cmd: clap::Command, bin: &str) -> std::io::Result<Vec<(String, Vec<u8>)>> {
    let mut out = Vec::new();
    // Like clap_mangen::generate_to, in section 8: `help` gets no page (each
    // page is the help), so the main page does not name one.
    let mut man = cmd.clone().disable_help_subcommand(true);
    man.build();
    pages(&man, &mut out)?;
    for (shell, file) in [
        (clap_complete::Shell::Bash, format!("{bin}.bash")),
        (clap_complete::Shell::Zsh, format!("_{bin}")),
        (clap_complete::Shell::Fish, format!("{bin}.fish")),
    ] {
        let mut bytes = Vec::new();
        clap_complete::generate(shell, &mut cmd.clone(), bin, &mut bytes);
        out.push((file, bytes));
    }
    Ok(out)
}

fn pages(cmd: &clap::Command, out: &mut Vec<(String, Vec<u8>)>) -> std::io::Result<()> {
    let page = clap_mangen::Man::new(cmd.clone()).section("8");
    let mut bytes = Vec::new();
    page.render(&mut bytes)?;
    out.push((page.get_filename(), bytes));
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        pages(sub, out)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(clap::Parser)]
    #[command(name = "tool", version)]
    struct Cli {
        #[command(subcommand)]
        command: Sub,
    }

    #[derive(clap::Subcommand)]
    enum Sub {
        /// Looks.
        Look,
        #[command(hide = true)]
        Secret,
    }

    #[test]
    fn every_page_the_main_page_names_is_rendered() {
        use clap::CommandFactory;
        let assets = render(Cli::command(), "tool").unwrap();
        let names: Vec<&str> = assets.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            ["tool.8", "tool-look.8", "tool.bash", "_tool", "tool.fish"]
        );
        let main = String::from_utf8_lossy(&assets[0].1);
        assert!(main.contains("tool\\-look(8)"), "{main}");
        assert!(
            !main.contains("help(8)") && !main.contains("secret"),
            "{main}"
        );
    }
}
