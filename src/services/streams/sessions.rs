//! The push sessions of this process, by stream id: one per stream, each with the signal that
//! ends it, the reconnect window it waits out when its publisher goes away, the inputs that
//! stand by to take it over (a backup publisher, or the primary back while the backup feeds it),
//! and the live time it has drawn that the meter has not charged yet.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::{watch, Notify};

use super::millis;
use crate::domain::stream::{InputInfo, InputRole};
use crate::store::slates::SlateInfo;

/// A stream's own slate picture as read from the database: what is known of it, and its bytes.
pub type SlatePicture = Arc<(SlateInfo, Arc<Vec<u8>>)>;

/// How long a session whose publisher went away waits for an input that stands by to take it
/// over, when the stream's own reconnect window is shorter.
const TAKE_OVER_GRACE: Duration = Duration::from_secs(5);
/// A standby input is ready while it has a keyframe to start from and sent media this recently.
const READY_FOR: Duration = Duration::from_secs(1);

/// A publisher's connection that stands by to feed a session: a backup while the primary is
/// live, or the primary back while the backup feeds it. Its front buffers its media back to its
/// last keyframe and says so ([`Standby::note_ready`]).
#[derive(Debug)]
pub struct Standby {
    pub role: InputRole,
    /// Until when it counts as ready: a keyframe buffered, and media lately.
    ready_until: Mutex<Option<Instant>>,
}

impl Standby {
    fn new(role: InputRole) -> Standby {
        Standby { role, ready_until: Mutex::new(None) }
    }

    /// Its front has a keyframe to start from and media has just come.
    pub fn note_ready(&self) {
        *self.ready_until.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now() + READY_FOR);
    }

    /// Its buffer holds no keyframe (it was reset).
    pub fn note_unready(&self) {
        *self.ready_until.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }

    pub fn is_ready(&self) -> bool {
        self.ready_until.lock().unwrap_or_else(|p| p.into_inner()).is_some_and(|t| Instant::now() < t)
    }
}

