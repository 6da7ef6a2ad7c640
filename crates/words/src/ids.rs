//! The three identities a call could swap for a neighbour of the same type: a job's name
//! ([`JobName`]), an effect key ([`EffectKey`]) and a lease's fencing token ([`Token`]).
//!
//! The library's operations take these where a mix-up would otherwise compile: `(job, owner)`,
//! `(job, by)`, `(key, by)`, `(job, run_id, token)`. A caller converts once, on purpose
//! (`JobName::from("invoices")`, `Token::from(7)`); a swapped pair does not compile. The store
//! below binds plain `&str` and `i64` to SQL and never passes one for the other; of what it
//! hands back, only a value meant to be passed on is typed (a fired run's `Started::token`).
//! Rows read back type an effect key where the store reads it (`LedgerRow`, the approval,
//! open-effect, event and done rows); their other names and numbers (`LeaseRow`'s job, a token)
//! stay plain: records to show, not arguments.
use serde::Serialize;
use std::fmt;

/// A lease's fencing token: issued by a claim, only ever higher for the same job, and carried by
/// every write made under the lease (a lower one is refused and counted as fenced).
///
/// A number is not a token: a row id or a count passed where the token goes does not compile
/// (the library's `lease::release` shows it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct Token(i64);

impl Token {
    /// The token as the database stores it.
    pub const fn get(self) -> i64 {
        self.0
    }
}

impl From<i64> for Token {
    fn from(token: i64) -> Token {
        Token(token)
    }
}

impl From<Token> for i64 {
    fn from(token: Token) -> i64 {
        token.0
    }
}

/// Lets a test say `assert_eq!(token, 3)`.
impl PartialEq<i64> for Token {
    fn eq(&self, other: &i64) -> bool {
        self.0 == *other
    }
}

impl PartialEq<Token> for i64 {
    fn eq(&self, other: &Token) -> bool {
        *self == other.0
    }
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Text newtypes: made from a `&str` or `String` on purpose, read back as `&str`.
macro_rules! text_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            /// The text itself.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl From<&str> for $name {
            fn from(text: &str) -> $name {
                $name(text.to_string())
            }
        }

        impl From<String> for $name {
            fn from(text: String) -> $name {
                $name(text)
            }
        }

        impl From<&String> for $name {
            fn from(text: &String) -> $name {
                $name(text.clone())
            }
        }

        /// Never fails: a command-line argument is taken as written (clap parses with it).
        impl std::str::FromStr for $name {
            type Err = std::convert::Infallible;
            fn from_str(text: &str) -> Result<$name, Self::Err> {
                Ok($name(text.to_string()))
            }
        }

        impl From<$name> for String {
            fn from(id: $name) -> String {
                id.0
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        /// So it can be handed to a child process's environment.
        impl AsRef<std::ffi::OsStr> for $name {
            fn as_ref(&self) -> &std::ffi::OsStr {
                self.0.as_ref()
            }
        }

        impl std::ops::Deref for $name {
            type Target = str;
            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.0 == other
            }
        }

        impl PartialEq<String> for $name {
            fn eq(&self, other: &String) -> bool {
                self.0 == *other
            }
        }

        impl PartialEq<$name> for String {
            fn eq(&self, other: &$name) -> bool {
                *self == other.0
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.0 == *other
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

text_id!(
    /// A job's name, as the jobs file, the lease and the ledger spell it. Not checked here:
    /// the library's `lease::claim` refuses a name that cannot name a job
    /// (`lease::job_name_problem`).
    ///
    /// The owner and the job were both `&str`, and swapped they claimed a lease for a job named
    /// after the worker. Now the swap does not compile (`lease::claim` shows it).
    JobName
);

/// The empty name: what a job's row holds before the store fills it in (the default of
/// `store::rows::JobFacts`).
impl Default for JobName {
    fn default() -> Self {
        JobName::from(String::new())
    }
}

text_id!(
    /// An effect's identity: 32 hex characters derived from the facts acted on
    /// ([`crate::key::effect_key`]), the idempotency key the far side is given.
    ///
    /// An approval names the effect and who decides; swapped, they no longer compile (the
    /// library's `approval::approve` shows it).
    EffectKey
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_reads_back_and_compares_with_its_number() {
        let t = Token::from(7);
        assert_eq!(t, 7);
        assert_eq!(i64::from(t), 7);
        assert_eq!(t.to_string(), "7");
        assert!(Token::from(8) > t);
    }

    #[test]
    fn a_name_reads_back_as_its_text() {
        let j = JobName::from("invoices");
        assert_eq!(j, "invoices");
        assert_eq!(j.as_str(), "invoices");
        assert_eq!(format!("{j}"), "invoices");
        assert_eq!(String::from(EffectKey::from("ab".to_string())), "ab");
    }
}
