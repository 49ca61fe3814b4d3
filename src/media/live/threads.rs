//! How the muxers' own threads are scheduled ([`schedule_muxer_thread`]): the `cmafmux`
//! elements [`super::encoders`] gives every rung of a push (the `source` and `audio` renditions
//! have none: [`super::pack`]).

use gstreamer as gst;
use gstreamer::prelude::*;

/// Schedules a muxer's own thread (its aggregator's task, `mux_<rendition>:src`) as
/// `SCHED_BATCH` while it runs that task, from the pipeline's sync bus handler: the `ENTER` and
/// `LEAVE` stream-status messages are posted on the task's thread. A muxer's thread is woken
/// by the thread that pushed it (the encoder's); as an ordinary thread it then took the core
/// from that thread. A batch thread does not preempt the one that woke it: it runs on an idle
/// core or when that thread next waits, a few milliseconds at most (parts are 0.2 s and more).
/// When the `source` and `audio` renditions still had muxers, woken by the tokio worker that
/// read each frame, 16 passthrough pushes switched context 2,200 times a second instead of
/// 5,200–5,500 and used 13–16 % less CPU within one run (docs/live-ingest.md). Only an ordinary thread is changed (an
/// operator's `chrt` stands), and it is ordinary again when it leaves the task, as GStreamer's
/// pool may give it to another element's task next.
pub fn schedule_muxer_thread(status: &gst::message::StreamStatus) {
    thread_local! {
        /// Whether this thread was made batch on entering a muxer's task.
        static MADE_BATCH: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }
    let (kind, owner) = status.get();
    if owner.factory().is_none_or(|f| f.name() != "cmafmux") {
        return;
    }
    let policy = match kind {
        // SAFETY: `sched_getscheduler` takes no pointer; pid 0 is the calling thread.
        gst::StreamStatusType::Enter if unsafe { libc::sched_getscheduler(0) } == libc::SCHED_OTHER => {
            libc::SCHED_BATCH
        }
        gst::StreamStatusType::Leave if MADE_BATCH.get() => libc::SCHED_OTHER,
        _ => return,
    };
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: `sched_setscheduler` reads the parameter, valid for the call; pid 0 is the calling
    // thread. Neither policy needs a privilege or a priority.
    if unsafe { libc::sched_setscheduler(0, policy, &param) } == 0 {
        MADE_BATCH.set(policy == libc::SCHED_BATCH);
    } else {
        tracing::debug!(muxer = %owner.name(), error = %std::io::Error::last_os_error(), "thread policy not set");
    }
}
