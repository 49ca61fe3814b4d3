//! WHEP viewers: one `webrtcbin` pipeline per viewer, fed by the stream's [`Tap`] (the WebRTC
//! rung, encoded once per stream) through the viewer's own bounded `appsrc`s. A viewer ends on
//! DELETE, when its ICE fails or never connects, and when the push ends (DELETE or disable of
//! the stream end the push).

use std::sync::Arc;

use gstreamer as gst;
use gstreamer::prelude::*;
use gstreamer_sdp as gst_sdp;
use gstreamer_webrtc as gst_webrtc;

use crate::media::gst::StopOnDrop;
use crate::media::live::taps::{consumer_src, Tap, Taps, CONSUMER_MAX_BYTES};
use crate::media::webrtc::sdp::{self, Offered};
use crate::media::webrtc::{Peer, Peers, Refused, WebrtcConfig, WebrtcError};

/// Most WHEP viewers this process serves at once (beyond: 503).
pub const MAX_VIEWERS: usize = 500;

/// Why a viewer was not admitted.
#[derive(Debug, thiserror::Error)]
pub enum WhepError {
    #[error("stream is not live")]
    NotLive,
    #[error("too many viewers")]
    Full,
    #[error("too many viewers from this address")]
    TooManyFromHere,
    #[error(transparent)]
    Webrtc(#[from] WebrtcError),
}

pub struct Whep {
    pub taps: Arc<Taps>,
    pub config: WebrtcConfig,
    pub viewers: Peers,
}

/// A viewer admitted: its session and the SDP answer.
pub struct Admitted {
    pub peer: Arc<Peer>,
    pub answer: String,
}

impl Whep {
    pub fn new(taps: Arc<Taps>, config: WebrtcConfig) -> Whep {
        let viewers = Peers::capped(MAX_VIEWERS, config.max_per_ip);
        Whep { taps, config, viewers }
    }

    /// Admits a viewer of `stream_id` from `ip` with its SDP offer.
    /// Whether a push held by this process feeds WebRTC viewers of `stream_id` now.
    pub fn holds(&self, stream_id: &str) -> bool {
        self.taps.get(stream_id).is_some_and(|t| t.webrtc && !t.is_closed())
    }

    pub async fn play(
        self: &Arc<Self>,
        stream_id: &str,
        ip: Option<std::net::IpAddr>,
        offer: &[u8],
    ) -> Result<Admitted, WhepError> {
        let tap =
            self.taps.get(stream_id).filter(|t| t.webrtc && !t.is_closed()).ok_or(WhepError::NotLive)?;
        // Held until the viewer is inserted (or the setup fails): concurrent offers count.
        let place = self.viewers.reserve(ip).map_err(|r| match r {
            Refused::Full => WhepError::Full,
            Refused::Holder => WhepError::TooManyFromHere,
        })?;
        crate::media::gst::init().map_err(WebrtcError::Media)?;
        let mut offer = sdp::parse_offer(offer).map_err(WebrtcError::BadOffer)?;
        let (video, audio) = sdp::codecs(&offer, false);
        sdp::keep_only(&mut offer, &[&video, &audio].into_iter().flatten().collect::<Vec<_>>());
        if video.is_none() && audio.is_none() {
            return Err(WebrtcError::BadOffer(
                "the offer has neither H.264 (packetization-mode=1) nor Opus".into(),
            )
            .into());
        }
        let config = self.config.clone();
        // The consumers' sources start with the rung's caps when they are known already.
        let caps = (tap.webrtc_video.caps(), tap.webrtc_audio.caps());
        let built = tokio::task::spawn_blocking(move || build(offer, video, audio, caps, &config))
            .await
            .map_err(|e| WebrtcError::Media(e.to_string()))?;
        let viewer = match built {
            Ok(v) => v,
            Err(e) => return Err(e.into()),
        };
        let peer = Arc::new(Peer::new(stream_id, ip, viewer.webrtc.clone()));
        let ids = (
            viewer.video.as_ref().map(|v| tap.webrtc_video.add(v.clone())),
            viewer.audio.as_ref().map(|a| tap.webrtc_audio.add(a.clone())),
        );
        tap.request_keyframe();
        self.viewers.insert(peer.clone(), Some(place));
        tracing::info!(stream = %stream_id, viewer = %peer.id, viewers = self.viewers.count(), "WHEP viewer joined");
        let this = self.clone();
        let watched = peer.clone();
        tokio::spawn(async move {
            this.watch(&watched, &tap).await;
            if let Some(id) = ids.0 {
                tap.webrtc_video.remove(id);
            }
            if let Some(id) = ids.1 {
                tap.webrtc_audio.remove(id);
            }
            this.viewers.remove(&watched.id);
            let pipeline = viewer.pipeline;
            let _ = tokio::task::spawn_blocking(move || drop(pipeline)).await;
            tracing::info!(stream = %watched.stream_id, viewer = %watched.id, "WHEP viewer left");
        });
        Ok(Admitted { peer, answer: viewer.answer })
    }

