//! JSON request bodies that validate every field and report every problem at once
//! (CONTRACT: Conventions — 400 lists one message per problem; unknown fields, malformed JSON
//! and wrong types are 400; too large is 413; a wrong content type is 415).
//!
//! poem-openapi's own `Json<T>` stops at the first problem and words it for programmers, so
//! request types implement [`FromJsonBody`] with a [`Fields`] reader instead. The type's
//! `Object` derive still documents the schema in the OpenAPI document.

use std::ops::RangeInclusive;

use poem::{Request, RequestBody};
use poem_openapi::impl_apirequest_for_payload;
use poem_openapi::payload::{ParsePayload, Payload};
use poem_openapi::registry::{MetaSchemaRef, Registry};
use poem_openapi::types::Type;
use serde_json::{Map, Value};

use super::error::ApiError;
use super::rules::{apply_rules, enum_names, Rule};

/// One object a field may be ([`Fields::opt_one_of`]): its schema's name, the field that picks
/// it, and its reader.
pub type Variant<'a, T> = (&'a str, &'a str, &'a dyn Fn(&mut Fields) -> T);

/// Largest JSON body accepted.
pub const MAX_JSON_BODY: usize = 64 * 1024;

/// A request type read from a JSON object.
pub trait FromJsonBody: Sized {
    /// Reads every field (recording problems in `f`). The result is only used when `f` holds
    /// no problems, so a reader may return placeholders for fields that failed.
    fn from_fields(f: &mut Fields) -> Self;
}

/// A JSON body of type `T`.
pub struct JsonBody<T>(pub T);

impl<T: Type + FromJsonBody> Payload for JsonBody<T> {
    const CONTENT_TYPE: &'static str = "application/json";

    fn check_content_type(content_type: &str) -> bool {
        matches!(content_type.parse::<mime::Mime>(), Ok(m) if m.type_() == "application"
            && (m.subtype() == "json" || m.suffix().is_some_and(|s| s == "json")))
    }

    fn schema_ref() -> MetaSchemaRef {
        T::schema_ref()
    }

    /// The schema is the type's `Object` derive (names, types, descriptions) with what its
    /// reader checks written in: lengths, ranges, counts and closed sets. The reader is the one
    /// source of the rules; the document shows what it enforces.
    fn register(registry: &mut Registry) {
        T::register(registry);
        let rules = describe::<T>();
        apply_rules(registry, &T::name(), &rules);
    }
}

impl<T: FromJsonBody + Send> ParsePayload for JsonBody<T> {
    const IS_REQUIRED: bool = true;

    async fn from_request(_request: &Request, body: &mut RequestBody) -> poem::Result<Self> {
        use futures_util::StreamExt;
        let mut chunks = body.take()?.into_bytes_stream();
        let mut bytes = Vec::new();
        while let Some(chunk) = chunks.next().await {
            let chunk =
                chunk.map_err(|e| ApiError::bad_request(vec![format!("body could not be read: {e}")]))?;
            if bytes.len() + chunk.len() > MAX_JSON_BODY {
                drain(chunks, bytes.len() + chunk.len()).await;
                return Err(ApiError::too_large(format!("request body exceeds {MAX_JSON_BODY} bytes")).into());
            }
            bytes.extend_from_slice(&chunk);
        }
        Ok(JsonBody(parse_body::<T>(&bytes)?))
    }
}

/// Most of a refused request's body that is read (and dropped) before answering.
const DISCARD_LIMIT: usize = 2 * MAX_JSON_BODY;

/// Reads and drops what is left of a refused request's body (refused for its caller, or for its
/// size), up to [`DISCARD_LIMIT`] in all and for two seconds at most, so that a client still
/// sending it reads the answer rather than a reset connection (closing a socket with unread
/// input resets it). Nothing of it is looked at.
pub(crate) async fn discard(body: &mut RequestBody) {
    if let Ok(body) = body.take() {
        drain(body.into_bytes_stream(), 0).await;
    }
}

