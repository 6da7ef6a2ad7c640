//! Shell completion: clap_complete's scripts, and job names and effect keys from the database
//! where a command wants one. The scripts call the hidden `exactly __complete jobs|effects`
//! (with the `--db` on the line being completed), which reads them through the library.
//!
//! Which arguments want a job or an effect key comes from the command tree: an argument named
//! `job` (`--job`, `exactly trigger JOB`) wants a job, one named `key` (`exactly approve KEY`)
//! an effect key, so a new command's arguments complete without touching this file.
use crate::snapshot::Snapshot;
use crate::Result;
use clap::{Args, ValueEnum};
use clap_complete::Shell;
use std::io::Write;

#[derive(Args, Debug)]
pub(crate) struct CompleteArgs {
    /// What to list, one a line.
    #[arg(value_enum)]
    pub what: Listed,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Listed {
    /// The jobs of the database (registered, or known by a lease), not retired.
    Jobs,
    /// The effect keys a person may act on: unknown effects and pending approvals.
    Effects,
}

impl Listed {
    fn of(arg_id: &str) -> Option<Listed> {
        match arg_id {
            "job" => Some(Listed::Jobs),
            "key" => Some(Listed::Effects),
            _ => None,
        }
    }
    fn word(self) -> &'static str {
        match self {
            Listed::Jobs => "jobs",
            Listed::Effects => "effects",
        }
    }
}

/// `exactly __complete jobs|effects`: nothing at all when the database cannot be read, so a
/// completion never prints an error into the command line being typed.
pub(super) fn complete_main(db: &Option<String>, a: CompleteArgs) -> Result<i32> {
    let Ok(mut store) = crate::open(db.as_deref(), crate::Access::ReadOnly) else {
        return Ok(0);
    };
    let Ok(snap) = Snapshot::read(&mut store) else {
        return Ok(0);
    };
    let mut names: Vec<&str> = match a.what {
        Listed::Jobs => snap
            .jobs
            .iter()
            .filter(|j| !j.retired)
            .map(|j| j.job_key.as_str())
            .collect(),
        Listed::Effects => snap
            .unknown
            .iter()
            .map(|e| e.effect_key.as_str())
            .chain(snap.pending_approvals.iter().map(|a| a.effect_key.as_str()))
            .collect(),
    };
    names.sort_unstable();
    names.dedup();
    let mut out = std::io::stdout().lock();
    for n in names {
        // A name with a line break would complete as two; such a name is refused anyway.
        if !n.contains(['\n', '\r']) {
            writeln!(out, "{n}")?;
        }
    }
    Ok(0)
}

/// A top-level subcommand's positional argument that wants a job or an effect key.
struct Positional {
    sub: String,
    listed: Listed,
}

/// The positionals of the visible top-level subcommands, and each one's options that take a
/// value (so a value is not taken for a positional).
fn positionals(cmd: &clap::Command) -> (Vec<Positional>, Vec<(String, Vec<String>)>) {
    let mut found = Vec::new();
    let mut valued = Vec::new();
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        let first = sub.get_positionals().next();
        if let Some(listed) = first.and_then(|a| Listed::of(a.get_id().as_str())) {
            found.push(Positional {
                sub: sub.get_name().to_string(),
                listed,
            });
        }
        let opts = sub
            .get_opts()
            .filter(|a| a.get_action().takes_values())
            .flat_map(|a| {
                a.get_long()
                    .map(|l| format!("--{l}"))
                    .into_iter()
                    .chain(a.get_short().map(|s| format!("-{s}")))
            })
            .collect();
        valued.push((sub.get_name().to_string(), opts));
    }
    (found, valued)
}

/// The completion script for `shell`: clap_complete's, with job names and effect keys added.
pub(super) fn script(shell: Shell, cmd: &clap::Command) -> Vec<u8> {
    let mut cmd = visible_only(cmd);
    let mut buf = Vec::new();
    clap_complete::generate(shell, &mut cmd, "exactly", &mut buf);
    let text = String::from_utf8_lossy(&buf).into_owned();
    let (found, valued) = positionals(&cmd);
    match shell {
        Shell::Bash => format!("{text}{}", bash(&found, &valued)).into_bytes(),
        Shell::Zsh => zsh(&text).into_bytes(),
        Shell::Fish => format!("{}{}", fish_lines(&text), fish(&found)).into_bytes(),
        _ => buf,
    }
}

/// The command tree without its hidden subcommands (the test tools, `__complete`), which
/// clap_complete would otherwise offer.
fn visible_only(cmd: &clap::Command) -> clap::Command {
    let mut out = clap::Command::new(cmd.get_name().to_string())
        .args(cmd.get_arguments().cloned())
        .groups(cmd.get_groups().cloned())
        .subcommands(
            cmd.get_subcommands()
                .filter(|s| !s.is_hide_set())
                .map(visible_only),
        );
    if let Some(about) = cmd.get_about() {
        out = out.about(about.clone());
    }
    if let Some(version) = cmd.get_version() {
        out = out.version(version.to_string());
    }
    out
}

