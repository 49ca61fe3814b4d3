//! WebRTC peers for tests and benches, on GStreamer's `webrtcbin` (a real WebRTC stack: ICE,
//! DTLS-SRTP, RTP): a WHEP viewer that decodes what it receives and counts it, and a WHIP
//! publisher of a live test pattern with H.264 and Opus. Both send their offer with every
//! candidate gathered (no trickle) and take the answer from the 201.
//!
//! The viewer can also read a time code drawn into the picture ([`stamp`]): the publisher side
//! of a bench paints the wall clock as a row of black and white blocks, the viewer reads it off
//! each decoded frame, so glass-to-glass latency is measured in the picture itself.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gstreamer as gst;
use gstreamer::prelude::*;
use gstreamer_app as gst_app;
use gstreamer_sdp as gst_sdp;
use gstreamer_webrtc as gst_webrtc;

/// What a viewer received so far.
#[derive(Debug, Default, Clone)]
pub struct Received {
    pub video_frames: u64,
    pub width: u32,
    pub height: u32,
    pub audio_buffers: u64,
    pub last_video: Option<Instant>,
    /// `(decoded at, wall-clock ms read off the picture)` for frames that carried a stamp.
    pub stamps: Vec<(std::time::SystemTime, u64)>,
    /// The viewer's ICE connection states, in order.
    pub ice: Vec<String>,
}

/// A WHEP viewer.
pub struct WhepViewer {
    pipeline: gst::Pipeline,
    pub received: Arc<Mutex<Received>>,
    /// The session's URL (`Location` of the 201), absolute.
    pub location: String,
    pub etag: String,
    /// The server's SDP answer.
    pub answer: String,
}

impl Drop for WhepViewer {
    /// Ends the session as a good client does (DELETE of its location), then the pipeline.
    fn drop(&mut self) {
        hang_up(&self.location);
        let _ = self.pipeline.set_state(gst::State::Null);
    }
}

impl WhepViewer {
    /// Goes away as a closed tab does: the pipeline stops, no DELETE is sent.
    pub fn vanish(mut self) {
        self.location.clear();
        let _ = self.pipeline.set_state(gst::State::Null);
    }
}

/// DELETEs a session's location in the background, when a runtime is there to run it.
fn hang_up(location: &str) {
    if location.is_empty() {
        return;
    }
    if let Ok(rt) = tokio::runtime::Handle::try_current() {
        let location = location.to_string();
        rt.spawn(async move {
            let _ = reqwest::Client::new().delete(location).send().await;
        });
    }
}

/// Why an offer was not answered with 201.
#[derive(Debug)]
pub struct Refused {
    pub status: u16,
    pub deny_reason: Option<String>,
    pub body: String,
}

/// Waits for a `webrtcbin` promise (on a blocking thread).
fn settle(what: &str, emit: impl FnOnce(&gst::Promise)) -> gst::Structure {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    let promise = gst::Promise::with_change_func(move |reply| {
        let _ = tx.try_send(reply.ok().flatten().map(|s| s.to_owned()));
    });
    emit(&promise);
    rx.recv_timeout(Duration::from_secs(10))
        .unwrap_or_else(|_| panic!("{what}: no reply"))
        .unwrap_or_else(|| gst::Structure::new_empty("empty"))
}

/// Creates the offer, sets it and waits for ICE gathering; returns its SDP text.
fn offer(webrtc: &gst::Element) -> String {
    let reply =
        settle("create-offer", |p| webrtc.emit_by_name::<()>("create-offer", &[&None::<gst::Structure>, p]));
    let offer = reply.get::<gst_webrtc::WebRTCSessionDescription>("offer").expect("an offer");
    settle("set-local-description", |p| webrtc.emit_by_name::<()>("set-local-description", &[&offer, p]));
    let until = Instant::now() + Duration::from_secs(5);
    while webrtc.property::<gst_webrtc::WebRTCICEGatheringState>("ice-gathering-state")
        != gst_webrtc::WebRTCICEGatheringState::Complete
        && Instant::now() < until
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    let local = webrtc.property::<gst_webrtc::WebRTCSessionDescription>("local-description");
    local.sdp().as_text().expect("offer text")
}

fn set_answer(webrtc: &gst::Element, answer: &str) {
    let sdp = gst_sdp::SDPMessage::parse_buffer(answer.as_bytes()).expect("the answer is SDP");
    let answer = gst_webrtc::WebRTCSessionDescription::new(gst_webrtc::WebRTCSDPType::Answer, sdp);
    settle("set-remote-description", |p| webrtc.emit_by_name::<()>("set-remote-description", &[&answer, p]));
}