pub(crate) async fn drain<S, E>(mut chunks: S, mut read: usize)
where
    S: futures_util::Stream<Item = Result<bytes::Bytes, E>> + Unpin,
{
    use futures_util::StreamExt;
    let drain = async {
        while read <= DISCARD_LIMIT {
            match chunks.next().await {
                Some(Ok(chunk)) => read += chunk.len(),
                _ => break,
            }
        }
    };
    let _ = tokio::time::timeout(std::time::Duration::from_secs(2), drain).await;
}

impl_apirequest_for_payload!(JsonBody<T>, T: FromJsonBody + Send + Type);

/// Parses and validates a body; all problems at once.
pub fn parse_body<T: FromJsonBody>(bytes: &[u8]) -> Result<T, ApiError> {
    let value: Value = serde_json::from_slice(bytes)
        .map_err(|e| ApiError::bad_request(vec![format!("body must be valid JSON: {e}")]))?;
    let Value::Object(map) = value else {
        return Err(ApiError::bad_request(vec!["body must be a JSON object".into()]));
    };
    let mut fields = Fields { map, errors: Vec::new(), rules: None };
    let parsed = T::from_fields(&mut fields);
    fields.finish()?;
    Ok(parsed)
}

/// Reads fields out of a JSON object, collecting one message per problem.
pub struct Fields {
    map: Map<String, Value>,
    errors: Vec<String>,
    /// Set when describing: each field's rule, in reading order.
    rules: Option<Vec<(String, Rule)>>,
}

/// The rules `T`'s reader checks, found by running it over nothing in describe mode.
pub fn describe<T: FromJsonBody>() -> Vec<(String, Rule)> {
    let mut fields = Fields { map: Map::new(), errors: Vec::new(), rules: Some(Vec::new()) };
    T::from_fields(&mut fields);
    fields.rules.unwrap_or_default()
}

/// A float with no fraction, within the range where every integer is exact.
fn whole(f: f64) -> Option<i64> {
    const EXACT: f64 = 9_007_199_254_740_992.0; // 2^53
    (f.fract() == 0.0 && f.abs() <= EXACT).then_some(f as i64)
}

impl Fields {
    /// Records `rule` for `name` when describing.
    fn note(&mut self, name: &str, rule: Rule) {
        if let Some(rules) = &mut self.rules {
            rules.push((name.to_string(), rule));
        }
    }

    pub fn error(&mut self, field: &str, problem: impl std::fmt::Display) {
        self.errors.push(format!("{field} {problem}"));
    }

    /// States more of `name`'s rule in the document than its reader's call says: what a
    /// parser or a later check enforces. No effect when reading.
    pub fn document(&mut self, name: &str, amend: impl FnOnce(&mut Rule)) {
        if let Some((_, rule)) = self.rules.as_mut().and_then(|r| r.iter_mut().rev().find(|(n, _)| n == name))
        {
            amend(rule);
        }
    }

    /// Takes a field; `null` counts as absent.
    fn take(&mut self, name: &str) -> Option<Value> {
        self.map.remove(name).filter(|v| !v.is_null())
    }

    /// Reads a required field with `read`, its optional reader: an absent (or `null`) field is
    /// a problem of its own, and the rule `read` notes is marked required.
    fn required<T>(&mut self, name: &str, read: impl FnOnce(&mut Self) -> Option<T>) -> Option<T> {
        if self.map.get(name).is_none_or(|v| v.is_null()) {
            self.error(name, "is required");
        }
        let value = read(self);
        self.document(name, |r| r.required = true);
        value
    }

    fn check_len(&mut self, name: &str, s: &str, len: &RangeInclusive<usize>) -> bool {
        let n = s.chars().count();
        if len.contains(&n) {
            return true;
        }
        self.error(name, format!("must be {} to {} characters long", len.start(), len.end()));
        false
    }

    /// An optional string of `len` characters.
    pub fn opt_string(&mut self, name: &str, len: RangeInclusive<usize>) -> Option<String> {
        self.note(name, Rule { len: Some((*len.start(), *len.end())), ..Rule::default() });
        match self.take(name)? {
            Value::String(s) => self.check_len(name, &s, &len).then_some(s),
            _ => {
                self.error(name, "must be a string");
                None
            }
        }
    }

