//! WHIP ingest (RFC 9725): a publisher's offer of H.264 and Opus, with the push password as its
//! bearer token, opens the same push session as RTMP does (`Streams::begin_push`: the stream
//! goes live, `stream.live`) and feeds the same outputs: `webrtcbin`'s H.264 goes to the
//! `video` tee as it is, its Opus is decoded and encoded to AAC once for HLS (and, for WHEP,
//! back to Opus by the tap, like an RTMP push's AAC). The session ends on DELETE of its
//! location, when the stream is deleted or disabled, when ICE fails, on a pipeline error, and
//! when no media came for [`crate::media::ingest::liveness::NO_MEDIA`].

use std::sync::Arc;

use gstreamer as gst;
use gstreamer::prelude::*;
use tokio::sync::mpsc;

use crate::domain::content_key::MasterKey;
use crate::domain::stream::InputRole;
use crate::media::ingest::pipeline::{Front, IngestPipeline, PipelineReport};
use crate::media::ingest::push::{self, NotStarted, Publisher, Refused};
use crate::media::live::session::{LiveSessions, Outputs, PushEnd};
use crate::media::webrtc::sdp;
use crate::media::webrtc::{Peer, Peers, WebrtcConfig, WebrtcError};
use crate::services::streams::{StreamError, Streams};
use crate::store::streams::StreamRow;
use crate::store::Db;

const DESCRIPTION: &str = include_str!("../../../pipelines/whip.txt");

/// Why a publish was refused (CONTRACT: WHIP).
#[derive(Debug, thiserror::Error)]
pub enum WhipError {
    #[error("unknown stream key")]
    UnknownKey,
    #[error("wrong or missing bearer token")]
    Unauthorized,
    /// Disabled or live already (409).
    #[error("{0}")]
    Refused(String),
    #[error(transparent)]
    Webrtc(#[from] WebrtcError),
    #[error("ingest is unavailable")]
    Unavailable,
}

/// What WHIP ingest decides publishes with, and where their media goes.
pub struct Whip {
    pub db: Db,
    pub master_key: MasterKey,
    pub streams: Arc<Streams>,
    pub outputs: Arc<LiveSessions>,
    pub config: WebrtcConfig,
    pub publishers: Peers,
}

/// A publish admitted: its session and the SDP answer.
pub struct Published {
    pub peer: Arc<Peer>,
    pub answer: String,
}

impl Whip {
    /// `POST whipUrl`: checks the key and the bearer, opens the push session and answers.
    pub async fn publish(
        self: &Arc<Self>,
        key: &str,
        bearer: Option<&str>,
        offer: &[u8],
    ) -> Result<Published, WhipError> {
        let stream = match self.db.stream_by_key(key).await {
            Ok(Some(s)) => s,
            Ok(None) => return Err(WhipError::UnknownKey),
            Err(e) => {
                tracing::error!(error = %e, "whip: loading stream");
                return Err(WhipError::Unavailable);
            }
        };
        let authorised =
            bearer.is_some_and(|b| crate::store::secrets::push_password_ok(&self.master_key, &stream, b));
        if !authorised {
            return Err(WhipError::Unauthorized);
        }
        crate::media::gst::init().map_err(WebrtcError::Media)?;
        let mut offer = sdp::parse_offer(offer).map_err(WebrtcError::BadOffer)?;
        let (video, audio) = sdp::codecs(&offer, true);
        let Some(video) = video else {
            return Err(WebrtcError::BadOffer("the offer has no H.264".into()).into());
        };
        sdp::keep_only(&mut offer, &[Some(&video), audio.as_ref()].into_iter().flatten().collect::<Vec<_>>());
        let opened = match push::begin(&self.streams, &stream).await {
            Ok(opened) => opened,
            Err(Refused::State(StreamError::NotFound)) => return Err(WhipError::UnknownKey),
            // 409 for no credits too, as for any state that refuses a push now; 402 is kept
            // "for future use" by RFC 9110 and WHIP clients give it no meaning.
            Err(Refused::State(e)) => return Err(WhipError::Refused(e.to_string())),
            Err(Refused::Unavailable) => return Err(WhipError::Unavailable),
        };
        // The push session is open: the rest runs on its own task, so a client that hangs up
        // mid-setup (this request's future dropped) cannot leave the stream live for good.
        let this = self.clone();
        tokio::spawn(async move { this.open(stream, offer, opened).await })
            .await
            .map_err(|e| WhipError::from(WebrtcError::Media(e.to_string())))?
    }

