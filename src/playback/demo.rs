//! The live demo page at `{playback_base}/live/<id>/`: the stream over WHEP and over LL-HLS side
//! by side (`demo.html`). It is static: the page finds its stream's URLs from its own address,
//! and the players' requests are authorised as usual (`?token=` is passed on to both).

use poem::http::header;
use std::sync::LazyLock;

use poem::{handler, Response};

/// The page, with the shared start at the live edge in place of its marker.
pub static PAGE: LazyLock<String> = LazyLock::new(|| with_start_at_edge(include_str!("demo.html")));

/// Starting hls.js at the live edge, as an ES module (the console imports it).
pub const START_AT_EDGE: &str = include_str!("start_at_edge.js");
/// Where a page wants [`START_AT_EDGE`] inlined, in one of its classic scripts.
pub const START_AT_EDGE_MARKER: &str = "/* start_at_edge.js */";

/// `html` with [`START_AT_EDGE`] at its marker, as a plain function of the script (the demo page
/// and the test player are classic scripts, which cannot import).
pub fn with_start_at_edge(html: &str) -> String {
    html.replacen(START_AT_EDGE_MARKER, &START_AT_EDGE.replacen("export function", "function", 1), 1)
}

#[handler]
pub fn page() -> Response {
    Response::builder()
        .content_type("text/html; charset=utf-8")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(PAGE.as_str())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_page_carries_the_shared_start_at_the_edge() {
        let page = super::PAGE.as_str();
        assert!(!page.contains(super::START_AT_EDGE_MARKER));
        assert_eq!(page.matches("function startAtEdge(hls, video, options)").count(), 1);
        assert!(!page.contains("export function"), "a classic script cannot export");
        assert!(page.contains("startAtEdge(h, video)"));
    }
}
