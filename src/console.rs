//! The console at `/` (CONTRACT: Console): the single-page app of `console/`, embedded in the
//! binary at build time (`build.rs`), served with `index.html` for each of its client routes
//! and its hashed assets under `/assets/` cached for a year. It is a client of the public API
//! and nothing else; its Content-Security-Policy lets it reach only this origin (and the
//! playback base, for media and WHEP, when that is another origin).
//!
//! A binary built before the console was built answers `/` with how to build it.

use poem::http::{header, Method, StatusCode};
use poem::{handler, web::Data, web::Path, Endpoint, EndpointExt, Response, Route};

mod assets {
    include!(concat!(env!("OUT_DIR"), "/console_assets.rs"));
}

/// The console's client routes besides `/` and those under `/p/` (each answers `index.html`).
const PAGES: [&str; 4] = ["/login", "/projects", "/account", "/accept-invitation"];
/// How long a hashed asset is cached: a new build names its files anew.
const ASSET_CACHE: &str = "public, max-age=31536000, immutable";

/// What the console's answers carry.
#[derive(Clone)]
pub struct Console {
    csp: String,
}

impl Console {
    /// `playback_base`: where media and WHEP are served (an origin of its own, or this one's).
    pub fn new(public_url: &str, playback_base: &str) -> Console {
        let own = origin(public_url);
        let playback = origin(playback_base).filter(|p| Some(p) != own.as_ref());
        let extra = playback.map(|p| format!(" {p}")).unwrap_or_default();
        let csp = format!(
            "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:{extra}; \
             media-src 'self' blob:{extra}; connect-src 'self'{extra}; worker-src 'self' blob:; \
             font-src 'self'; object-src 'none'; base-uri 'self'; form-action 'self'; frame-ancestors 'none'"
        );
        Console { csp }
    }

    pub fn is_built() -> bool {
        find("index.html").is_some()
    }

    /// Adds the console to `route`: `index.html` at each client route, the assets under
    /// `/assets/`.
    pub fn mount(self, route: Route) -> Route {
        let page = || poem::get(index.data(self.clone()));
        let mut route = route.at("/p/*rest", page()).at("/assets/*path", poem::get(asset.data(self.clone())));
        for path in PAGES {
            route = route.at(path, page());
        }
        route
    }

    /// Answers `GET /` with the console, in front of `inner`: poem's router gives `/` to the
    /// API's nest at `/` whatever else is mounted there, so the root is taken before it.
    pub fn at_root<E: Endpoint<Output = Response> + 'static>(
        self,
        inner: E,
    ) -> impl Endpoint<Output = Response> {
        inner.around(move |ep, req| {
            let console = self.clone();
            async move {
                if req.uri().path() == "/" && (req.method() == Method::GET || req.method() == Method::HEAD) {
                    return Ok(console.index());
                }
                ep.call(req).await
            }
        })
    }

    /// `index.html`, or how to build it.
    fn index(&self) -> Response {
        let builder = self
            .headers(Response::builder())
            .header(header::CACHE_CONTROL, "no-cache")
            .content_type(content_type("index.html"));
        match find("index.html") {
            Some(html) => builder.body(html),
            None => builder.body(NOT_BUILT),
        }
    }

    fn headers(&self, builder: poem::ResponseBuilder) -> poem::ResponseBuilder {
        builder
            .header("Content-Security-Policy", self.csp.as_str())
            .header("Referrer-Policy", "same-origin")
            .header("X-Content-Type-Options", "nosniff")
            .header("X-Frame-Options", "DENY")
    }
}

/// `scheme://host[:port]` of a URL.
fn origin(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    let host = rest.split(['/', '?', '#']).next().filter(|h| !h.is_empty())?;
    Some(format!("{scheme}://{host}"))
}

fn find(path: &str) -> Option<&'static [u8]> {
    assets::ASSETS.iter().find(|(p, _)| *p == path).map(|(_, bytes)| *bytes)
}

fn content_type(path: &str) -> &'static str {
    match path.rsplit('.').next().unwrap_or_default() {
        "html" => "text/html; charset=utf-8",
        "js" | "mjs" => "text/javascript; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "ico" => "image/x-icon",
        "json" | "map" => "application/json",
        "woff2" => "font/woff2",
        _ => "application/octet-stream",
    }
}

const NOT_BUILT: &str = "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
<title>Sluice: console not built</title></head><body><h1>The console is not built into this binary</h1>\
<p>Build it, then build Sluice again: <code>cd console &amp;&amp; npm ci &amp;&amp; npm run build &amp;&amp; \
cd .. &amp;&amp; cargo build</code> (<code>bash scripts/run.sh</code> does all of it). The REST API is at \
<a href=\"/docs\">/docs</a>.</p></body></html>";

#[handler]
fn index(console: Data<&Console>) -> Response {
    console.index()
}

#[handler]
fn asset(console: Data<&Console>, Path(path): Path<String>) -> Response {
    let path = format!("assets/{path}");
    match find(&path) {
        Some(bytes) => console
            .headers(Response::builder())
            .header(header::CACHE_CONTROL, ASSET_CACHE)
            .content_type(content_type(&path))
            .body(bytes),
        None => Response::builder()
            .status(StatusCode::NOT_FOUND)
            .content_type("text/plain; charset=utf-8")
            .body("no such asset"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_policy_names_this_origin_and_a_playback_origin_of_its_own() {
        let same = Console::new("https://sluice.example", "https://sluice.example/play").csp;
        assert!(same.contains("connect-src 'self';") && same.contains("frame-ancestors 'none'"), "{same}");
        let other = Console::new("https://sluice.example", "https://media.example:8443/play").csp;
        assert!(other.contains("connect-src 'self' https://media.example:8443;"), "{other}");
        assert!(other.contains("media-src 'self' blob: https://media.example:8443;"), "{other}");
        assert!(!other.contains("/play"));
    }

    #[test]
    fn origins_and_types() {
        assert_eq!(origin("http://127.0.0.1:8080/play?x").as_deref(), Some("http://127.0.0.1:8080"));
        assert_eq!(origin("nonsense"), None);
        assert_eq!(content_type("assets/index-x.js"), "text/javascript; charset=utf-8");
        assert_eq!(content_type("assets/x"), "application/octet-stream");
    }
}