/// What a connection standing by holds: its place, and what says the session is over.
#[derive(Debug, Clone)]
pub struct StandingBy {
    pub standby: Arc<Standby>,
    pub closed: watch::Receiver<bool>,
}

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
    /// The role of the input that feeds it now, or fed it last.
    active: InputRole,
    /// Tells the push that feeds it now to step down (an input that stands by takes over).
    step_down: watch::Sender<bool>,
    /// Inputs that stand by, at most one per role.
    standby: Vec<Arc<Standby>>,
    /// Whether the push that feeds it sends audio, once known: a standby input must send the same.
    audio: Option<bool>,
    /// What was last recorded of its input (recorded again when an input stands by or leaves).
    input: Option<InputInfo>,
    /// The stream's slate picture as last read (`Some(None)`: the default card), for a slate
    /// while the database does not answer.
    slate: Option<Option<SlatePicture>>,
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
    /// Becomes `true` when the push is to step down: an input that stands by takes over.
    pub step_down: watch::Receiver<bool>,
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
            return Some(Self::feed(session, InputRole::Primary));
        }
        let kill = Arc::new(Notify::new());
        let (closed, closed_rx) = watch::channel(false);
        let (step_down, step_down_rx) = watch::channel(false);
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
            active: InputRole::Primary,
            step_down,
            standby: Vec::new(),
            audio: None,
            input: None,
            slate: None,
        };
        sessions.insert(stream_id.to_string(), session);
        Some(Opened { kill, closed: closed_rx, rejoined: false, step_down: step_down_rx })
    }

    /// A push of `role` feeds the waiting `session` from now on.
    fn feed(session: &mut Session, role: InputRole) -> Opened {
        session.publishing = true;
        session.pushes += 1;
        session.active = role;
        session.audio = None;
        let (step_down, step_down_rx) = watch::channel(false);
        session.step_down = step_down;
        let (kill, closed) = (session.kill.clone(), session.closed.subscribe());
        Opened { kill, closed, rejoined: true, step_down: step_down_rx }
    }

    /// Stands a connection of `role` by for the stream's session: a backup while the session
    /// lasts (the primary live, or away within its window) and no backup feeds it; the primary
    /// while it does not feed it itself. Errs with why not, for the publisher.
    pub fn stand_by(&self, stream_id: &str, role: InputRole) -> Result<StandingBy, &'static str> {
        let mut sessions = self.lock();
        let session = match sessions.get_mut(stream_id) {
            Some(s) if s.started && !s.closing => s,
            _ if role == InputRole::Backup => return Err("the stream has no live primary to back up"),
            _ => return Err("the stream is not live"),
        };
        if session.publishing && session.active == role {
            return Err(match role {
                InputRole::Backup => "the backup feeds the stream already",
                _ => "the stream is live already",
            });
        }
        // One of this role that is not ready (quiet, or gone without a word, as an SRT caller
        // killed is until its connection times out) gives its place to the new one.
        if let Some(at) = session.standby.iter().position(|s| s.role == role) {
            if session.standby[at].is_ready() {
                return Err("an input of this role stands by already");
            }
            session.standby.remove(at);
        }
        let standby = Arc::new(Standby::new(role));
        session.standby.push(standby.clone());
        Ok(StandingBy { standby, closed: session.closed.subscribe() })
    }

    /// Whether `standby` still stands by for the stream's session (another input of its role
    /// may have taken its place).
    pub fn is_standing(&self, stream_id: &str, standby: &Arc<Standby>) -> bool {
        self.lock().get(stream_id).is_some_and(|s| s.standby.iter().any(|sb| Arc::ptr_eq(sb, standby)))
    }

    /// The connection that stood by as `standby` is gone.
    pub fn leave(&self, stream_id: &str, standby: &Arc<Standby>) {
        if let Some(session) = self.lock().get_mut(stream_id) {
            session.standby.retain(|s| !Arc::ptr_eq(s, standby));
        }
    }

    /// The standby input takes the session over if nobody feeds it now (and, for a backup, no
    /// ready primary stands by too): it feeds it from now on. Returns its push and the role of
    /// the input that fed the session before.
    pub(super) fn take_over(&self, stream_id: &str, standby: &Arc<Standby>) -> Option<(Opened, InputRole)> {
        let mut sessions = self.lock();
        let session = sessions.get_mut(stream_id)?;
        let here = session.standby.iter().any(|s| Arc::ptr_eq(s, standby));
        if session.publishing || session.closing || !session.started || !here {
            return None;
        }
        let primary_ready = session.standby.iter().any(|s| s.role == InputRole::Primary && s.is_ready());
        if standby.role == InputRole::Backup && primary_ready {
            return None;
        }
        session.standby.retain(|s| !Arc::ptr_eq(s, standby));
        let before = session.active;
        Some((Self::feed(session, standby.role), before))
    }

    /// A primary that stands by has its keyframe: the backup that feeds the session steps down
    /// (and the primary takes over when it has). Returns whether it was told.
    pub fn claim(&self, stream_id: &str, standby: &Standby) -> bool {
        let sessions = self.lock();
        let Some(session) = sessions.get(stream_id) else { return false };
        let told = standby.role == InputRole::Primary
            && session.publishing
            && session.active == InputRole::Backup
            && !*session.step_down.borrow();
        if told {
            session.step_down.send_replace(true);
        }
        told
    }

    /// Whether an input other than `role` stands by, ready to take the stream's session over.
    pub fn has_ready_standby(&self, stream_id: &str, role: Option<InputRole>) -> bool {
        self.lock()
            .get(stream_id)
            .is_some_and(|s| s.standby.iter().any(|sb| Some(sb.role) != role && sb.is_ready()))
    }

    /// Whether the stream's session here is fed by its backup now.
    pub fn backup_feeds(&self, stream_id: &str) -> bool {
        self.lock().get(stream_id).is_some_and(|s| s.publishing && s.active == InputRole::Backup)
    }

    /// Notes whether the push that feeds the stream's session sends audio.
    pub(super) fn note_audio(&self, stream_id: &str, audio: bool) {
        if let Some(session) = self.lock().get_mut(stream_id) {
            session.audio = Some(audio || session.audio == Some(true));
        }
    }

    /// `info` with the inputs that stand by ready now, kept as the input last recorded.
    pub(super) fn with_standby(&self, stream_id: &str, info: &InputInfo) -> InputInfo {
        let mut info = info.clone();
        if let Some(session) = self.lock().get_mut(stream_id) {
            info.standing_by = session.standby.iter().filter(|s| s.is_ready()).map(|s| s.role).collect();
            session.input = Some(info.clone());
        }
        info
    }

    /// The input last recorded, with the inputs that stand by ready now.
    pub(super) fn last_input(&self, stream_id: &str) -> Option<InputInfo> {
        let last = self.lock().get(stream_id).and_then(|s| s.input.clone())?;
        Some(self.with_standby(stream_id, &last))
    }

    /// The stream's slate picture as its session last read it, if it has read it.
    pub(super) fn known_slate(&self, stream_id: &str) -> Option<Option<SlatePicture>> {
        self.lock().get(stream_id).and_then(|s| s.slate.clone())
    }

    /// Keeps what was read of the stream's slate picture with its session.
    pub(super) fn note_slate(&self, stream_id: &str, picture: Option<SlatePicture>) {
        if let Some(session) = self.lock().get_mut(stream_id) {
            session.slate = Some(picture);
        }
    }

    /// Whether the push that feeds the stream's session sends audio, once known.
    pub fn audio(&self, stream_id: &str) -> Option<bool> {
        self.lock().get(stream_id).and_then(|s| s.audio)
    }

    /// The session went live: its time counts from now.
    pub(super) fn started(&self, stream_id: &str, window: Duration) {
        if let Some(session) = self.lock().get_mut(stream_id) {
            session.started = true;
            session.metered_to = Instant::now();
            session.window = window;
        }
    }

    /// The publisher of a started session with a reconnect window, or with an input that stands
    /// by, went away: the session waits (at least [`TAKE_OVER_GRACE`] for an input that stands by).
    pub(super) fn wait(&self, stream_id: &str) -> Option<Waiting> {
        let mut sessions = self.lock();
        let session = sessions.get_mut(stream_id)?;
        let standing = !session.standby.is_empty();
        if !session.started || session.closing || (session.window.is_zero() && !standing) {
            return None;
        }
        session.publishing = false;
        Some(Waiting {
            window: if standing { session.window.max(TAKE_OVER_GRACE) } else { session.window },
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

    /// Whether the stream's session here went live and waits out its reconnect window for its
    /// publisher (the slate covers for it): a primary that comes back stands by until its
    /// keyframe, and the slate plays until then.
    pub fn awaits_publisher(&self, stream_id: &str) -> bool {
        self.lock().get(stream_id).is_some_and(|s| s.started && !s.publishing && !s.closing)
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
    fn a_backup_stands_by_takes_over_when_the_primary_goes_and_steps_down_when_it_is_back() {
        let sessions = LiveSessions::default();
        assert_eq!(
            sessions.stand_by("s", InputRole::Backup).err(),
            Some("the stream has no live primary to back up")
        );
        let primary = sessions.open("s", "p").expect("opens");
        sessions.started("s", Duration::ZERO);
        // A second backup takes the place of one not ready (gone without a word), not of one ready.
        let stale = sessions.stand_by("s", InputRole::Backup).expect("stands by");
        let backup = sessions.stand_by("s", InputRole::Backup).expect("takes the unready one's place");
        assert!(!sessions.is_standing("s", &stale.standby) && sessions.is_standing("s", &backup.standby));
        assert!(sessions.stand_by("s", InputRole::Primary).is_err(), "the primary feeds it");
        assert!(!sessions.has_ready_standby("s", None), "no keyframe yet");
        assert!(sessions.take_over("s", &backup.standby).is_none(), "the primary feeds it");
        assert!(sessions.take_over("s", &stale.standby).is_none(), "not standing by");
        backup.standby.note_ready();
        assert!(sessions.stand_by("s", InputRole::Backup).is_err(), "one backup, while it is ready");
        assert!(sessions.has_ready_standby("s", Some(InputRole::Primary)));
        assert!(!sessions.has_ready_standby("s", Some(InputRole::Backup)), "the one other than the backup");
        // The primary goes: the session waits (with no window of its own) for the backup.
        let waiting = sessions.wait("s").expect("waits for the input that stands by");
        assert_eq!(waiting.window, TAKE_OVER_GRACE);
        let (fed, before) = sessions.take_over("s", &backup.standby).expect("takes over");
        assert!(fed.rejoined && Arc::ptr_eq(&fed.kill, &primary.kill));
        assert_eq!(before, InputRole::Primary);
        assert!(sessions.backup_feeds("s"));
        assert!(sessions.open("s", "p").is_none(), "a primary does not push in while the backup feeds it");
        // The primary is back: it stands by, and once it has its keyframe it claims the session.
        let back = sessions.stand_by("s", InputRole::Primary).expect("the primary stands by");
        assert!(!*fed.step_down.borrow());
        back.standby.note_ready();
        assert!(sessions.claim("s", &back.standby), "the backup is told to step down");
        assert!(*fed.step_down.borrow());
        assert!(!sessions.claim("s", &back.standby), "told once");
        assert!(
            sessions.take_over("s", &back.standby).is_none(),
            "the backup feeds it until it stepped down"
        );
        // The backup stands by again as soon as its push ended, and the primary takes over first.
        sessions.wait("s").expect("waits");
        let again = sessions.stand_by("s", InputRole::Backup).expect("the backup stands by again");
        again.standby.note_ready();
        assert!(sessions.take_over("s", &again.standby).is_none(), "a ready primary goes first");
        let (_, before) = sessions.take_over("s", &back.standby).expect("the primary takes over");
        assert_eq!(before, InputRole::Backup);
        assert!(!sessions.backup_feeds("s"));
        // A standby that goes away is forgotten; the session's end is heard by those that stand by.
        sessions.leave("s", &again.standby);
        assert!(!sessions.has_ready_standby("s", None));
        assert!(sessions.wait("s").is_none(), "no window and nobody standing by: the session ends");
        sessions.close("s");
        assert!(*again.closed.borrow());
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