fn bash(found: &[Positional], valued: &[(String, Vec<String>)]) -> String {
    let valued_cases: Vec<String> = valued
        .iter()
        .flat_map(|(sub, opts)| opts.iter().map(move |o| format!("{sub}:{o}")))
        .collect();
    let case_of = |l: Listed| {
        found
            .iter()
            .filter(|p| p.listed == l)
            .map(|p| p.sub.clone())
            .collect::<Vec<_>>()
            .join("|")
    };
    let mut arms = String::new();
    for l in [Listed::Jobs, Listed::Effects] {
        let subs = case_of(l);
        if !subs.is_empty() {
            arms.push_str(&format!("            {subs}) kind={} ;;\n", l.word()));
        }
    }
    let valued_cases = if valued_cases.is_empty() {
        "--db".to_string()
    } else {
        valued_cases.join("|")
    };
    format!(
        r#"
# Job names and effect keys from the database: `exactly __complete jobs|effects`, with the
# --db given on the line.
_exactly_dynamic() {{
    local cur="${{COMP_WORDS[COMP_CWORD]}}" prev="" sub="" valued="" kind="" w i pos=0
    local -a db=()
    (( COMP_CWORD > 0 )) && prev="${{COMP_WORDS[COMP_CWORD-1]}}"
    for (( i = 1; i < COMP_CWORD; i++ )); do
        w="${{COMP_WORDS[i]}}"
        case "$w" in
            --db) db=(--db "${{COMP_WORDS[i+1]}}"); (( i + 1 == COMP_CWORD )) && valued="$w"; (( i++ )); continue ;;
            --db=*) db=(--db "${{w#--db=}}"); continue ;;
        esac
        if [[ -z "$sub" ]]; then
            [[ "$w" != -* ]] && sub="$w"
            continue
        fi
        case "$sub:$w" in
            {valued_cases}) (( i + 1 == COMP_CWORD )) && valued="$w"; (( i++ )); continue ;;
        esac
        [[ "$w" != -* ]] && (( pos++ ))
    done
    if [[ "$prev" == --job ]]; then
        kind=jobs
    elif [[ -z "$valued" && "$cur" != -* && $pos -eq 0 ]]; then
        case "$sub" in
{arms}        esac
    fi
    if [[ -n "$kind" ]]; then
        local IFS=$'\n'
        COMPREPLY=( $(compgen -W "$("${{COMP_WORDS[0]}}" "${{db[@]}}" __complete "$kind" 2>/dev/null)" -- "$cur") )
        return 0
    fi
    _exactly "$@"
}}
if [[ "${{BASH_VERSINFO[0]}}" -eq 4 && "${{BASH_VERSINFO[1]}}" -ge 4 || "${{BASH_VERSINFO[0]}}" -gt 4 ]]; then
    complete -F _exactly_dynamic -o nosort -o bashdefault -o default exactly
else
    complete -F _exactly_dynamic -o bashdefault -o default exactly
fi
"#
    )
}

const ZSH_HELPERS: &str = r#"# Job names and effect keys from the database: `exactly __complete jobs|effects`.
_exactly_listed() {
    local -a db items
    local i
    for (( i = 1; i < ${#words}; i++ )); do
        [[ ${words[i]} == --db ]] && db=(--db "${words[i+1]}")
        [[ ${words[i]} == --db=* ]] && db=(--db "${words[i]#--db=}")
    done
    items=(${(f)"$(exactly $db __complete $1 2>/dev/null)"})
    compadd -a items
}
_exactly_jobs() { _exactly_listed jobs }
_exactly_effects() { _exactly_listed effects }

"#;

/// clap_complete's zsh script, each job and effect-key argument completed by a helper.
fn zsh(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let listed = if line.starts_with("':job -- ") || line.contains("]:JOB:_default'") {
            Some(Listed::Jobs)
        } else if line.starts_with("':key -- ") {
            Some(Listed::Effects)
        } else {
            None
        };
        let line = match (listed, line.rfind(":_default'")) {
            (Some(l), Some(at)) => format!(
                "{}:_exactly_{}{}",
                &line[..at],
                l.word(),
                &line[at + ":_default".len()..]
            ),
            _ => line.to_string(),
        };
        if line.starts_with("if [ \"$funcstack[1]\" = \"_exactly\" ]") {
            out.push_str(ZSH_HELPERS);
        }
        out.push_str(&line);
        out.push('\n');
    }
    out
}

/// clap_complete's fish script, every `--job` completed with the jobs.
fn fish_lines(text: &str) -> String {
    text.lines()
        .map(|l| {
            if l.starts_with("complete -c exactly ") && l.contains(" -l job ") {
                format!("{l} -f -a \"(__fish_exactly_complete jobs)\"\n")
            } else {
                format!("{l}\n")
            }
        })
        .collect()
}

fn fish(found: &[Positional]) -> String {
    let mut s = String::from(
        r#"# Job names and effect keys from the database: `exactly __complete jobs|effects`.
function __fish_exactly_complete
    set -l tokens (commandline -opc)
    set -l db
    if set -l i (contains -i -- --db $tokens); and test (count $tokens) -gt $i
        set db --db $tokens[(math $i + 1)]
    end
    $tokens[1] $db __complete $argv 2>/dev/null
end
"#,
    );
    for p in found {
        s.push_str(&format!(
            "complete -c exactly -n \"__fish_exactly_using_subcommand {}\" -f -a \
             \"(__fish_exactly_complete {})\"\n",
            p.sub,
            p.listed.word()
        ));
    }
    s
}