    /// Sets up an opened push session (its live output, then the negotiation) and starts it;
    /// ends the push if that fails.
    async fn open(
        self: Arc<Self>,
        stream: StreamRow,
        offer: gstreamer_sdp::SDPMessage,
        opened: push::Opened,
    ) -> Result<Published, WhipError> {
        let (id, config) = (stream.id.clone(), self.config.clone());
        let front = |outputs| async move {
            tokio::task::spawn_blocking(move || build(&id, offer, outputs, &config))
                .await
                .map_err(|e| WebrtcError::Media(e.to_string()))
                .and_then(|r| r)
        };
        let (pipeline, reports, webrtc, answer) =
            match push::start(&self.streams, &self.outputs, &stream, &opened, front).await {
                Ok(started) => started,
                Err(NotStarted::Outputs) => return Err(WhipError::Unavailable),
                Err(NotStarted::Front(e)) => return Err(e.into()),
            };
        let peer = Arc::new(Peer::new(&stream.id, None, webrtc));
        self.publishers.insert(peer.clone(), None);
        tracing::info!(stream = %stream.id, session = %peer.id, "WHIP push started");
        let this = self.clone();
        let session = peer.clone();
        tokio::spawn(async move {
            let publisher =
                Publisher { role: InputRole::Primary, audio_codec: Some("opus"), sends_keyframes: false };
            let lost = session.lost();
            let ended = async {
                tokio::select! {
                    _ = session.end.notified() => "the publisher ended the session".to_string(),
                    _ = lost => "the WebRTC connection was lost".to_string(),
                }
            };
            let why =
                push::watch(&this.streams, &stream, &pipeline, reports, &opened.kill, publisher, ended).await;
            this.publishers.remove(&session.id);
            push::end(&this.streams, &this.outputs, &stream.id, &stream.project_id, pipeline, &why).await;
        });
        Ok(Published { peer, answer })
    }
}

type Built = (IngestPipeline, mpsc::Receiver<PipelineReport>, gst::Element, String);

/// The WHIP pipeline (`pipelines/whip.txt` with the outputs attached), playing, and the answer.
fn build(
    stream_id: &str,
    offer: gstreamer_sdp::SDPMessage,
    outputs: Outputs,
    config: &WebrtcConfig,
) -> Result<Built, WebrtcError> {
    let media = |e: String| WebrtcError::Media(e);
    let pipeline = gst::parse::launch(DESCRIPTION)
        .map_err(|e| media(format!("WHIP pipeline: {e}")))?
        .downcast::<gst::Pipeline>()
        .map_err(|_| media("WHIP pipeline is not a pipeline".into()))?;
    pipeline.set_property("name", format!("whip-{stream_id}"));
    let webrtc = pipeline.by_name("webrtc").ok_or_else(|| media("no webrtcbin".into()))?;
    config.configure(&webrtc);
    let weak = pipeline.downgrade();
    webrtc.connect_pad_added(move |_, pad| {
        if pad.direction() != gst::PadDirection::Src {
            return;
        }
        let Some(pipeline) = weak.upgrade() else { return };
        if let Err(e) = link_received(&pipeline, pad) {
            tracing::warn!(pipeline = %pipeline.name(), error = %e, "whip: a received stream is not used");
        }
    });
    let (ingest, reports) =
        IngestPipeline::assemble(pipeline, Front::Webrtc, outputs, true).map_err(media)?;
    match crate::media::webrtc::answer(&webrtc, offer, config) {
        Ok(answer) => Ok((ingest, reports, webrtc, answer)),
        Err(e) => {
            drop(ingest.stop(PushEnd::Reconnectable));
            Err(media(e))
        }
    }
}

/// Links a stream `webrtcbin` received to its tee: H.264 as it is, Opus through AAC.
fn link_received(pipeline: &gst::Pipeline, pad: &gst::Pad) -> Result<(), String> {
    let caps = pad.current_caps().unwrap_or_else(|| pad.query_caps(None));
    let name = caps
        .structure(0)
        .and_then(|s| s.get::<&str>("encoding-name").ok())
        .unwrap_or_default()
        .to_ascii_uppercase();
    let (description, tee) = match name.as_str() {
        "H264" => (
            "rtph264depay ! h264parse config-interval=-1 \
             ! capsfilter caps=video/x-h264,stream-format=avc,alignment=au",
            "video",
        ),
        "OPUS" => (
            "rtpopusdepay ! opusdec ! audioconvert ! audioresample ! audio/x-raw,rate=48000 \
             ! avenc_aac bitrate=128000 ! aacparse",
            "audio",
        ),
        other => {
            let sink = gst::ElementFactory::make("fakesink").build().map_err(|e| e.to_string())?;
            pipeline.add(&sink).map_err(|e| e.to_string())?;
            sink.sync_state_with_parent().map_err(|e| e.to_string())?;
            let _ = pad.link(&sink.static_pad("sink").ok_or("fakesink has no pad")?);
            return Err(format!("codec {other}"));
        }
    };
    let bin =
        gst::parse::bin_from_description(description, true).map_err(|e| format!("{description}: {e}"))?;
    if tee == "video" {
        // RTP carries no decoding time; the muxers need one. WebRTC H.264 has no B-frames
        // (browsers send constrained baseline), so it is the presentation time.
        let out = bin.static_pad("src").ok_or("depayloader bin has no src")?;
        out.add_probe(gst::PadProbeType::BUFFER, |_, info| {
            let Some(buffer) = info.buffer_mut() else { return gst::PadProbeReturn::Ok };
            match (buffer.dts(), buffer.pts()) {
                (Some(_), _) => gst::PadProbeReturn::Ok,
                (None, Some(pts)) => {
                    buffer.make_mut().set_dts(pts);
                    gst::PadProbeReturn::Ok
                }
                // Nothing to place it at: not muxable.
                (None, None) => gst::PadProbeReturn::Drop,
            }
        });
    }
    pipeline.add(&bin).map_err(|e| e.to_string())?;
    let tee = pipeline.by_name(tee).ok_or("no tee")?;
    bin.link(&tee).map_err(|e| format!("linking to the {name} tee: {e}"))?;
    bin.sync_state_with_parent().map_err(|e| e.to_string())?;
    let sink = bin.static_pad("sink").ok_or("depayloader bin has no sink")?;
    pad.link(&sink).map_err(|e| format!("linking the received {name}: {e}"))?;
    Ok(())
}
