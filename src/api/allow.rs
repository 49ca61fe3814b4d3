//! `Allow` on 405 answers (RFC 9110 15.5.6: a 405 must say which methods the resource takes).
//! The router answers 405 when a path matches and its method does not; the methods each path
//! takes are read once from the OpenAPI document, plus the plain routes outside it.

use poem::http::header::ALLOW;
use poem::http::{HeaderValue, StatusCode};
use poem::Response;

/// Path templates (`/v1/projects/{slug}/streams`) with the methods they take, as an `Allow` value.
pub struct AllowTable(Vec<(Vec<Segment>, HeaderValue)>);

enum Segment {
    Literal(String),
    Param,
}

/// Routes served outside the OpenAPI document.
const PLAIN: [(&str, &str); 4] =
    [("/healthz", "GET"), ("/readyz", "GET"), ("/metrics", "GET"), ("/v1/openapi.json", "GET")];

impl AllowTable {
    /// From the OpenAPI document (`paths` → methods).
    pub fn from_spec(spec: &str) -> AllowTable {
        let mut rows = Vec::new();
        let doc: serde_json::Value = serde_json::from_str(spec).unwrap_or_default();
        if let Some(paths) = doc.get("paths").and_then(|p| p.as_object()) {
            for (template, ops) in paths {
                let Some(ops) = ops.as_object() else { continue };
                let mut methods: Vec<String> = ops
                    .keys()
                    .filter(|m| ["get", "post", "put", "patch", "delete"].contains(&m.as_str()))
                    .map(|m| m.to_uppercase())
                    .collect();
                methods.sort();
                if let Ok(value) = HeaderValue::from_str(&methods.join(", ")) {
                    rows.push((segments(template), value));
                }
            }
        }
        for (path, methods) in PLAIN {
            rows.push((segments(path), HeaderValue::from_static(methods)));
        }
        AllowTable(rows)
    }

    /// The methods `path` takes, if it is a known route.
    pub fn methods(&self, path: &str) -> Option<&HeaderValue> {
        let parts: Vec<&str> = path.trim_end_matches('/').split('/').collect();
        // Literal segments win over parameters (`/streams/{id}` against `/streams/rotate`).
        self.0
            .iter()
            .filter(|(template, _)| matches(template, &parts))
            .max_by_key(|(template, _)| template.iter().filter(|s| matches!(s, Segment::Literal(_))).count())
            .map(|(_, allow)| allow)
    }

    /// Adds `Allow` to a 405 answer for `path`.
    pub fn complete(&self, path: &str, resp: &mut Response) {
        if resp.status() == StatusCode::METHOD_NOT_ALLOWED && !resp.headers().contains_key(ALLOW) {
            if let Some(allow) = self.methods(path) {
                resp.headers_mut().insert(ALLOW, allow.clone());
            }
        }
    }
}

fn segments(template: &str) -> Vec<Segment> {
    template
        .trim_end_matches('/')
        .split('/')
        .map(|s| {
            if s.starts_with('{') && s.ends_with('}') {
                Segment::Param
            } else {
                Segment::Literal(s.to_string())
            }
        })
        .collect()
}

fn matches(template: &[Segment], parts: &[&str]) -> bool {
    template.len() == parts.len()
        && template.iter().zip(parts).all(|(t, p)| match t {
            Segment::Literal(l) => l == p,
            Segment::Param => !p.is_empty(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_match_their_templates_and_literals_win() {
        let spec = r#"{"paths": {
            "/v1/projects/{slug}/streams": {"get": {}, "post": {}},
            "/v1/projects/{slug}/streams/{id}": {"get": {}, "patch": {}, "delete": {}, "parameters": []},
            "/v1/projects/{slug}/webhooks/events": {"get": {}},
            "/v1/projects/{slug}/webhooks/{id}": {"get": {}, "delete": {}}
        }}"#;
        let t = AllowTable::from_spec(spec);
        let allow = |p: &str| t.methods(p).map(|v| v.to_str().unwrap_or_default().to_string());
        assert_eq!(allow("/v1/projects/demo/streams").as_deref(), Some("GET, POST"));
        assert_eq!(allow("/v1/projects/demo/streams/").as_deref(), Some("GET, POST"));
        assert_eq!(allow("/v1/projects/demo/streams/abc").as_deref(), Some("DELETE, GET, PATCH"));
        assert_eq!(allow("/v1/projects/demo/webhooks/events").as_deref(), Some("GET"));
        assert_eq!(allow("/v1/projects/demo/webhooks/w1").as_deref(), Some("DELETE, GET"));
        assert_eq!(allow("/healthz").as_deref(), Some("GET"));
        assert_eq!(allow("/v1/nothing"), None);
    }
}
