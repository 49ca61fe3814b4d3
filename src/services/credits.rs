//! Credits (CONTRACT: Recording and credits; `SLUICE_BILLING=on`): a live session draws one
//! second per second from its project's balance. The meter of each process charges the live
//! time of the sessions it holds (and of those that closed since its last pass) every
//! [`METER_EVERY`], in one statement per project; when a balance is no longer positive, every live
//! stream of that project is disabled with `insufficient_credits` through `Streams::apply`, which
//! sends `stream.ended` then `stream.disabled` and ends the push wherever it is held. A crash
//! loses at most one pass of live time; the kill comes at most a pass after the balance ran out,
//! so a balance may end a few seconds below zero. The refusals at connect (`begin_push`, SRT's
//! handshake) and of a re-enable (`apply`) are in `services::streams`.

use std::collections::HashMap;
use std::sync::Weak;
use std::time::Duration;

use crate::domain::credits;
use crate::domain::stream::{DisabledReason, StreamMove, StreamStatus};
use crate::services::streams::{StreamError, Streams};
use crate::store::Db;

/// How often the meter charges live time: within the contract's "at least every 5 s", and
/// often enough that a balance that runs out ends the push within a couple of seconds.
pub const METER_EVERY: Duration = Duration::from_secs(2);

/// Meters until `streams` goes. With billing off it only forgets the live time counted.
pub async fn run_meter(streams: Weak<Streams>) {
    let mut tick = tokio::time::interval(METER_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(streams) = streams.upgrade() else { return };
        if let Err(e) = streams.meter().await {
            tracing::warn!(error = %e, "metering live time against credits");
        }
    }
}

impl Streams {
    /// One pass of the meter: charges each project its live time here since the last pass,
    /// and disables the live streams of a project whose balance is no longer positive.
    /// Returns how many streams it disabled.
    pub async fn meter(&self) -> Result<usize, StreamError> {
        let usage = self.sessions.take_usage();
        if !self.billing {
            return Ok(0);
        }
        let mut charged: HashMap<String, i64> = HashMap::with_capacity(usage.len());
        let mut failed = None;
        for (project_id, ms) in usage {
            match self.db.add_credits(&project_id, -ms).await {
                Ok(balance) => {
                    charged.insert(project_id, balance);
                }
                Err(e) => {
                    // Charged at the next pass instead.
                    self.sessions.owe(&project_id, ms);
                    failed = Some(e);
                }
            }
        }
        let mut disabled = 0;
        for (project_id, balance) in charged {
            if !credits::allows_push(balance) {
                disabled += self.end_for_credits(&project_id).await?;
            }
        }
        match failed {
            Some(e) => Err(e.into()),
            None => Ok(disabled),
        }
    }

    /// Disables every stream of the project that is live, on any node, with
    /// `insufficient_credits`. Returns how many.
    async fn end_for_credits(&self, project_id: &str) -> Result<usize, StreamError> {
        let mut disabled = 0;
        for id in self.db.live_stream_ids_of_project(project_id).await? {
            let mut tx = self.db.begin_write().await?;
            // Decided on what this transaction sees: the push may have ended meanwhile, or
            // another process's meter disabled the stream first.
            let Some(mut row) = Db::stream_in(&mut tx, project_id, &id).await? else { continue };
            if row.state().status != StreamStatus::Live {
                continue;
            }
            self.apply(tx, &mut row, StreamMove::Disable(DisabledReason::InsufficientCredits)).await?;
            tracing::info!(stream = %id, project = %project_id, "disabled: the project has no live seconds left");
            disabled += 1;
        }
        Ok(disabled)
    }
}
