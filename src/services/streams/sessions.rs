//! The push sessions of this process, by stream id: one per stream, each with the signal that
//! ends it, the reconnect window it waits out when its publisher goes away, and the live time it
//! has drawn that the meter has not charged yet.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::{watch, Notify};

use super::millis;

/// One open push session of this process.
struct Session {
    /// Ends it early.
    kill: Arc<Notify>,
    project_id: String,
    /// Whether `begin_push` has recorded it (the stream is live in the database): only then is
    /// its time metered, and only then may a check against the database end it.
    started: bool,
    /// Until when its live time has been counted for the meter.
    metered_to: Instant,
    /// The stream's `reconnectWindow`, as its first push read it.
    window: Duration,
    /// Whether a publisher feeds it now; `false` while it waits out the reconnect window.
    publishing: bool,
    /// The window lapsed (or a kill came) and the session is ending: nobody may rejoin it.
    closing: bool,
    /// Pushes that opened or rejoined it.
    pushes: u64,
    /// Wakes the window's timer early (a kill while no publisher waits on `kill`).
    lapse: Arc<Notify>,
    /// Set to `true` when the session closes: the live session's outputs end then.
    closed: watch::Sender<bool>,
}

/// A push session opened by [`Streams::begin_push`]: what ends it early, and what says it is over
/// (the push ended with no reconnect window, or the window lapsed, or the API ended it).
#[derive(Debug, Clone)]
pub struct Opened {
    pub kill: Arc<Notify>,
    pub closed: watch::Receiver<bool>,
    /// The push continues a session whose publisher went away within its reconnect window: the
    /// stream was live all along and no `stream.live` is sent.
    pub rejoined: bool,
}

/// A session whose publisher went away and that waits out its window.
pub(super) struct Waiting {
    pub(super) window: Duration,
    pub(super) pushes: u64,
    pub(super) lapse: Arc<Notify>,
    pub(super) closed: watch::Receiver<bool>,
}

/// The open push sessions of this process, by stream id: each holds the signal that ends it,
/// and the live time it has drawn that the meter has not charged yet.
#[derive(Default)]
pub struct LiveSessions {
    sessions: Mutex<HashMap<String, Session>>,
    /// Milliseconds of live time of sessions that closed, by project, not charged yet.
    owed: Mutex<HashMap<String, i64>>,
}

impl LiveSessions {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Session>> {
        self.sessions.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn owed(&self) -> MutexGuard<'_, HashMap<String, i64>> {
        self.owed.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Opens the stream's session, or rejoins one that waits out its reconnect window; `None`
    /// if a publisher holds one here already, or it is ending.
    pub(super) fn open(&self, stream_id: &str, project_id: &str) -> Option<Opened> {
        let mut sessions = self.lock();
        if let Some(session) = sessions.get_mut(stream_id) {
            if session.publishing || session.closing {
                return None;
            }
            session.publishing = true;
            session.pushes += 1;
            let (kill, closed) = (session.kill.clone(), session.closed.subscribe());
            return Some(Opened { kill, closed, rejoined: true });
        }
        let kill = Arc::new(Notify::new());
        let (closed, closed_rx) = watch::channel(false);
        let session = Session {
            kill: kill.clone(),
            project_id: project_id.to_string(),
            started: false,
            metered_to: Instant::now(),
            window: Duration::ZERO,
            publishing: true,
            closing: false,
            pushes: 1,
            lapse: Arc::new(Notify::new()),
            closed,
        };
        sessions.insert(stream_id.to_string(), session);
        Some(Opened { kill, closed: closed_rx, rejoined: false })
    }

    /// The session went live: its time counts from now.
    pub(super) fn started(&self, stream_id: &str, window: Duration) {
        if let Some(session) = self.lock().get_mut(stream_id) {
            session.started = true;
            session.metered_to = Instant::now();
            session.window = window;
        }
    }

    /// The publisher of a started session with a reconnect window went away: the session waits.
    pub(super) fn wait(&self, stream_id: &str) -> Option<Waiting> {
        let mut sessions = self.lock();
        let session = sessions.get_mut(stream_id)?;
        if !session.started || session.closing || session.window.is_zero() {
            return None;
        }
        session.publishing = false;
        Some(Waiting {
            window: session.window,
            pushes: session.pushes,
            lapse: session.lapse.clone(),
            closed: session.closed.subscribe(),
        })
    }

    /// Whether the session still waits with no push since push `pushes`; if so it is ending
    /// from now on (no push may rejoin it).
    pub(super) fn lapsed(&self, stream_id: &str, pushes: u64) -> bool {
        let mut sessions = self.lock();
        match sessions.get_mut(stream_id) {
            Some(s) if !s.publishing && s.pushes == pushes && !s.closing => {
                s.closing = true;
                true
            }
            _ => false,
        }
    }

    /// Whether the stream's session waits for its publisher (the slate covers it).
    pub fn is_waiting(&self, stream_id: &str) -> bool {
        self.lock().get(stream_id).is_some_and(|s| !s.publishing && !s.closing)
    }

    /// Closes the stream's session; the live time it drew since the meter last counted is owed
    /// (none if it never went live).
    pub(super) fn close(&self, stream_id: &str) {
        let Some(session) = self.lock().remove(stream_id) else { return };
        session.closed.send_replace(true);
        if !session.started {
            return;
        }
        let ms = millis(session.metered_to.elapsed());
        *self.owed().entry(session.project_id).or_default() += ms;
    }

