//! Query parameters with a documented form of their own.

use std::borrow::Cow;

use poem_openapi::registry::{MetaSchema, MetaSchemaRef};
use poem_openapi::types::{ParseFromParameter, ParseResult, Type};

use crate::domain::time::{parse_iso8601, Span};

/// A time filter (`from`, `to`): any ISO 8601 date or date-time. The document says `date-time`
/// or `date` (what generated clients send); a month, a year, an ordinal or week date and the
/// basic forms are taken too, and a date names the whole of it. The text is checked by
/// the handler, so that every bad parameter is reported at once.
#[derive(Debug, Clone)]
pub struct TimeParam(pub String);

impl TimeParam {
    /// The span it names, or a problem worded for `field`.
    pub fn span(&self, field: &str, problems: &mut Vec<String>) -> Option<Span> {
        match parse_iso8601(&self.0) {
            Ok(span) => Some(span),
            Err(problem) => {
                problems.push(format!("{field} {problem}"));
                None
            }
        }
    }
}

impl Type for TimeParam {
    const IS_REQUIRED: bool = true;
    type RawValueType = String;
    type RawElementValueType = String;

    fn name() -> Cow<'static, str> {
        "time_filter".into()
    }

    fn schema_ref() -> MetaSchemaRef {
        let form = |format| MetaSchemaRef::Inline(Box::new(MetaSchema::new_with_format("string", format)));
        MetaSchemaRef::Inline(Box::new(MetaSchema {
            any_of: vec![form("date-time"), form("date")],
            ..MetaSchema::ANY
        }))
    }

    fn as_raw_value(&self) -> Option<&String> {
        Some(&self.0)
    }

    fn raw_element_iter<'a>(&'a self) -> Box<dyn Iterator<Item = &'a String> + 'a> {
        Box::new(self.as_raw_value().into_iter())
    }
}

impl ParseFromParameter for TimeParam {
    fn parse_from_parameter(value: &str) -> ParseResult<Self> {
        Ok(TimeParam(value.to_string()))
    }
}
