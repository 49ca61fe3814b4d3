//! The background tasks of the stream lifecycle that `App::start` starts: the listener of kills
//! from other processes (Postgres).

use std::sync::Arc;

use super::App;

impl App {
    /// Hears the kills that disables in other processes send (Postgres; nothing on SQLite).
    pub(super) fn spawn_kill_listener(self: &Arc<Self>) {
        tokio::spawn(crate::services::kills::listen(Arc::downgrade(&self.streams), self.db.clone()));
    }

    /// Push sessions (every protocol) open in this process now.
    pub fn push_sessions(&self) -> usize {
        self.streams.sessions.count()
    }
}
