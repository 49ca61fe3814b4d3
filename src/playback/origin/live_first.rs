//! [`LiveFirst`]: live media GETs served without the router (split from `origin.rs`).

use std::sync::Arc;

use poem::http::{Method, StatusCode};
use poem::{Request, Response};

#[cfg(test)]
use super::routes;
use super::{live_media, status, Carried, LivePath, Origin};

/// Live media GETs (`/live/<id>/[t/<token>/]<session>/<rendition>/<file>`: playlist reloads,
/// parts, segments, init sections), answered without passing the router and the layers of the
/// playback routes: the most frequent requests by far, every viewer several times a second.
/// They are served by the same [`live_media`] as the routes of [`super::routes`], which still answer
/// every other request, and these too when a path has anything unusual (percent-escapes, other
/// methods, `t` as a session). `inner` is the whole tree, with the playback routes under `prefix`.
pub struct LiveFirst<E> {
    origin: Arc<Origin>,
    prefix: &'static str,
    inner: E,
}

impl<E> LiveFirst<E> {
    pub fn new(origin: Arc<Origin>, prefix: &'static str, inner: E) -> Self {
        LiveFirst { origin, prefix, inner }
    }
}

/// What [`LiveFirst`] serves of `path`: the token's carrier and the media's path segments.
fn live_target<'a>(prefix: &str, path: &'a str) -> Option<(Carried<'a>, LivePath<'a>)> {
    let rest = path.strip_prefix(prefix)?.strip_prefix("/live/")?;
    let mut segs = [""; 6];
    let mut n = 0;
    // One pass over the bytes (a `split('/')` searched for each slash anew, and a `contains`
    // scanned each segment again): every live media request passes here.
    let mut start = 0;
    for (i, b) in rest.bytes().chain([b'/']).enumerate() {
        match b {
            b'%' => return None,
            b'/' => {
                if n == segs.len() || i == start {
                    return None;
                }
                segs[n] = rest.get(start..i)?;
                n += 1;
                start = i + 1;
            }
            _ => {}
        }
    }
    match (n, segs) {
        // `t` as a session is the token path's key (`/live/<id>/t/<token>/key`): the router's.
        (4, [id, session, rendition, file, ..]) if session != "t" => {
            Some((Carried::Query, (id, session, rendition, file)))
        }
        (6, [id, "t", token, session, rendition, file]) => {
            Some((Carried::Path(token), (id, session, rendition, file)))
        }
        _ => None,
    }
}

impl<E: poem::Endpoint<Output = Response>> poem::Endpoint for LiveFirst<E> {
    type Output = Response;

    async fn call(&self, req: Request) -> poem::Result<Response> {
        let target =
            if req.method() == Method::GET { live_target(self.prefix, req.uri().path()) } else { None };
        let Some((carried, parts)) = target else { return self.inner.call(req).await };
        // As the routes' `CatchPanic`: a panic answers 500 and leaves the server serving.
        let served = std::panic::AssertUnwindSafe(live_media(&req, &self.origin, carried, parts));
        Ok(futures_util::FutureExt::catch_unwind(served)
            .await
            .unwrap_or_else(|_| status(StatusCode::INTERNAL_SERVER_ERROR, "internal error")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn live_first_takes_only_plain_live_media_paths() {
        let t = |path| live_target("/play", path).map(|(c, p)| (c.path_token(), p));
        assert_eq!(t("/play/live/S1/ab/720p/index.m3u8"), Some((None, ("S1", "ab", "720p", "index.m3u8"))));
        assert_eq!(
            t("/play/live/S1/t/v1~x.k.0f/ab/720p/p3.m4s"),
            Some((Some("v1~x.k.0f"), ("S1", "ab", "720p", "p3.m4s")))
        );
        for router in [
            "/play/live/S1/master.m3u8",
            "/play/live/S1/key",
            "/play/live/S1/t/tok/key",
            "/play/live/S1/",
            "/play/live/S1/whep/w1",
            "/play/live/S1//720p/index.m3u8",
            "/play/live/S1/ab/720p/index%2Em3u8",
            "/play/live/S1/x/tok/ab/720p/p3.m4s",
            "/play/live/S1/t/tok/ab/720p/p3.m4s/more",
            "/play/vod/V1/720p/index.m3u8",
            "/live/S1/ab/720p/index.m3u8",
        ] {
            assert!(t(router).is_none(), "{router} is the router's");
        }
    }

    /// The router takes the token paths too (for what LiveFirst leaves to it): the route is
    /// found (the handler then misses its data, 500), where an unknown shape is 404.
    #[tokio::test]
    async fn the_router_has_the_token_paths() {
        use poem::Endpoint;
        let routes = routes();
        for (method, path, found) in [
            (Method::HEAD, "/live/S1/t/v1~x.k.0f/ab/720p/p3.m4s", true),
            (Method::GET, "/live/S1/t/v1~x.k.0f/key", true),
            (Method::GET, "/live/S1/ab/720p/index.m3u8", true),
            (Method::GET, "/live/S1/t/v1~x.k.0f/ab/720p", false),
        ] {
            let req = Request::builder().method(method.clone()).uri(path.parse().expect("uri")).finish();
            let status = match routes.call(req).await {
                Ok(resp) => resp.status(),
                Err(e) => e.status(),
            };
            let want = if found { StatusCode::INTERNAL_SERVER_ERROR } else { StatusCode::NOT_FOUND };
            assert_eq!(status, want, "{method} {path}");
        }
    }
}
