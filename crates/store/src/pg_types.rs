//! How values cross to and from PostgreSQL: SQLite's placeholders in PostgreSQL's words, each
//! parameter converted to the type the server inferred for it, and columns read back as the
//! store's [`Value`]s.
use super::db_values::{Arg, DbError, DbResult};
use postgres::types::{ToSql, Type};
use postgres::Statement;

/// SQLite's `?N` placeholders as PostgreSQL's `$N` (outside quoted text and names).
pub(super) fn placeholders(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut quote: Option<char> = None;
    for c in sql.chars() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if c == '\'' || c == '"' => quote = Some(c),
            None if c == '?' => {
                out.push('$');
                continue;
            }
            None => {}
        }
        out.push(c);
    }
    out
}

/// A statement's parameters as the client passes them.
pub(super) type Params = Vec<Box<dyn ToSql + Sync>>;

pub(super) fn refs(p: &Params) -> Vec<&(dyn ToSql + Sync)> {
    p.iter().map(|b| b.as_ref()).collect()
}

/// Each parameter converted to the type the server inferred for its placeholder.
pub(super) fn bind(stmt: &Statement, args: &[Arg<'_>]) -> DbResult<Params> {
    let types = stmt.params();
    if types.len() > args.len() {
        return Err(DbError::Other(format!(
            "statement takes {} parameters, given {}",
            types.len(),
            args.len()
        )));
    }
    types
        .iter()
        .zip(args)
        .map(|(ty, a)| convert(ty, a))
        .collect()
}

fn convert(ty: &Type, a: &Arg<'_>) -> DbResult<Box<dyn ToSql + Sync>> {
    let bad = || DbError::Other(format!("cannot pass {a:?} as {ty}"));
    let int = || -> DbResult<Option<i64>> {
        match a {
            Arg::Null => Ok(None),
            Arg::Int(i) => Ok(Some(*i)),
            Arg::Text(s) => s.trim().parse().map(Some).map_err(|_| bad()),
            Arg::Bytes(_) => Err(bad()),
        }
    };
    Ok(match *ty {
        Type::INT8 => Box::new(int()?),
        Type::INT4 => Box::new(
            int()?
                .map(|i| i32::try_from(i).map_err(|_| bad()))
                .transpose()?,
        ),
        Type::INT2 => Box::new(
            int()?
                .map(|i| i16::try_from(i).map_err(|_| bad()))
                .transpose()?,
        ),
        Type::BOOL => Box::new(int()?.map(|i| i != 0)),
        Type::FLOAT8 | Type::FLOAT4 => {
            let f = match a {
                Arg::Null => None,
                Arg::Int(i) => Some(*i as f64),
                _ => return Err(bad()),
            };
            if *ty == Type::FLOAT4 {
                Box::new(f.map(|f| f as f32))
            } else {
                Box::new(f)
            }
        }
        Type::BYTEA => Box::new(match a {
            Arg::Null => None,
            Arg::Bytes(b) => Some(b.to_vec()),
            Arg::Text(s) => Some(s.as_bytes().to_vec()),
            _ => return Err(bad()),
        }),
        // PostgreSQL's text holds no NUL byte: it is stored as U+FFFD (a command's exact bytes
        // are kept in `response_raw`, a bytea).
        _ => Box::new(match a {
            Arg::Null => None,
            Arg::Text(s) if s.contains('\0') => Some(s.replace('\0', "\u{FFFD}")),
            Arg::Text(s) => Some(s.to_string()),
            Arg::Int(i) => Some(i.to_string()),
            Arg::Bytes(b) => Some(String::from_utf8_lossy(b).replace('\0', "\u{FFFD}")),
        }),
    })
}
