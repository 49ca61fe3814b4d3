//! RTSP playback on `SLUICE_RTSP_ADDR` (gst-rtsp-server): `rtsp://<host>:<port>/live/<id>`
//! (`?token=` when the stream is signed) plays the push's own H.264 and AAC, taken from the
//! stream's [`Tap`] with no extra encode, over RTP on UDP or interleaved in the RTSP TCP
//! connection. Each client gets its own media (an `appsrc` per stream, bounded like a WHEP
//! viewer's). DESCRIBE and SETUP are authorised with the same check as HLS playback; a push's
//! end closes the clients of its stream.
//!
//! The server runs on its own GLib main loop thread. Connections are bounded in all and per
//! client IP; sessions are bounded in all, and a watch on the session pool removes sessions
//! that went silent for their timeout (60 s), which frees their media.

use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use gstreamer as gst;
use gstreamer::glib;
use gstreamer::glib::translate::FromGlibPtrBorrow;
use gstreamer::prelude::*;
use gstreamer_rtsp as gst_rtsp;
use gstreamer_rtsp_server as rtsp;
use gstreamer_rtsp_server::prelude::*;
use gstreamer_rtsp_server::subclass::prelude::*;

use crate::media::live::taps::{consumer_src, Tap, Taps};
use crate::services::viewers::Viewers;
use crate::slots::Slots;

/// RTSP clients served at once, and per client IP.
pub const MAX_CLIENTS: usize = 256;
pub const MAX_CLIENTS_PER_IP: usize = 16;
/// What an RTSP client's queue may hold: the source's bitrate is the publisher's (a second of
/// 8 Mbit/s and a keyframe).
const SOURCE_MAX_BYTES: u64 = 2 * 1024 * 1024;
/// How long an authorisation may take before the request is refused.
const AUTHORIZE_DEADLINE: Duration = Duration::from_secs(5);

/// What the authorisation of a request says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Allowed,
    /// Allowed, and another node holds the push: its RTSP base URL (`rtsp://host:port`); a
    /// DESCRIBE is redirected there (302 with `Location`, which ffmpeg and rtspsrc follow).
    Elsewhere(String),
    /// Signed and no valid token (401).
    Unauthorized,
    /// No such stream (404).
    NotFound,
    Unavailable,
}

/// Authorises playback of a stream: `(stream id, token, client IP)`.
pub type Authorize = Arc<
    dyn Fn(String, Option<String>, Option<IpAddr>) -> Pin<Box<dyn Future<Output = Verdict> + Send>>
        + Send
        + Sync,
>;

/// The running server; dropping it stops the main loop.
pub struct RtspServer {
    pub addr: SocketAddr,
    main_loop: glib::MainLoop,
}

impl Drop for RtspServer {
    fn drop(&mut self) {
        self.main_loop.quit();
    }
}