    /// A required string of `len` characters.
    pub fn string(&mut self, name: &str, len: RangeInclusive<usize>) -> String {
        self.required(name, |f| f.opt_string(name, len)).unwrap_or_default()
    }

    fn read_parsed<T>(&mut self, name: &str, parse: impl Fn(&str) -> Result<T, String>) -> Option<T> {
        match self.take(name)? {
            Value::String(s) => match parse(&s) {
                Ok(v) => Some(v),
                Err(problem) => {
                    self.error(name, problem);
                    None
                }
            },
            _ => {
                self.error(name, "must be a string");
                None
            }
        }
    }

    /// An optional value parsed from a string by `parse` (whose error names the rule). The
    /// rule is documented by the field's type.
    pub fn opt_parsed<T>(&mut self, name: &str, parse: impl Fn(&str) -> Result<T, String>) -> Option<T> {
        self.note(name, Rule::default());
        self.read_parsed(name, parse)
    }

    /// A required value parsed from a string.
    pub fn parsed<T>(&mut self, name: &str, parse: impl Fn(&str) -> Result<T, String>) -> Option<T> {
        self.required(name, |f| f.opt_parsed(name, parse))
    }

    /// An optional value of a closed set that its type both parses and documents (a poem
    /// `Enum`).
    pub fn opt_enum<T: poem_openapi::types::ParseFromJSON>(&mut self, name: &str) -> Option<T> {
        self.note(name, Rule::default());
        self.read_parsed(name, |s| {
            T::parse_from_json(Some(Value::String(s.to_string())))
                .map_err(|_| format!("must be one of {}", enum_names::<T>().join(", ")))
        })
    }

    /// An optional boolean.
    pub fn opt_bool(&mut self, name: &str) -> Option<bool> {
        self.note(name, Rule::default());
        match self.take(name)? {
            Value::Bool(b) => Some(b),
            _ => {
                self.error(name, "must be a boolean");
                None
            }
        }
    }

    /// An optional integer within `range`.
    pub fn opt_int(&mut self, name: &str, range: RangeInclusive<i64>) -> Option<i64> {
        self.note(name, Rule { range: Some((*range.start(), *range.end())), ..Rule::default() });
        match self.take(name)? {
            // JSON has one number type: `60.0` is the integer 60 (as JSON Schema says).
            Value::Number(n) => match n.as_i64().or_else(|| n.as_f64().and_then(whole)) {
                Some(i) if range.contains(&i) => Some(i),
                _ => {
                    self.error(name, format!("must be an integer from {} to {}", range.start(), range.end()));
                    None
                }
            },
            _ => {
                self.error(name, "must be an integer");
                None
            }
        }
    }

    /// A required integer within `range`.
    pub fn int(&mut self, name: &str, range: RangeInclusive<i64>) -> Option<i64> {
        self.required(name, |f| f.opt_int(name, range))
    }

    /// An optional array of `len` elements; a problem (and `None`) when it is something else.
    fn array(&mut self, name: &str, len: &RangeInclusive<usize>) -> Option<Vec<Value>> {
        let Value::Array(items) = self.take(name)? else {
            self.error(name, "must be an array");
            return None;
        };
        if !len.contains(&items.len()) {
            self.error(name, format!("must have {} to {} elements", len.start(), len.end()));
            return None;
        }
        Some(items)
    }

    /// An optional array of strings, each parsed by `parse`; `len` bounds the element count.
    pub fn opt_list<T>(
        &mut self,
        name: &str,
        len: RangeInclusive<usize>,
        parse: impl Fn(&str) -> Result<T, String>,
    ) -> Option<Vec<T>> {
        self.note(name, Rule { count: Some((*len.start(), *len.end())), ..Rule::default() });
        let items = self.array(name, &len)?;
        let mut out = Vec::with_capacity(items.len());
        let mut ok = true;
        for (i, item) in items.iter().enumerate() {
            let field = format!("{name}.{i}");
            match item.as_str().map(&parse) {
                Some(Ok(v)) => out.push(v),
                Some(Err(problem)) => {
                    self.error(&field, problem);
                    ok = false;
                }
                None => {
                    self.error(&field, "must be a string");
                    ok = false;
                }
            }
        }
        ok.then_some(out)
    }

