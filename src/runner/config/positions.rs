//! Where in the jobs file a problem is: the line of the key it is about, else of its job's
//! `[[job]]` header, for `check`'s `file:LINE:` lines and `--json`'s `line` and `key`; a parse
//! error's line and column; and the known key an unknown one most likely meant.
//!
//! The spans come from a second, lenient read of the same text (`toml::Spanned` keys): the
//! typed read in `parse.rs` stays as it is, and a file too broken for this read simply gets
//! no lines.
use super::problem::Problem;
use serde::de::IgnoredAny;
use serde::Deserialize;
use std::collections::BTreeMap;

type Keys = BTreeMap<toml::Spanned<String>, toml::Value>;

/// The lines of one `[[job]]` table.
#[derive(Debug, Clone, Default)]
pub(crate) struct JobLines {
    /// The `[[job]]` header (or the inline table's opening brace).
    pub header: usize,
    /// Each key's line.
    pub keys: BTreeMap<String, usize>,
}

/// The lines of a jobs file's top-level keys and of each job table, in file order.
#[derive(Debug, Clone, Default)]
pub(crate) struct Positions {
    top: BTreeMap<String, usize>,
    pub jobs: Vec<JobLines>,
}

#[derive(Deserialize)]
struct Jobs {
    #[serde(default)]
    job: Vec<toml::Spanned<Keys>>,
}

impl Positions {
    /// The positions in `text`; empty where it is not a TOML document of `[[job]]` tables.
    pub(crate) fn read(text: &str) -> Positions {
        // Line starts found once: a key's line is then a binary search, not a count of the
        // newlines before it (10,000 jobs took 51 s to check that way).
        let newlines: Vec<usize> = text
            .bytes()
            .enumerate()
            .filter_map(|(i, b)| (b == b'\n').then_some(i))
            .collect();
        let line = |offset: usize| newlines.partition_point(|&nl| nl < offset) + 1;
        let top = toml::from_str::<BTreeMap<toml::Spanned<String>, IgnoredAny>>(text)
            .map(|m| {
                m.keys()
                    .map(|k| (k.get_ref().clone(), line(k.span().start)))
                    .collect()
            })
            .unwrap_or_default();
        let jobs = toml::from_str::<Jobs>(text)
            .map(|d| {
                d.job
                    .iter()
                    .map(|t| JobLines {
                        header: line(t.span().start),
                        keys: t
                            .get_ref()
                            .keys()
                            .map(|k| (k.get_ref().clone(), line(k.span().start)))
                            .collect(),
                    })
                    .collect()
            })
            .unwrap_or_default();
        Positions { top, jobs }
    }

    /// Places a file-level problem (job `-`) at the top-level key it names, if any.
    pub(crate) fn place_top(&self, p: &mut Problem) {
        if p.at.is_some() {
            return;
        }
        // An `unknown key` of a table other than a job's (`[[notify]]`) is not a top-level key.
        let key = key_of(&p.what, self.top.keys().map(String::as_str));
        if let Some((key, line)) = key.and_then(|k| self.top.get(&k).map(|l| (k, *l))) {
            p.at = Some(super::problem::At {
                line,
                key: Some(key),
            });
        }
    }

    /// Places a problem of the job table at index `i`.
    pub(crate) fn place_job(&self, i: usize, p: &mut Problem) {
        if let (None, Some(t)) = (&p.at, self.jobs.get(i)) {
            p.at = Some(t.at(&p.what));
        }
    }
}

impl JobLines {
    /// The line of the key `what` is about (the header when that key is not written), and
    /// the key.
    pub(crate) fn at(&self, what: &str) -> super::problem::At {
        let known = super::job::JOB_KEYS.iter().copied();
        let key = key_of(what, self.keys.keys().map(String::as_str).chain(known));
        super::problem::At {
            line: key
                .as_ref()
                .and_then(|k| self.keys.get(k))
                .copied()
                .unwrap_or(self.header),
            key,
        }
    }
}

/// The key a problem's wording is about: the quoted name of an `unknown key "…"`, else the
/// first of `keys` that `what` names as a whole word (`invalid timezone`, `missing lease`,
/// `overlap = "queue" without queue_cap`).
pub(crate) fn key_of<'a>(what: &str, keys: impl Iterator<Item = &'a str>) -> Option<String> {
    if let Some(rest) = what.strip_prefix("unknown key \"") {
        return rest.split('"').next().map(str::to_string);
    }
    let word = |c: char| c.is_alphanumeric() || c == '_';
    keys.filter_map(|k| {
        what.match_indices(k)
            .find(|(i, _)| {
                let before = what[..*i].chars().next_back();
                let after = what[i + k.len()..].chars().next();
                !before.is_some_and(word) && !after.is_some_and(word)
            })
            .map(|(i, _)| (i, k))
    })
    .min()
    .map(|(_, k)| k.to_string())
}

/// The known key a typo was most likely meant to be.
pub(super) fn closest(key: &str) -> Option<&'static str> {
    super::job::JOB_KEYS
        .iter()
        .map(|k| (strsim::levenshtein(key, k), *k))
        .filter(|(d, _)| *d <= 2)
        .min()
        .map(|(_, k)| k)
}

/// The 1-based line and column of a byte offset in the file.
pub(super) fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before
        .rsplit('\n')
        .next()
        .map(|l| l.chars().count())
        .unwrap_or(0)
        + 1;
    (line, col)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_typo_names_the_key_two_edits_away_and_no_further() {
        assert_eq!(closest("overlpa"), Some("overlap"));
        assert_eq!(closest("schedul"), Some("schedule"));
        assert_eq!(closest("nothing-like-a-key"), None);
    }

    #[test]
    fn keys_are_found_as_whole_words() {
        let keys = ["overlap", "queue_cap", "timezone", "schedule", "every"];
        let k = |w: &str| key_of(w, keys.iter().copied());
        assert_eq!(k("invalid timezone").as_deref(), Some("timezone"));
        assert_eq!(k("invalid queue_cap 0").as_deref(), Some("queue_cap"));
        assert_eq!(
            k("overlap = \"queue\" without queue_cap").as_deref(),
            Some("overlap")
        );
        assert_eq!(k("timezone with every").as_deref(), Some("timezone"));
        assert_eq!(k("unknown key \"overlapp\"").as_deref(), Some("overlapp"));
        assert_eq!(k("empty thing"), None);
    }

    #[test]
    fn lines_of_keys_and_headers() {
        let p = Positions::read(
            "retain = \"90d\"\n\n[[job]]\nname = \"a\"\nlease = \"1m\"\n\n[[job]]\n# \
             b\nname = \"b\"\n",
        );
        assert_eq!(p.top.get("retain"), Some(&1));
        assert_eq!(p.jobs.len(), 2);
        assert_eq!((p.jobs[0].header, p.jobs[0].keys["lease"]), (3, 5));
        assert_eq!(p.jobs[1].at("missing lease").line, 7);
    }
}