/// Starts the RTSP server on `addr` (port 0 picks one). Blocking: call it off the async workers.
pub fn start(
    addr: SocketAddr,
    taps: Arc<Taps>,
    authorize: Authorize,
    viewers: Arc<Viewers>,
    runtime: tokio::runtime::Handle,
) -> Result<RtspServer, String> {
    crate::media::gst::init()?;
    let server = rtsp::RTSPServer::new();
    server.set_address(&addr.ip().to_string());
    server.set_service(&addr.port().to_string());
    server.set_backlog(64);
    let factory: LiveFactory = glib::Object::new();
    factory.imp().taps.set(taps.clone()).map_err(|_| "RTSP factory set twice")?;
    factory.set_shared(false);
    factory.set_protocols(gst_rtsp::RTSPLowerTrans::UDP | gst_rtsp::RTSPLowerTrans::TCP);
    let mounts = Arc::new(Mounts {
        points: server.mount_points().ok_or("RTSP server has no mount points")?,
        factory,
        mounted: Mutex::default(),
    });

    let context = glib::MainContext::new();
    let main_loop = glib::MainLoop::new(Some(&context), false);
    let per_ip: Arc<Slots<IpAddr>> = Slots::capped(MAX_CLIENTS_PER_IP, MAX_CLIENTS);
    let (ctx, clients) = (context.clone(), per_ip.clone());
    let handler = server.connect_client_connected(move |_, client| {
        admit(client, &clients, (&taps, &mounts, &viewers), &authorize, &runtime, &ctx);
    });
    let (tx, rx) = std::sync::mpsc::channel();
    let run_loop = main_loop.clone();
    std::thread::Builder::new()
        .name("rtsp".into())
        .spawn(move || {
            let source = match context.with_thread_default(|| server.attach(Some(&context))) {
                Ok(Ok(source)) => source,
                Ok(Err(e)) | Err(e) => {
                    let _ = tx.send(Err(format!("RTSP: {e}")));
                    return;
                }
            };
            // gst-rtsp-server only marks silent sessions expired; the pool's watch removes them.
            let pool = server.session_pool();
            let pool_watch = pool.as_ref().map(|pool| {
                pool.set_max_sessions(MAX_CLIENTS as u32);
                let watch =
                    pool.create_watch(Some("rtsp-session-timeouts"), glib::Priority::DEFAULT, |pool| {
                        pool.cleanup();
                        glib::ControlFlow::Continue
                    });
                watch.attach(Some(&context));
                watch
            });
            let _ = tx.send(Ok(server.bound_port()));
            context.with_thread_default(|| run_loop.run()).ok();
            // Stopped: the listener's source, the handler (which holds the context, the
            // authorisation and through it the database pool) and every client go, so nothing
            // keeps the server alive in a cycle.
            if let Some(source) = context.find_source_by_id(&source) {
                source.destroy();
            }
            if let Some(watch) = pool_watch {
                watch.destroy();
            }
            server.disconnect(handler);
            server.client_filter(Some(&mut |_, _| rtsp::RTSPFilterResult::Remove));
            while context.iteration(false) {}
        })
        .map_err(|e| format!("RTSP thread: {e}"))?;
    let port = rx.recv_timeout(Duration::from_secs(10)).map_err(|_| "RTSP server did not start")??;
    let port = u16::try_from(port).map_err(|_| format!("RTSP server bound no port ({port})"))?;
    tracing::info!(addr = %SocketAddr::new(addr.ip(), port), "RTSP playback listening");
    Ok(RtspServer { addr: SocketAddr::new(addr.ip(), port), main_loop })
}