    /// A required array of strings, each parsed by `parse`.
    pub fn list<T>(
        &mut self,
        name: &str,
        len: RangeInclusive<usize>,
        parse: impl Fn(&str) -> Result<T, String>,
    ) -> Option<Vec<T>> {
        self.required(name, |f| f.opt_list(name, len, parse))
    }

    /// Whether a problem was already recorded for `field`.
    pub fn has_error(&self, field: &str) -> bool {
        self.errors.iter().any(|e| e.strip_prefix(field).is_some_and(|rest| rest.starts_with(' ')))
    }

    /// An optional array of objects, each read by `read` from its own fields; problems are named
    /// `<name>.<index>.<field>`, and unknown fields inside an object are problems too.
    pub fn opt_objects<T>(
        &mut self,
        name: &str,
        len: RangeInclusive<usize>,
        read: impl Fn(&mut Fields) -> T,
    ) -> Option<Vec<T>> {
        if self.rules.is_some() {
            let mut inner = Fields { map: Map::new(), errors: Vec::new(), rules: Some(Vec::new()) };
            read(&mut inner);
            let fields = inner.rules.unwrap_or_default();
            self.note(name, Rule { count: Some((*len.start(), *len.end())), fields, ..Rule::default() });
        }
        let items = self.array(name, &len)?;
        let mut out = Vec::with_capacity(items.len());
        let mut ok = true;
        for (i, item) in items.into_iter().enumerate() {
            let Value::Object(map) = item else {
                self.error(&format!("{name}.{i}"), "must be an object");
                ok = false;
                continue;
            };
            let mut inner = Fields { map, errors: Vec::new(), rules: None };
            let value = read(&mut inner);
            let unknown: Vec<String> = inner.map.keys().cloned().collect();
            for field in unknown {
                inner.errors.push(format!("property {field} should not exist"));
            }
            ok &= inner.errors.is_empty();
            self.errors.extend(inner.errors.into_iter().map(|e| format!("{name}.{i}.{e}")));
            out.push(value);
        }
        ok.then_some(out)
    }