    /// The live time drawn since the last call, by project, in milliseconds: every open
    /// session's since it was last counted, and what closed sessions owe.
    pub(crate) fn take_usage(&self) -> HashMap<String, i64> {
        let mut usage = std::mem::take(&mut *self.owed());
        let now = Instant::now();
        for session in self.lock().values_mut().filter(|s| s.started) {
            let ms = millis(now.saturating_duration_since(session.metered_to));
            // Moved on by exactly what was counted, so no fraction of a millisecond is lost.
            session.metered_to += Duration::from_millis(ms as u64);
            *usage.entry(session.project_id.clone()).or_default() += ms;
        }
        usage.retain(|_, ms| *ms > 0);
        usage
    }

    /// Gives back usage that could not be charged, for the next pass.
    pub(crate) fn owe(&self, project_id: &str, ms: i64) {
        *self.owed().entry(project_id.to_string()).or_default() += ms;
    }

    /// Ends the stream's session now, if one is open here (DELETE, disable): its publisher's
    /// push ends, or a session that waits for its publisher stops waiting. `notify_one` keeps
    /// the signal for a session that does not wait on it yet.
    pub fn kill(&self, stream_id: &str) {
        if let Some(session) = self.lock().get(stream_id) {
            Self::end_early(session);
        }
    }

    fn end_early(session: &Session) {
        match session.publishing {
            true => session.kill.notify_one(),
            false => session.lapse.notify_one(),
        }
    }

    /// Ends `stream_id`'s session if it is the one `kill` ends.
    pub(super) fn kill_exactly(&self, stream_id: &str, kill: &Arc<Notify>) {
        if let Some(session) = self.lock().get(stream_id).filter(|s| Arc::ptr_eq(&s.kill, kill)) {
            Self::end_early(session);
        }
    }

    pub fn is_live(&self, stream_id: &str) -> bool {
        self.lock().contains_key(stream_id)
    }

    /// Ends every session of this process; returns how many there were.
    pub fn kill_all(&self) -> usize {
        let sessions = self.lock();
        for session in sessions.values() {
            Self::end_early(session);
        }
        sessions.len()
    }

    pub fn count(&self) -> usize {
        self.lock().len()
    }

    /// The sessions that have gone live here, each with the signal that ends it (so that a
    /// later signal reaches that session and not one opened after it for the same stream).
    pub(super) fn started_sessions(&self) -> Vec<(String, Arc<Notify>)> {
        self.lock().iter().filter(|(_, s)| s.started).map(|(id, s)| (id.clone(), s.kill.clone())).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_waits_out_its_window_and_a_push_within_it_rejoins() {
        use futures_util::FutureExt;
        let sessions = LiveSessions::default();
        let first = sessions.open("s", "p").expect("opens");
        assert!(!first.rejoined);
        assert!(sessions.wait("s").is_none(), "not started: nothing to wait for");
        sessions.started("s", Duration::from_secs(10));
        let waiting = sessions.wait("s").expect("waits");
        assert!(sessions.is_waiting("s"));
        // A kill while nobody publishes wakes the window's timer, not a push.
        sessions.kill("s");
        assert!(waiting.lapse.notified().now_or_never().is_some(), "the timer is woken");
        assert!(first.kill.notified().now_or_never().is_none(), "no push is killed");
        // A push within the window rejoins: the same kill signal, the same end.
        let second = sessions.open("s", "p").expect("rejoins");
        assert!(second.rejoined && Arc::ptr_eq(&first.kill, &second.kill));
        assert!(sessions.open("s", "p").is_none(), "one publisher at a time");
        assert!(!sessions.lapsed("s", waiting.pushes), "the old window's end is void after a rejoin");
        let again = sessions.wait("s").expect("waits again");
        assert!(sessions.lapsed("s", again.pushes), "the window lapsed with no push");
        assert!(sessions.open("s", "p").is_none(), "an ending session takes nobody back");
        assert!(!*second.closed.borrow());
        sessions.close("s");
        assert!(*second.closed.borrow() && *first.closed.borrow(), "both pushes hear the end");
        // Without a window the publisher's end ends the session.
        sessions.open("t", "p").expect("opens");
        sessions.started("t", Duration::ZERO);
        assert!(sessions.wait("t").is_none());
    }

    #[test]
    fn live_time_is_counted_once_and_only_once_live() {
        let sessions = LiveSessions::default();
        assert!(sessions.open("s1", "p").is_some());
        assert!(sessions.open("s1", "p").is_none(), "one session per stream");
        assert!(sessions.open("s2", "q").is_some());
        sessions.started("s1", Duration::ZERO);
        std::thread::sleep(Duration::from_millis(30));
        let usage = sessions.take_usage();
        let first = usage.get("p").copied().unwrap_or(0);
        assert!(first >= 30, "s1 counted: {usage:?}");
        assert!(!usage.contains_key("q"), "s2 never started: not counted: {usage:?}");
        std::thread::sleep(Duration::from_millis(20));
        sessions.close("s1");
        sessions.close("s2");
        let owed = sessions.take_usage().get("p").copied().unwrap_or(0);
        assert!((20..1000).contains(&owed), "what s1 drew after the last count: {owed}");
        assert!(sessions.take_usage().is_empty(), "nothing is counted twice");
        assert_eq!(sessions.count(), 0);
    }
}
