//! `exactly man`: the man pages. `exactly(1)`, one page per subcommand (`exactly-effect(1)`,
//! `exactly-lease-claim(1)`, …: every name a page points at exists) and the jobs file's
//! `exactly-jobs(5)`, each with EXIT STATUS, ENVIRONMENT, FILES and SEE ALSO. clap_mangen
//! renders what clap knows (synopsis, options, examples); `manual.rs` says the rest.
use super::manual::{self, roff, section};
use crate::{Error, Result};
use clap::{Args, CommandFactory};
use std::io::Write;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub(crate) struct ManArgs {
    /// One page instead of exactly(1): a subcommand (effect, lease-claim) or a page's name
    /// (exactly-effect, exactly-jobs.5 for the jobs file).
    pub page: Option<String>,
    /// Write every page under DIR/man1 and DIR/man5 (e.g. /usr/local/share/man) instead.
    #[arg(long, value_name = "DIR", conflicts_with = "page")]
    pub dir: Option<PathBuf>,
}

/// One man page: its name, section and what it renders.
struct Page {
    name: String,
    section: &'static str,
    /// The subcommand's path (`lease claim`; `` for exactly(1)); None for the jobs file.
    path: Option<String>,
    cmd: Option<clap::Command>,
}

/// Every page, exactly(1) first.
fn pages() -> Vec<Page> {
    let mut root = super::Cli::command().disable_help_subcommand(true);
    root.build();
    let mut out = Vec::new();
    walk(&root, "", &mut out);
    out.push(Page {
        name: "exactly-jobs".into(),
        section: "5",
        path: None,
        cmd: None,
    });
    out
}

fn walk(cmd: &clap::Command, path: &str, out: &mut Vec<Page>) {
    out.push(Page {
        name: cmd
            .get_display_name()
            .unwrap_or_else(|| cmd.get_name())
            .to_string(),
        section: "1",
        path: Some(path.to_string()),
        cmd: Some(cmd.clone()),
    });
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        let sub_path = if path.is_empty() {
            sub.get_name().to_string()
        } else {
            format!("{path} {}", sub.get_name())
        };
        walk(sub, &sub_path, out);
    }
}

pub(super) fn man_main(a: ManArgs) -> Result<i32> {
    let pages = pages();
    if let Some(dir) = a.dir {
        for p in &pages {
            let folder = dir.join(format!("man{}", p.section));
            std::fs::create_dir_all(&folder).map_err(|e| write_error(&folder, e))?;
            let file = folder.join(format!("{}.{}", p.name, p.section));
            let mut f = std::fs::File::create(&file).map_err(|e| write_error(&file, e))?;
            render(p, &pages, &mut f).map_err(|e| write_error(&file, e))?;
        }
        println!("wrote {} man pages under {}", pages.len(), dir.display());
        return Ok(0);
    }
    let wanted = a.page.as_deref().unwrap_or("exactly");
    let page = find(&pages, wanted).ok_or_else(|| {
        Error::Usage(format!(
            "no man page {}: give a subcommand (effect, lease-claim) or a page (exactly-jobs.5)",
            crate::sanitize::inert(wanted)
        ))
    })?;
    let mut out = std::io::stdout().lock();
    render(page, &pages, &mut out)?;
    Ok(0)
}

fn write_error(path: &std::path::Path, e: std::io::Error) -> Error {
    Error::Usage(format!("cannot write {}: {e}", path.display()))
}

/// `effect`, `lease-claim`, `lease claim`, `exactly-effect`, `exactly-effect.1`,
/// `exactly-jobs.5`: section 1 first when a name is in both.
fn find<'a>(pages: &'a [Page], wanted: &str) -> Option<&'a Page> {
    let (stem, section) = match wanted.rsplit_once('.') {
        Some((s, n @ ("1" | "5"))) => (s, Some(n)),
        _ => (wanted, None),
    };
    let stem = stem.replace(' ', "-");
    let name = if stem == "exactly" || stem.starts_with("exactly-") {
        stem
    } else {
        format!("exactly-{stem}")
    };
    pages
        .iter()
        .filter(|p| p.name == name && section.is_none_or(|s| s == p.section))
        .min_by_key(|p| p.section)
}

/// The page, with the preamble clap_mangen repeats before each section it renders once.
fn render(page: &Page, pages: &[Page], w: &mut dyn Write) -> std::io::Result<()> {
    let mut text = Vec::new();
    render_sections(page, pages, &mut text)?;
    let text = String::from_utf8_lossy(&text);
    let mut seen = std::collections::HashSet::new();
    for line in text.lines() {
        let preamble = line.starts_with(".ie \\n(.g") || line.starts_with(".el .ds Aq");
        if !preamble || seen.insert(line) {
            writeln!(w, "{line}")?;
        }
    }
    w.flush()
}

fn render_sections(page: &Page, pages: &[Page], w: &mut dyn Write) -> std::io::Result<()> {
    let (Some(cmd), Some(path)) = (&page.cmd, &page.path) else {
        super::man_jobs::render(w)?;
        return see_also(page, pages, w);
    };
    let man = clap_mangen::Man::new(cmd.clone())
        .section(page.section)
        .source(format!("exactly {}", env!("CARGO_PKG_VERSION")))
        .manual("exactly");
    man.render_title(w)?;
    man.render_name_section(w)?;
    man.render_synopsis_section(w)?;
    man.render_description_section(w)?;
    if cmd.get_arguments().any(|a| !a.is_hide_set()) {
        man.render_options_section(w)?;
    }
    if cmd.get_subcommands().any(|s| !s.is_hide_set()) {
        man.render_subcommands_section(w)?;
    }
    if cmd.get_after_help().is_some() {
        man.render_extra_section(w)?;
    }
    section(w, "EXIT STATUS", manual::exit_codes(path))?;
    section(w, "ENVIRONMENT", manual::ENVIRONMENT)?;
    section(w, "FILES", manual::FILES)?;
    see_also(page, pages, w)
}

/// exactly(1) points at every page; a subcommand's page at exactly(1), its own subcommands'
/// pages and the jobs file's; the jobs file's at the pages that read it.
fn see_also(page: &Page, pages: &[Page], w: &mut dyn Write) -> std::io::Result<()> {
    let refs: Vec<&Page> = match &page.path {
        Some(p) if p.is_empty() => pages.iter().filter(|o| o.name != page.name).collect(),
        Some(p) => pages
            .iter()
            .filter(|o| match &o.path {
                Some(op) => {
                    op.is_empty()
                        || op
                            .strip_prefix(p.as_str())
                            .is_some_and(|rest| rest.starts_with(' ') && !rest[1..].contains(' '))
                }
                None => true,
            })
            .collect(),
        None => pages
            .iter()
            .filter(|o| {
                matches!(
                    o.path.as_deref(),
                    Some("" | "run" | "check" | "trigger" | "backfill")
                )
            })
            .collect(),
    };
    writeln!(w, ".SH \"SEE ALSO\"")?;
    let names: Vec<String> = refs
        .iter()
        .map(|p| format!("\\fB{}\\fR({})", roff(&p.name), p.section))
        .collect();
    writeln!(w, "{}", names.join(", "))
}