    /// An optional object that is one of `variants`: `(schema, key, read)`, the first whose
    /// `key` field is present read by its `read` from the object's own fields (problems named
    /// `<name>.<field>`, unknown fields too); none present is a problem naming the keys.
    pub fn opt_one_of<T>(&mut self, name: &str, variants: &[Variant<'_, T>]) -> Option<T> {
        if self.rules.is_some() {
            let mut described = Vec::new();
            for (schema, _, read) in variants {
                let mut inner = Fields { map: Map::new(), errors: Vec::new(), rules: Some(Vec::new()) };
                read(&mut inner);
                described.push((schema.to_string(), inner.rules.unwrap_or_default()));
            }
            self.note(name, Rule { variants: described, ..Rule::default() });
        }
        let Value::Object(map) = self.take(name)? else {
            self.error(name, "must be an object");
            return None;
        };
        let Some((_, _, read)) = variants.iter().find(|(_, key, _)| map.contains_key(*key)) else {
            let keys: Vec<&str> = variants.iter().map(|(_, key, _)| *key).collect();
            self.error(name, format!("must have one of {}", keys.join(", ")));
            return None;
        };
        self.read_object(name, map, read)
    }

    /// The object `map` of field `name`, read by `read`; unknown fields are problems.
    fn read_object<T>(
        &mut self,
        name: &str,
        map: Map<String, Value>,
        read: impl Fn(&mut Fields) -> T,
    ) -> Option<T> {
        let mut inner = Fields { map, errors: Vec::new(), rules: None };
        let value = read(&mut inner);
        let unknown: Vec<String> = inner.map.keys().cloned().collect();
        for field in unknown {
            inner.errors.push(format!("property {field} should not exist"));
        }
        let ok = inner.errors.is_empty();
        self.errors.extend(inner.errors.into_iter().map(|e| format!("{name}.{e}")));
        ok.then_some(value)
    }

    /// An optional number (not only an integer) within `range`.
    pub fn opt_number(&mut self, name: &str, range: RangeInclusive<i64>) -> Option<f64> {
        self.note(name, Rule { range: Some((*range.start(), *range.end())), ..Rule::default() });
        match self.take(name)? {
            Value::Number(n) => match n.as_f64() {
                Some(x) if x >= *range.start() as f64 && x <= *range.end() as f64 => Some(x),
                _ => {
                    self.error(name, format!("must be a number from {} to {}", range.start(), range.end()));
                    None
                }
            },
            _ => {
                self.error(name, "must be a number");
                None
            }
        }
    }

    /// A required number within `range`.
    pub fn number(&mut self, name: &str, range: RangeInclusive<i64>) -> Option<f64> {
        self.required(name, |f| f.opt_number(name, range))
    }

    /// Unknown fields are problems too.
    fn finish(mut self) -> Result<(), ApiError> {
        let unknown: Vec<String> = self.map.keys().cloned().collect();
        for name in unknown {
            self.errors.push(format!("property {name} should not exist"));
        }
        if self.errors.is_empty() {
            Ok(())
        } else {
            Err(ApiError::bad_request(self.errors))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Probe {
        name: String,
        tags: Option<Vec<u8>>,
        on: Option<bool>,
    }

    impl FromJsonBody for Probe {
        fn from_fields(f: &mut Fields) -> Self {
            Probe {
                name: f.string("name", 1..=5),
                tags: f.opt_list("tags", 1..=3, |s| {
                    s.parse::<u8>().map_err(|_| "must be a small number".into())
                }),
                on: f.opt_bool("on"),
            }
        }
    }

    fn messages(err: ApiError) -> Vec<String> {
        match err {
            ApiError::BadRequest(b) => b.0.message,
            other => panic!("expected 400, got {other:?}"),
        }
    }

    #[test]
    fn every_problem_is_reported_with_its_field() {
        let err =
            parse_body::<Probe>(br#"{"name":"toolong","tags":["1","x"],"on":1,"extra":true}"#).err().unwrap();
        assert_eq!(
            messages(err),
            vec![
                "name must be 1 to 5 characters long",
                "tags.1 must be a small number",
                "on must be a boolean",
                "property extra should not exist",
            ]
        );
    }

    #[test]
    fn valid_bodies_parse_and_null_is_absent() {
        let p = parse_body::<Probe>(br#"{"name":"ok","tags":null}"#).ok().unwrap();
        assert_eq!(p.name, "ok");
        assert!(p.tags.is_none() && p.on.is_none());
    }

    struct Count(Option<i64>);

    impl FromJsonBody for Count {
        fn from_fields(f: &mut Fields) -> Self {
            Count(f.opt_int("n", 60..=100))
        }
    }

    #[test]
    fn a_whole_float_is_an_integer() {
        assert_eq!(parse_body::<Count>(br#"{"n":60.0}"#).ok().and_then(|c| c.0), Some(60));
        assert_eq!(parse_body::<Count>(br#"{"n":6e1}"#).ok().and_then(|c| c.0), Some(60));
        for bad in [&br#"{"n":60.5}"#[..], br#"{"n":1e300}"#, br#"{"n":59.0}"#] {
            assert!(parse_body::<Count>(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn malformed_json_and_non_objects_are_400() {
        assert!(messages(parse_body::<Probe>(b"{").err().unwrap())[0].starts_with("body must be valid JSON"));
        assert_eq!(messages(parse_body::<Probe>(b"[]").err().unwrap()), vec!["body must be a JSON object"]);
        assert_eq!(messages(parse_body::<Probe>(b"{}").err().unwrap()), vec!["name is required"]);
    }
}