/// POSTs an offer; the answer, `Location` (absolute) and `ETag` of a 201.
async fn exchange(
    url: &str,
    bearer: Option<&str>,
    offer: String,
) -> Result<(String, String, String), Refused> {
    let client = reqwest::Client::new();
    let mut req = client.post(url).header("content-type", "application/sdp").body(offer);
    if let Some(b) = bearer {
        req = req.bearer_auth(b);
    }
    let resp = req.send().await.expect("the offer is sent");
    let status = resp.status().as_u16();
    let header = |name: &str| resp.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_string);
    let (location, etag, deny_reason) = (header("location"), header("etag"), header("x-deny-reason"));
    let body = resp.text().await.unwrap_or_default();
    if std::env::var_os("SLUICE_TEST_SDP").is_some() {
        eprintln!("--- offer to {url} → {status}\n--- answer:\n{body}");
    }
    if status != 201 {
        return Err(Refused { status, deny_reason, body });
    }
    let location =
        url::Url::parse(url).expect("url").join(&location.expect("Location")).expect("location").to_string();
    Ok((body, location, etag.expect("ETag")))
}

impl WhepViewer {
    /// Plays `url` (a WHEP endpoint); panics unless it answers 201.
    pub async fn play(url: &str) -> WhepViewer {
        match WhepViewer::try_play(url).await {
            Ok(v) => v,
            Err(r) => panic!("WHEP {url}: {r:?}"),
        }
    }

    pub async fn try_play(url: &str) -> Result<WhepViewer, Refused> {
        WhepViewer::start(url, true).await
    }

    /// A viewer that depayloads but does not decode (a load generator: it counts access units as
    /// frames, and audio packets).
    pub async fn play_counting(url: &str) -> Result<WhepViewer, Refused> {
        WhepViewer::start(url, false).await
    }

    async fn start(url: &str, decoding: bool) -> Result<WhepViewer, Refused> {
        sluice::media::gst::init().expect("GStreamer");
        let received = Arc::new(Mutex::new(Received::default()));
        let r = received.clone();
        let (pipeline, webrtc, offer) = tokio::task::spawn_blocking(move || {
            let pipeline = gst::Pipeline::new();
            let webrtc = gst::ElementFactory::make("webrtcbin")
                .property_from_str("bundle-policy", "max-bundle")
                .build()
                .expect("webrtcbin");
            pipeline.add(&webrtc).expect("add");
            for caps in [
                "application/x-rtp,media=video,encoding-name=H264,payload=102,clock-rate=90000,packetization-mode=(string)1,profile-level-id=(string)42e01f",
                "application/x-rtp,media=audio,encoding-name=OPUS,payload=111,clock-rate=48000",
            ] {
                let caps: gst::Caps = caps.parse().expect("caps");
                webrtc.emit_by_name::<gst_webrtc::WebRTCRTPTransceiver>(
                    "add-transceiver",
                    &[&gst_webrtc::WebRTCRTPTransceiverDirection::Recvonly, &caps],
                );
            }
            let states = r.clone();
            webrtc.connect_notify(Some("ice-connection-state"), move |w, _| {
                let state = w.property::<gst_webrtc::WebRTCICEConnectionState>("ice-connection-state");
                states.lock().unwrap().ice.push(format!("{state:?}"));
            });
            let weak = pipeline.downgrade();
            webrtc.connect_pad_added(move |_, pad| {
                let Some(pipeline) = weak.upgrade() else { return };
                if decoding {
                    decode(&pipeline, pad, r.clone());
                } else {
                    count(&pipeline, pad, r.clone());
                }
            });
            pipeline.set_state(gst::State::Playing).expect("play");
            let offer = offer(&webrtc);
            (pipeline, webrtc, offer)
        })
        .await
        .expect("viewer set-up");
        let (answer, location, etag) = match exchange(url, None, offer).await {
            Ok(a) => a,
            Err(r) => {
                let _ = pipeline.set_state(gst::State::Null);
                return Err(r);
            }
        };
        let (w, sdp) = (webrtc.clone(), answer.clone());
        tokio::task::spawn_blocking(move || set_answer(&w, &sdp)).await.expect("answer");
        Ok(WhepViewer { pipeline, received, location, etag, answer })
    }

    pub fn received(&self) -> Received {
        self.received.lock().unwrap().clone()
    }

