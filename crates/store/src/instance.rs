//! Which database a holder was handed its fencing tokens by, as a key for its memory of them
//! (the CLI's token memory): the same for a primary and its promoted standby, another for a
//! database made again under the same name.
use super::db::{args, Tx};
use super::{Conn, Store};
use exactly_words::Result;

/// The `exactly_meta` row a PostgreSQL database's instance is named by: a random number written
/// when its tables are made (and by the first holder that asks, on a database an older exactly
/// made). A standby copies it with the rest, so a promoted standby has the primary's.
pub(super) const INSTANCE_ROW: &str = "instance_id";

/// Writes the instance row unless there is one (`exactly init`, and the first writer after).
pub(super) fn record_instance(tx: &Tx<'_>) -> super::db::DbResult<()> {
    tx.exec(
        "INSERT INTO exactly_meta (name, value)
         VALUES (?1, (floor(random() * 9.0e18) + 1)::bigint)
         ON CONFLICT (name) DO NOTHING",
        args![INSTANCE_ROW],
    )?;
    Ok(())
}

impl Store {
    /// The database's identity for a holder's memory of its fencing tokens. PostgreSQL: the
    /// cluster's system identifier (`pg_control_system()`, kept by a streaming standby and its
    /// promotion), the database, the schema, and the instance row written when its tables were
    /// made, so a database dropped and made again under the same name is another. SQLite: the
    /// file's device and inode, and its birth time where the file system keeps one (a file
    /// deleted and made again may get the same inode).
    pub fn holder_identity(&mut self) -> Result<String> {
        if let Conn::Lite(_) = self.conn {
            return file_with_birth(&self.path);
        }
        let found = self.read(place_and_instance)?;
        let (place, instance) = match found {
            (place, Some(instance)) => (place, instance),
            // A database an older exactly made: the first holder to ask names it.
            (_, None) => {
                let (place, instance) = self.write(|tx| {
                    record_instance(tx)?;
                    place_and_instance(tx)
                })?;
                (place, instance.unwrap_or(0))
            }
        };
        Ok(format!("pg:{place}:{instance}"))
    }
}

/// `system_identifier:database:schema`, and the instance row if there is one.
fn place_and_instance(tx: &Tx<'_>) -> super::db::DbResult<(String, Option<i64>)> {
    tx.one(
        "SELECT (SELECT system_identifier::text FROM pg_control_system())
                || ':' || current_database() || ':' || current_schema(),
                (SELECT value FROM exactly_meta WHERE name = ?1)",
        args![INSTANCE_ROW],
        |r| Ok((r.get::<String>(0)?, r.get::<Option<i64>>(1)?)),
    )
}

/// A SQLite file's device, inode and birth time (nanoseconds since 1970; 0 where the file system
/// keeps none).
fn file_with_birth(path: &str) -> Result<String> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path)
        .map_err(|e| exactly_words::Error::io(format!("database {path}: {e}"), e))?;
    let born = m
        .created()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos());
    Ok(format!("sqlite:{}:{}:{born}", m.dev(), m.ino()))
}
