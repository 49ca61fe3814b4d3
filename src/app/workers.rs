//! The background tasks of the stream lifecycle that `App::start` starts: the listener of kills
//! from other processes, the credit meter and the simulcast senders.

use std::sync::Arc;

use super::App;

impl App {
    /// Hears the kills that disables in other processes send (Postgres; nothing on SQLite).
    pub(super) fn spawn_kill_listener(self: &Arc<Self>) {
        tokio::spawn(crate::services::kills::listen(Arc::downgrade(&self.streams), self.db.clone()));
    }

    /// Draws live time from the projects' credits (with billing on).
    pub(super) fn spawn_meter(self: &Arc<Self>) {
        tokio::spawn(crate::services::credits::run_meter(Arc::downgrade(&self.streams)));
    }

    /// Sends the pushes held here to their streams' simulcast targets.
    pub(super) fn spawn_simulcast(self: &Arc<Self>) {
        tokio::spawn(crate::media::egress::simulcast::run(Arc::downgrade(&self.simulcast)));
    }

    /// At shutdown, once the pushes have ended: charges the live time since the meter's last
    /// pass, so a clean stop loses none.
    pub async fn drain_meter(&self) {
        if let Err(e) = self.streams.meter().await {
            tracing::warn!(error = %e, "charging the last live time against credits");
        }
    }

    /// Push sessions (every protocol) open in this process now.
    pub fn push_sessions(&self) -> usize {
        self.streams.sessions.count()
    }
}
