//! The server's signing keys (see [`crate::domain::keyring`]).

use super::{Db, DbError};
use crate::domain::{new_id, random_token, time::now_ms};

impl Db {
    /// Every signing key, newest first; creates the first one when there is none. Two processes
    /// starting at once may each create one: both are kept, and both verify.
    pub async fn signing_keys(&self) -> Result<Vec<(String, Vec<u8>)>, DbError> {
        let load = || async {
            sqlx::query_as::<_, (String, String)>(
                "SELECT kid, secret FROM signing_keys ORDER BY created_at DESC, kid",
            )
            .fetch_all(self.pool())
            .await
        };
        let mut keys = load().await?;
        if keys.is_empty() {
            self.add_signing_key().await?;
            keys = load().await?;
        }
        Ok(keys.into_iter().map(|(kid, secret)| (kid, secret.into_bytes())).collect())
    }

    /// Adds a new key, which signs from the next start on (rotation).
    pub async fn add_signing_key(&self) -> Result<String, DbError> {
        let kid = new_id()[..8].to_string();
        sqlx::query("INSERT INTO signing_keys (kid, secret, created_at) VALUES ($1, $2, $3)")
            .bind(&kid)
            .bind(random_token(48))
            .bind(now_ms())
            .execute(self.pool())
            .await?;
        Ok(kid)
    }
}