    /// Polls until `cond` holds on what was received; panics after `timeout`.
    pub async fn wait_for(
        &self,
        what: &str,
        timeout: Duration,
        cond: impl Fn(&Received) -> bool,
    ) -> Received {
        let until = Instant::now() + timeout;
        loop {
            let r = self.received();
            if cond(&r) {
                return r;
            }
            assert!(Instant::now() < until, "WHEP viewer: timed out waiting for {what}; received {r:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Counts what a received stream carries without decoding it: H.264 access units, Opus packets.
fn count(pipeline: &gst::Pipeline, pad: &gst::Pad, received: Arc<Mutex<Received>>) {
    let caps = pad.current_caps().unwrap_or_else(|| pad.query_caps(None));
    let video = caps.structure(0).and_then(|s| s.get::<&str>("media").ok()) == Some("video");
    let description = if video {
        "rtph264depay ! video/x-h264,alignment=au ! appsink name=out sync=false"
    } else {
        "appsink name=out sync=false"
    };
    let bin = gst::parse::bin_from_description(description, true).expect("bin");
    let sink = bin.by_name("out").and_then(|e| e.downcast::<gst_app::AppSink>().ok()).expect("appsink");
    sink.set_callbacks(
        gst_app::AppSinkCallbacks::builder()
            .new_sample(move |sink| {
                let _ = sink.pull_sample().map_err(|_| gst::FlowError::Eos)?;
                let mut r = received.lock().unwrap();
                if video {
                    r.video_frames += 1;
                    r.last_video = Some(Instant::now());
                } else {
                    r.audio_buffers += 1;
                }
                Ok(gst::FlowSuccess::Ok)
            })
            .build(),
    );
    pipeline.add(&bin).expect("add");
    bin.sync_state_with_parent().expect("sync");
    let _ = pad.link(&bin.static_pad("sink").expect("sink"));
}

/// `decodebin` behind a received stream, counting what comes out; video is read for a stamp.
fn decode(pipeline: &gst::Pipeline, pad: &gst::Pad, received: Arc<Mutex<Received>>) {
    let decodebin = gst::ElementFactory::make("decodebin").build().expect("decodebin");
    pipeline.add(&decodebin).expect("add");
    let weak = pipeline.downgrade();
    decodebin.connect_pad_added(move |_, pad| {
        let Some(pipeline) = weak.upgrade() else { return };
        let caps = pad.current_caps().unwrap_or_else(|| pad.query_caps(None));
        let video = caps.structure(0).is_some_and(|s| s.name().starts_with("video/"));
        let description = if video {
            "videoconvert ! video/x-raw,format=I420 ! appsink name=out sync=false emit-signals=false"
        } else {
            "audioconvert ! appsink name=out sync=false emit-signals=false"
        };
        let bin = gst::parse::bin_from_description(description, true).expect("bin");
        let sink = bin.by_name("out").and_then(|e| e.downcast::<gst_app::AppSink>().ok()).expect("appsink");
        let r = received.clone();
        sink.set_callbacks(
            gst_app::AppSinkCallbacks::builder()
                .new_sample(move |sink| {
                    let sample = sink.pull_sample().map_err(|_| gst::FlowError::Eos)?;
                    let mut r = r.lock().unwrap();
                    if video {
                        r.video_frames += 1;
                        r.last_video = Some(Instant::now());
                        if let Some(s) = sample.caps().and_then(|c| c.structure(0)) {
                            r.width = s.get::<i32>("width").unwrap_or(0) as u32;
                            r.height = s.get::<i32>("height").unwrap_or(0) as u32;
                        }
                        let (w, h) = (r.width as usize, r.height as usize);
                        if let Some(map) = sample.buffer().and_then(|b| b.map_readable().ok()) {
                            if let Some(ms) = stamp::read(&map, w, h) {
                                r.stamps.push((std::time::SystemTime::now(), ms));
                            }
                        }
                    } else {
                        r.audio_buffers += 1;
                    }
                    Ok(gst::FlowSuccess::Ok)
                })
                .build(),
        );
        pipeline.add(&bin).expect("add");
        bin.sync_state_with_parent().expect("sync");
        let _ = pad.link(&bin.static_pad("sink").expect("sink"));
    });
    decodebin.sync_state_with_parent().expect("sync");
    let _ = pad.link(&decodebin.static_pad("sink").expect("sink"));
}

/// A WHIP publisher of a live 640×360 30 fps test pattern (H.264 constrained baseline, a
/// keyframe a second) and a 48 kHz Opus tone.
pub struct WhipPublisher {
    pipeline: gst::Pipeline,
    pub location: String,
    pub etag: String,
}

impl Drop for WhipPublisher {
    fn drop(&mut self) {
        hang_up(&self.location);
        let _ = self.pipeline.set_state(gst::State::Null);
    }
}

impl WhipPublisher {
    pub async fn publish(url: &str, bearer: &str) -> WhipPublisher {
        match WhipPublisher::try_publish(url, Some(bearer)).await {
            Ok(p) => p,
            Err(r) => panic!("WHIP {url}: {r:?}"),
        }
    }

    pub async fn try_publish(url: &str, bearer: Option<&str>) -> Result<WhipPublisher, Refused> {
        sluice::media::gst::init().expect("GStreamer");
        let (pipeline, webrtc, offer) = tokio::task::spawn_blocking(|| {
            let pipeline = gst::parse::launch(
                "webrtcbin name=w bundle-policy=max-bundle \
                 videotestsrc is-live=true pattern=ball ! video/x-raw,width=640,height=360,framerate=30/1 \
                 ! x264enc tune=zerolatency speed-preset=ultrafast key-int-max=30 bitrate=800 \
                 ! video/x-h264,profile=constrained-baseline ! rtph264pay pt=96 config-interval=-1 \
                 ! application/x-rtp,media=video,encoding-name=H264,payload=96,clock-rate=90000 ! w. \
                 audiotestsrc is-live=true wave=sine ! audioconvert ! audioresample ! opusenc \
                 ! rtpopuspay pt=97 ! application/x-rtp,media=audio,encoding-name=OPUS,payload=97,clock-rate=48000 ! w.",
            )
            .expect("publisher pipeline")
            .downcast::<gst::Pipeline>()
            .expect("a pipeline");
            let webrtc = pipeline.by_name("w").expect("webrtcbin");
            for pad in webrtc.sink_pads() {
                let t = pad.property::<gst_webrtc::WebRTCRTPTransceiver>("transceiver");
                t.set_property("direction", gst_webrtc::WebRTCRTPTransceiverDirection::Sendonly);
            }
            pipeline.set_state(gst::State::Playing).expect("play");
            let offer = offer(&webrtc);
            (pipeline, webrtc, offer)
        })
        .await
        .expect("publisher set-up");
        let (answer, location, etag) = match exchange(url, bearer, offer).await {
            Ok(a) => a,
            Err(r) => {
                let _ = pipeline.set_state(gst::State::Null);
                return Err(r);
            }
        };
        let w = webrtc.clone();
        tokio::task::spawn_blocking(move || set_answer(&w, &answer)).await.expect("answer");
        Ok(WhipPublisher { pipeline, location, etag })
    }
}

/// A time code in the picture: 44 bits of wall-clock milliseconds as a row of blocks across
/// the top of the frame (white = 1), with a white start block and a black end block that tell
/// a stamped frame from any other. Survives scaling and H.264 at ordinary bitrates.
pub mod stamp {
    pub const BITS: usize = 44;
    const CELLS: usize = BITS + 2;

    /// Paints `ms` into a luma plane of `width`×`height` (stride = width).
    pub fn paint(y: &mut [u8], width: usize, height: usize, ms: u64) {
        let cell = width / CELLS;
        let rows = (height / 8).max(cell.min(height));
        for c in 0..CELLS {
            let on = match c {
                0 => true,
                c if c == CELLS - 1 => false,
                c => (ms >> (BITS - c)) & 1 == 1,
            };
            for row in 0..rows.min(height) {
                let start = row * width + c * cell;
                y[start..start + cell].fill(if on { 235 } else { 16 });
            }
        }
    }

    /// Reads a stamp off an I420 frame (luma first), if it carries one.
    pub fn read(frame: &[u8], width: usize, height: usize) -> Option<u64> {
        if width < CELLS * 2 || height < 8 || frame.len() < width * height {
            return None;
        }
        let cell = width / CELLS;
        let rows = (height / 8).max(cell.min(height));
        let row = rows / 2;
        let level = |c: usize| -> u8 {
            let x = c * cell + cell / 2;
            frame[row * width + x]
        };
        if level(0) < 180 || level(CELLS - 1) > 70 {
            return None;
        }
        let mut ms = 0u64;
        for c in 1..=BITS {
            ms = (ms << 1) | u64::from(level(c) > 128);
        }
        Some(ms)
    }

    #[test]
    fn round_trip() {
        let (w, h) = (640, 360);
        let mut y = vec![100u8; w * h];
        paint(&mut y, w, h, 1_700_000_123_456);
        assert_eq!(read(&y, w, h), Some(1_700_000_123_456));
        assert_eq!(read(&vec![100u8; w * h], w, h), None);
    }
}
