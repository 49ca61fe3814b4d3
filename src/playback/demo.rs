//! The live demo page at `{playback_base}/live/<id>/`: the stream over WHEP and over LL-HLS side
//! by side (`demo.html`). It is static: the page finds its stream's URLs from its own address,
//! and the players' requests are authorised as usual (`?token=` is passed on to both).

use poem::http::header;
use poem::{handler, Response};

pub const PAGE: &str = include_str!("demo.html");

#[handler]
pub fn page() -> Response {
    Response::builder()
        .content_type("text/html; charset=utf-8")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(PAGE)
}
