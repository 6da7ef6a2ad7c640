//! Who acts and where: the OS login user (never replaced by what the environment claims), the
//! actor every recorded decision stores, and this host's name as lease owners and attempt ids
//! carry it.

/// Who is acting, as every recorded decision stores it: the OS login user of our uid (and,
/// over SSH, the client address); when `EXACTLY_ACTOR` names someone else, that name first,
/// marked as claimed by the login user: `ceo (set by root)`. The environment can say anything,
/// so it never replaces what the OS says.
pub fn actor() -> String {
    actor_from(
        std::env::var("EXACTLY_ACTOR").ok().as_deref(),
        &os_user(),
        std::env::var("SSH_CLIENT").ok().as_deref(),
    )
}

/// [`actor`] from its parts: the claimed name, the OS user, `$SSH_CLIENT`.
pub fn actor_from(claimed: Option<&str>, os_user: &str, ssh_client: Option<&str>) -> String {
    let os = match ssh_client.and_then(|s| s.split_whitespace().next()) {
        Some(addr) => format!("{os_user}@{addr}"),
        None => os_user.to_string(),
    };
    match claimed.map(str::trim).filter(|c| !c.is_empty()) {
        Some(c) if c != os_user => format!("{c} (set by {os})"),
        _ => os,
    }
}

/// The login name of our real uid from the OS (`getpwuid_r`); `$USER` only when the uid has
/// no name (a container without /etc/passwd entry).
pub fn os_user() -> String {
    login_name().unwrap_or_else(user)
}

/// The login user: `$USER`, `$LOGNAME`, else the name of our uid.
pub fn user() -> String {
    std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .ok()
        .filter(|s| !s.is_empty())
        .or_else(login_name)
        .unwrap_or_else(|| "unknown".to_string())
}

/// The login name of our uid, for when the environment does not say (cron, tmux, sudo -i).
fn login_name() -> Option<String> {
    nix::unistd::User::from_uid(nix::unistd::getuid())
        .ok()
        .flatten()
        .map(|u| u.name)
}

/// The host identity recorded in attempt ids: `EXACTLY_HOST` (for containers that share a
/// database), else the host name. A sender's process is checked only on its own host.
pub fn host() -> String {
    std::env::var("EXACTLY_HOST")
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(hostname)
}

/// This machine's name, for lease owners and attempt records.
pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: buf is valid for its length; gethostname NUL-terminates on success.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr() as *mut libc::c_char, buf.len()) };
    if rc == 0 {
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        String::from_utf8_lossy(&buf[..end]).into_owned()
    } else {
        "localhost".to_string()
    }
}
