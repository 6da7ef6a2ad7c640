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
pub const LEGACY_DEFAULT: &str = "exactly.db";

/// `$XDG_STATE_HOME/exactly/exactly.db`, else `~/.local/state/exactly/exactly.db`; None when
/// neither variable is set (or not absolute, as the XDG spec requires).
pub fn xdg_default() -> Option<String> {
    Some(
        xdg_state_dir()?
            .join("exactly.db")
            .to_string_lossy()
            .into_owned(),
    )
}

/// exactly's XDG state folder: `$XDG_STATE_HOME/exactly`, else `~/.local/state/exactly`; None
/// when neither variable is set (or not absolute, as the XDG spec requires).
pub fn xdg_state_dir() -> Option<std::path::PathBuf> {
    let absolute = |v: std::ffi::OsString| {
        let p = std::path::PathBuf::from(v);
        p.is_absolute().then_some(p)
    };
    let state = std::env::var_os("XDG_STATE_HOME")
        .and_then(absolute)
        .or_else(|| {
            std::env::var_os("HOME")
                .and_then(absolute)
                .map(|h| h.join(".local").join("state"))
        })?;
    Some(state.join("exactly"))
}