    /// Waits for the end of a viewer: DELETE, the push's end, or its ICE lost.
    async fn watch(&self, peer: &Peer, tap: &Tap) {
        let mut closed = tap.closed();
        tokio::select! {
            _ = peer.end.notified() => {}
            _ = closed.wait_for(|c| *c) => {}
            _ = peer.lost() => {}
        }
    }
}

struct Viewer {
    pipeline: StopOnDrop,
    webrtc: gst::Element,
    video: Option<gstreamer_app::AppSrc>,
    audio: Option<gstreamer_app::AppSrc>,
    answer: String,
}

/// The viewer's pipeline: `appsrc ! payloader ! webrtcbin` per codec the offer takes, each on
/// the transceiver of the offer's m-line, sending only.
fn build(
    offer: gst_sdp::SDPMessage,
    video: Option<Offered>,
    audio: Option<Offered>,
    known: (Option<gst::Caps>, Option<gst::Caps>),
    config: &WebrtcConfig,
) -> Result<Viewer, WebrtcError> {
    let media = |e: String| WebrtcError::Media(e);
    let pipeline = gst::Pipeline::new();
    let webrtc = gst::ElementFactory::make("webrtcbin")
        .property_from_str("bundle-policy", "max-bundle")
        .build()
        .map_err(|e| media(e.to_string()))?;
    config.configure(&webrtc);
    pipeline.add(&webrtc).map_err(|e| media(e.to_string()))?;
    let pipeline = StopOnDrop(pipeline);
    let mut srcs = (None, None);
    if let Some(v) = &video {
        let caps = known.0.clone().unwrap_or_else(|| {
            gst::Caps::builder("video/x-h264")
                .field("stream-format", "byte-stream")
                .field("alignment", "au")
                .field("profile", "constrained-baseline")
                .build()
        });
        let pay = gst::ElementFactory::make("rtph264pay")
            .property("pt", v.pt)
            .property("config-interval", -1i32)
            .property_from_str("aggregate-mode", "zero-latency")
            .property("mtu", 1200u32)
            .build()
            .map_err(|e| media(e.to_string()))?;
        srcs.0 = Some(send(&pipeline.0, &webrtc, "video", &caps, pay, v)?);
    }
    if let Some(a) = &audio {
        let caps = known.1.clone().unwrap_or_else(|| {
            gst::Caps::builder("audio/x-opus")
                .field("channel-mapping-family", 0i32)
                .field("channels", 2i32)
                .build()
        });
        let pay = gst::ElementFactory::make("rtpopuspay")
            .property("pt", a.pt)
            .build()
            .map_err(|e| media(e.to_string()))?;
        srcs.1 = Some(send(&pipeline.0, &webrtc, "audio", &caps, pay, a)?);
    }
    pipeline
        .0
        .set_state(gst::State::Playing)
        .map_err(|e| media(format!("WHEP pipeline cannot play: {e}")))?;
    let answer = crate::media::webrtc::answer(&webrtc, offer, config).map_err(media)?;
    Ok(Viewer { pipeline, webrtc, video: srcs.0, audio: srcs.1, answer })
}

/// `appsrc ! pay ! capsfilter ! webrtcbin.sink_<mline>`, the transceiver sending only.
fn send(
    pipeline: &gst::Pipeline,
    webrtc: &gst::Element,
    name: &str,
    caps: &gst::Caps,
    pay: gst::Element,
    offered: &Offered,
) -> Result<gstreamer_app::AppSrc, WebrtcError> {
    let media = |e: String| WebrtcError::Media(e);
    let src = consumer_src(name, caps, CONSUMER_MAX_BYTES).map_err(media)?;
    let filter = gst::ElementFactory::make("capsfilter")
        .property("caps", &offered.caps)
        .build()
        .map_err(|e| media(e.to_string()))?;
    pipeline.add_many([src.upcast_ref(), &pay, &filter]).map_err(|e| media(e.to_string()))?;
    gst::Element::link_many([src.upcast_ref(), &pay, &filter]).map_err(|e| media(e.to_string()))?;
    let template =
        webrtc.pad_template("sink_%u").ok_or_else(|| media("webrtcbin has no sink template".into()))?;
    let pad = webrtc
        .request_pad(&template, Some(&format!("sink_{}", offered.mline)), Some(&offered.caps))
        .ok_or_else(|| media(format!("webrtcbin gave no {name} pad")))?;
    let transceiver = pad.property::<gst_webrtc::WebRTCRTPTransceiver>("transceiver");
    transceiver.set_property("direction", gst_webrtc::WebRTCRTPTransceiverDirection::Sendonly);
    transceiver.set_property("codec-preferences", &offered.caps);
    let out = filter.static_pad("src").ok_or_else(|| media("capsfilter has no src pad".into()))?;
    out.link(&pad).map_err(|e| media(format!("linking {name} to webrtcbin: {e}")))?;
    Ok(src)
}
