//! Cross-site request refusal for cookie-authenticated writes under `/v1` (CONTRACT:
//! Conventions): a mutating request that carries the session cookie (or is a sign-in) must come
//! from this service's own origin; a bearer credential is never sent by a browser on its own.

use poem::http::Method;
use poem::Request;

use crate::api::security::SESSION_COOKIE;
use crate::config::Settings;

/// Why a request must be refused as possibly cross-site, if it must.
pub(super) fn csrf_refusal(settings: &Settings, req: &Request) -> Option<&'static str> {
    let mutating = !matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS);
    let has_bearer = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.len() > 7 && v[..7].eq_ignore_ascii_case("bearer "));
    let has_session = req
        .headers()
        .get_all("cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.split(';').any(|c| c.trim().starts_with(&format!("{SESSION_COOKIE}="))));
    let login = req.uri().path() == "/v1/auth/login";
    if !mutating || has_bearer || !(has_session || login) {
        return None;
    }
    let origin =
        req.headers().get("origin").or_else(|| req.headers().get("referer")).and_then(|v| v.to_str().ok());
    match origin {
        Some(origin) if same_origin(settings, req, origin) => None,
        Some(_) => Some("cross-site request refused: Origin does not match this service"),
        // A first sign-in from a tool (curl) sends no Origin and carries no cookie to abuse.
        None if login && !has_session => None,
        None => Some("cookie-authenticated writes need an Origin header"),
    }
}

fn same_origin(settings: &Settings, req: &Request, origin: &str) -> bool {
    let origin_of = |url: &str| -> String {
        match url.split_once("://") {
            Some((scheme, rest)) => {
                let host = rest.split('/').next().unwrap_or_default();
                format!("{}://{}", scheme.to_ascii_lowercase(), host.to_ascii_lowercase())
            }
            None => String::new(),
        }
    };
    let origin = origin_of(origin);
    if origin.is_empty() {
        return false;
    }
    if origin == origin_of(&settings.public_url) {
        return true;
    }
    let host = req.headers().get("host").and_then(|v| v.to_str().ok()).unwrap_or_default();
    !host.is_empty()
        && (origin == format!("http://{}", host.to_ascii_lowercase())
            || origin == format!("https://{}", host.to_ascii_lowercase()))
}