/// A new client: counted (in all and per IP; beyond the caps it is closed), and its DESCRIBE
/// and SETUP requests authorised.
fn admit(
    client: &rtsp::RTSPClient,
    per_ip: &Arc<Slots<IpAddr>>,
    (taps, mounts, viewers): (&Arc<Taps>, &Arc<Mounts>, &Arc<Viewers>),
    authorize: &Authorize,
    runtime: &tokio::runtime::Handle,
    context: &glib::MainContext,
) {
    let ip = peer_ip(client);
    let key = ip.unwrap_or(IpAddr::from([0, 0, 0, 0]));
    let Some(place) = per_ip.take(key) else {
        tracing::info!(peer = ?ip, "RTSP client refused: too many connections");
        client.close();
        return;
    };
    // Given back when the client is gone.
    let place = Mutex::new(Some(place));
    // The streams this client's requests were authorised for: a SETUP whose URL lost the
    // token (players build it from the base URL and the control path) is the DESCRIBE's. Each
    // counts the client as its viewer until it is gone.
    let authorised: Arc<Mutex<Vec<String>>> = Arc::default();
    // Tells this client's watchers (`close_with_push`) that it is gone.
    let (gone_tx, gone) = tokio::sync::watch::channel(false);
    let (watched, left) = (authorised.clone(), viewers.clone());
    client.connect_closed(move |_| {
        gone_tx.send_replace(true);
        for stream in watched.lock().unwrap_or_else(|p| p.into_inner()).drain(..) {
            left.rtsp_left(&stream);
        }
        drop(place.lock().unwrap_or_else(|p| p.into_inner()).take());
    });
    // The `Location` of the redirect this client's DESCRIBE is answered with, if any.
    let redirect: Arc<Mutex<Option<String>>> = Arc::default();
    let check = {
        let authorised = authorised.clone();
        let (taps, mounts, authorize, runtime, context) =
            (taps.clone(), mounts.clone(), authorize.clone(), runtime.clone(), context.clone());
        let viewers = viewers.clone();
        let gone = gone.clone();
        let redirect = redirect.clone();
        move |client: &rtsp::RTSPClient,
              ctx: &rtsp::RTSPContext,
              describe: bool|
              -> gst_rtsp::RTSPStatusCode {
            let Some(uri) = ctx.uri().map(|u| u.request_uri()) else {
                return gst_rtsp::RTSPStatusCode::NotFound;
            };
            let Some((stream, token)) = stream_and_token(&uri) else {
                return gst_rtsp::RTSPStatusCode::NotFound;
            };
            let known = authorised.lock().unwrap_or_else(|p| p.into_inner()).contains(&stream);
            let verdict = if known {
                Verdict::Allowed
            } else {
                runtime.block_on(async {
                    tokio::time::timeout(AUTHORIZE_DEADLINE, authorize(stream.clone(), token, ip))
                        .await
                        .unwrap_or(Verdict::Unavailable)
                })
            };
            match verdict {
                Verdict::Allowed => {}
                Verdict::Elsewhere(base) if describe => {
                    let Some(location) = relocated(&uri, &base) else {
                        return gst_rtsp::RTSPStatusCode::NotFound;
                    };
                    tracing::debug!(stream = %stream, "RTSP: DESCRIBE redirected to the node holding the push");
                    *redirect.lock().unwrap_or_else(|p| p.into_inner()) = Some(location);
                    return gst_rtsp::RTSPStatusCode::MoveTemporarily;
                }
                Verdict::Elsewhere(_) => return gst_rtsp::RTSPStatusCode::NotFound,
                Verdict::Unauthorized => return gst_rtsp::RTSPStatusCode::Unauthorized,
                Verdict::NotFound => return gst_rtsp::RTSPStatusCode::NotFound,
                Verdict::Unavailable => return gst_rtsp::RTSPStatusCode::ServiceUnavailable,
            }
            let Some(tap) = taps.get(&stream).filter(|t| t.rtsp && !t.is_closed()) else {
                return gst_rtsp::RTSPStatusCode::NotFound;
            };
            let first = {
                let mut authorised = authorised.lock().unwrap_or_else(|p| p.into_inner());
                let first = !authorised.contains(&stream);
                if first {
                    if authorised.len() >= 16 {
                        viewers.rtsp_left(&authorised.remove(0));
                    }
                    authorised.push(stream.clone());
                    viewers.rtsp_joined(&stream);
                }
                first
            };
            // Once per client and stream, however many requests it sends.
            if first {
                mounts.ensure(&stream, &tap, &runtime);
                close_with_push(client, &tap, gone.clone(), &runtime, &context);
            }
            gst_rtsp::RTSPStatusCode::Ok
        }
    };
    let setup = check.clone();
    client.connect_pre_describe_request(move |client, ctx| check(client, ctx, true));
    client.connect_pre_setup_request(move |client, ctx| setup(client, ctx, false));
    // gst-rtsp-server sends a refused DESCRIBE's response with no headers of ours: the
    // `Location` of a redirect is added as it goes out (on the same main-loop thread, right
    // after the pre-describe check). The bindings do not wrap `send-message`.
    client.connect("send-message", false, move |args| {
        let ptr = args.get(2)?.get::<glib::Pointer>().ok()? as *mut gst_rtsp::ffi::GstRTSPMessage;
        if ptr.is_null() {
            return None;
        }
        // SAFETY: `send-message` hands the response about to be written, valid for the call.
        let message = unsafe { gst_rtsp::rtsp_message::RTSPMessage::from_glib_borrow(ptr) };
        let redirecting = unsafe {
            (*ptr).type_ == gst_rtsp::ffi::GST_RTSP_MESSAGE_RESPONSE
                && (*ptr).type_data.response.code == gst_rtsp::ffi::GST_RTSP_STS_MOVE_TEMPORARILY
        };
        if redirecting {
            if let Some(location) = redirect.lock().unwrap_or_else(|p| p.into_inner()).take() {
                message.add_header(gst_rtsp::RTSPHeaderField::Location, &location);
            }
        }
        None
    });
}

