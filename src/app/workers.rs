//! The background tasks of the stream lifecycle that `App::start` starts (the listener of kills
//! from other processes, the credit meter) and what `/metrics` shows of them.

use std::fmt::Write;
use std::sync::Arc;

use super::App;
use crate::config::Billing;

impl App {
    /// Hears the kills that disables in other processes send (Postgres; nothing on SQLite).
    pub(super) fn spawn_kill_listener(self: &Arc<Self>) {
        tokio::spawn(crate::services::kills::listen(Arc::downgrade(&self.streams), self.db.clone()));
    }

    /// Draws live time from the projects' credits (with billing on).
    pub(super) fn spawn_meter(self: &Arc<Self>) {
        tokio::spawn(crate::services::credits::run_meter(Arc::downgrade(&self.streams)));
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

    /// `sluice_credits_balance_seconds` of every project, with billing on (empty otherwise, or
    /// when the database does not answer: the other metrics are still served).
    pub(super) async fn credit_metrics(&self) -> String {
        if self.settings.billing != Billing::On {
            return String::new();
        }
        let balances = match self.db.credit_balances().await {
            Ok(balances) => balances,
            Err(e) => {
                tracing::warn!(error = %e, "metrics: reading credit balances");
                return String::new();
            }
        };
        let mut text = String::from(
            "# HELP sluice_credits_balance_seconds Live seconds left in each project's credits\n\
             # TYPE sluice_credits_balance_seconds gauge\n",
        );
        for (slug, ms) in balances {
            let slug = slug.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n");
            let _ = writeln!(
                text,
                "sluice_credits_balance_seconds{{project=\"{slug}\"}} {}",
                crate::domain::credits::seconds_of(ms)
            );
        }
        text
    }
}
