//! Secrets that must be recoverable (playback signing keys, webhook secrets, the push verifiers
//! that Adobe authentication needs, the push passwords that SRT's passphrase needs, simulcast targets' URLs) are kept sealed under the master key
//! ([`MasterKey::seal`], `context` naming the row), like content keys: a copy of the database
//! alone reveals none of them. Databases written before sealing are sealed in place at start.

use super::{Db, DbError};
use crate::domain::content_key::{is_sealed, MasterKey, UnwrapError};

pub fn signing_context(kid: &str) -> String {
    format!("signing-key:{kid}")
}

pub fn webhook_context(webhook_id: &str) -> String {
    format!("webhook-secret:{webhook_id}")
}

pub fn push_context(stream_id: &str) -> String {
    format!("push-verifier:{stream_id}")
}

pub fn simulcast_context(target_id: &str) -> String {
    format!("simulcast-url:{target_id}")
}

pub fn push_secret_context(stream_id: &str) -> String {
    format!("push-secret:{stream_id}")
}

/// A stored secret in the clear: opened when sealed, as it is when not sealed yet (a row written
/// before sealing, between a start and its in-place sealing).
pub fn open(master: &MasterKey, stored: &str, context: &str) -> Result<String, UnwrapError> {
    if is_sealed(stored) {
        master.open_text(stored, context)
    } else {
        Ok(stored.to_string())
    }
}

/// The stream's push verifier, opened from its sealed form; `None` (no push is authorised) when
/// it does not open, e.g. under another master key.
pub fn push_verifier(master: &MasterKey, stream: &super::streams::StreamRow) -> Option<String> {
    match open(master, &stream.push_verifier, &push_context(&stream.id)) {
        Ok(v) => Some(v),
        Err(e) => {
            tracing::error!(stream = %stream.id, error = %e, "the push verifier does not open");
            None
        }
    }
}

/// Whether `password` is the stream's current push password (constant time).
pub fn push_password_ok(master: &MasterKey, stream: &super::streams::StreamRow, password: &str) -> bool {
    push_verifier(master, stream).is_some_and(|verifier| {
        crate::domain::stream::push_password_matches(
            &stream.push_username,
            &stream.push_salt,
            password,
            &verifier,
        )
    })
}

/// The stream's push password in the clear (SRT's passphrase): `None` when the stream has none
/// stored (created before SRT ingest; a rotation stores one) or it does not open.
pub fn push_secret(master: &MasterKey, stream: &super::streams::StreamRow) -> Option<String> {
    let sealed = stream.push_secret.as_deref()?;
    match open(master, sealed, &push_secret_context(&stream.id)) {
        Ok(v) => Some(v),
        Err(e) => {
            tracing::error!(stream = %stream.id, error = %e, "the push secret does not open");
            None
        }
    }
}

/// Where secrets are sealed: a table, its key column, the column holding the secret, and the
/// secret's context.
pub struct SealedColumn {
    pub table: &'static str,
    pub id: &'static str,
    pub column: &'static str,
    pub context: fn(&str) -> String,
}

/// Every column of the database that holds a sealed secret.
pub const SEALED_COLUMNS: [SealedColumn; 5] = [
    SealedColumn { table: "signing_keys", id: "kid", column: "secret", context: signing_context },
    SealedColumn { table: "webhooks", id: "id", column: "secret", context: webhook_context },
    SealedColumn { table: "streams", id: "id", column: "push_verifier", context: push_context },
    SealedColumn { table: "streams", id: "id", column: "push_secret", context: push_secret_context },
    SealedColumn { table: "simulcast_targets", id: "id", column: "url", context: simulcast_context },
];

impl Db {
    /// Seals every secret still in the clear. Each row is rewritten only if it still holds the
    /// clear value read, so processes starting together do not seal twice. Returns how many.
    pub async fn seal_legacy_secrets(&self, master: &MasterKey) -> Result<usize, DbError> {
        let mut sealed = 0;
        for SealedColumn { table, id, column, context } in &SEALED_COLUMNS {
            let rows: Vec<(String, String)> =
                sqlx::query_as(&format!("SELECT {id}, {column} FROM {table} WHERE {column} NOT LIKE 'v1.%'"))
                    .fetch_all(self.pool())
                    .await?;
            for (key, clear) in rows.into_iter().filter(|(_, v)| !is_sealed(v)) {
                let done = sqlx::query(&format!(
                    "UPDATE {table} SET {column} = $1 WHERE {id} = $2 AND {column} = $3"
                ))
                .bind(master.seal(clear.as_bytes(), &context(&key)))
                .bind(&key)
                .bind(&clear)
                .execute(self.pool())
                .await?;
                sealed += done.rows_affected() as usize;
            }
        }
        Ok(sealed)
    }
}