/// `uri` (the request's, `rtsp://this:port/live/<id>?token=…`) on the node at `base`: its path
/// and query kept, so the token goes along.
fn relocated(uri: &str, base: &str) -> Option<String> {
    let parsed = url::Url::parse(uri).ok()?;
    let query = parsed.query().map(|q| format!("?{q}")).unwrap_or_default();
    Some(format!("{}{}{query}", base.trim_end_matches('/'), parsed.path()))
}

/// The streams mounted at `/live/<id>`: each while its push lasts, from its first client on.
/// (gst-rtsp-server finds a factory by its exact path, and a control path such as
/// `/live/<id>/stream=0` by prefix.)
struct Mounts {
    points: rtsp::RTSPMountPoints,
    factory: LiveFactory,
    /// By stream id: the tap the mount serves.
    mounted: Mutex<HashMap<String, Arc<Tap>>>,
}

impl Mounts {
    fn ensure(self: &Arc<Self>, stream: &str, tap: &Arc<Tap>, runtime: &tokio::runtime::Handle) {
        {
            let mut mounted = self.mounted.lock().unwrap_or_else(|p| p.into_inner());
            if mounted.get(stream).is_some_and(|t| Arc::ptr_eq(t, tap)) {
                return;
            }
            mounted.insert(stream.to_string(), tap.clone());
        }
        let path = format!("/live/{stream}");
        self.points.add_factory(&path, self.factory.clone());
        let (this, tap, stream) = (self.clone(), tap.clone(), stream.to_string());
        let mut closed = tap.closed();
        runtime.spawn(async move {
            let _ = closed.wait_for(|c| *c).await;
            let mut mounted = this.mounted.lock().unwrap_or_else(|p| p.into_inner());
            if mounted.get(&stream).is_some_and(|t| Arc::ptr_eq(t, &tap)) {
                mounted.remove(&stream);
                this.points.remove_factory(&path);
            }
        });
    }
}

/// Closes the client when the push it plays ends (DELETE, disable, the publisher leaving); the
/// watch ends with the client (`gone`) too, so connections that come and go leave nothing.
fn close_with_push(
    client: &rtsp::RTSPClient,
    tap: &Arc<Tap>,
    mut gone: tokio::sync::watch::Receiver<bool>,
    runtime: &tokio::runtime::Handle,
    context: &glib::MainContext,
) {
    let mut closed = tap.closed();
    let (weak, context) = (client.downgrade(), context.clone());
    runtime.spawn(async move {
        tokio::select! {
            _ = closed.wait_for(|c| *c) => {}
            _ = gone.wait_for(|g| *g) => return,
        }
        context.invoke(move || {
            if let Some(client) = weak.upgrade() {
                client.close();
            }
        });
    });
}

/// The stream id and token of `rtsp://host:port/live/<id>[/stream=N][?token=…]`.
pub fn stream_and_token(uri: &str) -> Option<(String, Option<String>)> {
    let url = url::Url::parse(uri).ok()?;
    let mut segments = url.path_segments()?;
    if segments.next()? != "live" {
        return None;
    }
    let id = segments.next().filter(|s| !s.is_empty())?.to_string();
    let token = url.query_pairs().find(|(k, _)| k == "token").map(|(_, v)| {
        // A control path appended after the query (`?token=…/stream=0`) is not the token's.
        let v = v.into_owned();
        match v.find("/stream=") {
            Some(i) => v[..i].to_string(),
            None => v,
        }
    });
    Some((id, token))
}

