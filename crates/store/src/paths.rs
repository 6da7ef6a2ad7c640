//! Where the database and exactly's other files are by default: `--db`, `$EXACTLY_DB`,
//! `./exactly.db`, or the XDG state folder.

/// Where the database is: `--db`, else `$EXACTLY_DB`, else `./exactly.db`.
pub fn default_path(flag: Option<&str>) -> String {
    flag.map(str::to_string)
        .or_else(|| std::env::var("EXACTLY_DB").ok().filter(|s| !s.is_empty()))
        .unwrap_or_else(|| {
            // An `exactly.db` in the working folder (the old default) is still used, so an
            // existing setup keeps its database; otherwise the XDG state folder.
            if std::path::Path::new(LEGACY_DEFAULT).exists() {
                return LEGACY_DEFAULT.to_string();
            }
            xdg_default().unwrap_or_else(|| LEGACY_DEFAULT.to_string())
        })
}

/// The database the old versions used when neither `--db` nor `EXACTLY_DB` said one.
pub(crate) const LEGACY_DEFAULT: &str = "exactly.db";

/// `$XDG_STATE_HOME/exactly/exactly.db`, else `~/.local/state/exactly/exactly.db`; None when
/// the OS knows no home folder.
pub(crate) fn xdg_default() -> Option<String> {
    Some(
        xdg_state_dir()?
            .join("exactly.db")
            .to_string_lossy()
            .into_owned(),
    )
}

/// exactly's XDG state folder: `$XDG_STATE_HOME/exactly`, else `~/.local/state/exactly` (the
/// `dirs` crate's state folder: an XDG value that is not absolute is ignored, as the spec
/// requires); None when the OS knows no home folder.
pub fn xdg_state_dir() -> Option<std::path::PathBuf> {
    Some(dirs::state_dir()?.join("exactly"))
}