/// The client's address, from its RTSP connection.
fn peer_ip(client: &rtsp::RTSPClient) -> Option<IpAddr> {
    use glib::translate::ToGlibPtr;
    // SAFETY: the connection belongs to the client, which outlives this call; the returned
    // string belongs to the connection and is copied at once.
    unsafe {
        let connection = rtsp::ffi::gst_rtsp_client_get_connection(client.to_glib_none().0);
        if connection.is_null() {
            return None;
        }
        let ip = gst_rtsp::ffi::gst_rtsp_connection_get_ip(connection);
        if ip.is_null() {
            return None;
        }
        std::ffi::CStr::from_ptr(ip).to_str().ok()?.parse().ok()
    }
}

mod imp {
    use super::*;

    #[derive(Default)]
    pub struct LiveFactory {
        pub taps: OnceLock<Arc<Taps>>,
    }

    #[glib::object_subclass]
    impl ObjectSubclass for LiveFactory {
        const NAME: &'static str = "SluiceLiveFactory";
        type Type = super::LiveFactory;
        type ParentType = rtsp::RTSPMediaFactory;
    }

    impl ObjectImpl for LiveFactory {}

    impl RTSPMediaFactoryImpl for LiveFactory {
        fn create_element(&self, url: &gst_rtsp::RTSPUrl) -> Option<gst::Element> {
            let (stream, _) = stream_and_token(&url.request_uri())?;
            let tap = self.taps.get()?.get(&stream).filter(|t| t.rtsp && !t.is_closed())?;
            match media_bin(&tap) {
                Ok(bin) => Some(bin.upcast()),
                Err(e) => {
                    tracing::warn!(stream = %stream, error = %e, "RTSP: no media");
                    None
                }
            }
        }
    }
}

glib::wrapper! {
    pub struct LiveFactory(ObjectSubclass<imp::LiveFactory>) @extends rtsp::RTSPMediaFactory;
}

/// `appsrc ! parse ! pay` for the push's video (`pay0`) and audio (`pay1`), fed by the tap.
fn media_bin(tap: &Tap) -> Result<gst::Bin, String> {
    let video = tap.source_video.caps().ok_or("the push has sent no video yet")?;
    let bin = gst::Bin::new();
    let add =
        |src: &gstreamer_app::AppSrc, parse: &str, pay: &str, name: &str, pt: u32| -> Result<(), String> {
            let parse = gst::ElementFactory::make(parse).build().map_err(|e| e.to_string())?;
            let pay = gst::ElementFactory::make(pay)
                .name(name)
                .property("pt", pt)
                .build()
                .map_err(|e| e.to_string())?;
            if pay.has_property("config-interval") {
                pay.set_property("config-interval", -1i32);
            }
            bin.add_many([src.upcast_ref(), &parse, &pay]).map_err(|e| e.to_string())?;
            gst::Element::link_many([src.upcast_ref(), &parse, &pay]).map_err(|e| e.to_string())
        };
    let v = consumer_src("v", &video, SOURCE_MAX_BYTES)?;
    add(&v, "h264parse", "rtph264pay", "pay0", 96)?;
    let a = match tap.source_audio.caps() {
        Some(audio) => {
            let a = consumer_src("a", &audio, SOURCE_MAX_BYTES / 8)?;
            add(&a, "aacparse", "rtpmp4gpay", "pay1", 97)?;
            Some(a)
        }
        None => None,
    };
    tap.source_video.add(v);
    if let Some(a) = a {
        tap.source_audio.add(a);
    }
    Ok(bin)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths() {
        assert_eq!(stream_and_token("rtsp://h:1/live/abc"), Some(("abc".into(), None)));
        assert_eq!(
            stream_and_token("rtsp://h:1/live/abc/stream=0?token=t.1"),
            Some(("abc".into(), Some("t.1".into())))
        );
        assert_eq!(
            stream_and_token("rtsp://h:1/live/abc?token=t.1/stream=1"),
            Some(("abc".into(), Some("t.1".into())))
        );
        assert_eq!(stream_and_token("rtsp://h:1/vod/abc"), None);
        assert_eq!(stream_and_token("rtsp://h:1/live/"), None);
        assert_eq!(stream_and_token("garbage"), None);
    }
}
