//! `skip` / `limit` of list endpoints (interface: Pagination; CONTRACT: Conventions).

use std::borrow::Cow;

use poem_openapi::registry::{MetaSchema, MetaSchemaRef};
use poem_openapi::types::{ParseError, ParseFromJSON, ParseFromParameter, ParseResult, ToJSON, Type};
use poem_openapi::Object;

use super::error::{ApiError, ApiResult};

/// Validated paging parameters.
#[derive(Debug, Clone, Copy)]
pub struct PageQuery {
    pub skip: i64,
    pub limit: i64,
}

impl PageQuery {
    /// `skip` ≥ 0 (default 0); `limit` 1..=`max` (default `default`). Past either: 400.
    pub fn parse(skip: Option<i64>, limit: Option<i64>, default: i64, max: i64) -> ApiResult<Self> {
        let mut problems = Vec::new();
        let skip = skip.unwrap_or(0);
        if skip < 0 {
            problems.push("skip must not be negative".to_string());
        }
        let limit = limit.unwrap_or(default);
        if !(1..=max).contains(&limit) {
            problems.push(format!("limit must be an integer from 1 to {max}"));
        }
        if problems.is_empty() {
            Ok(PageQuery { skip, limit })
        } else {
            Err(ApiError::bad_request(problems))
        }
    }

    /// The list defaults of the interface: 20 a page, at most 100.
    pub fn list(skip: Option<Skip>, limit: Option<Limit<100>>) -> ApiResult<Self> {
        Self::parse(skip.map(|s| s.0), limit.map(|l| l.0), 20, 100)
    }
}

/// The `skip` query parameter: documented as 0 or more. Any integer is taken here and checked
/// by [`PageQuery::parse`], so that every bad parameter is reported at once.
#[derive(Debug, Clone, Copy)]
pub struct Skip(pub i64);

/// The `limit` query parameter: documented as 1 to `MAX`, checked like [`Skip`].
#[derive(Debug, Clone, Copy)]
pub struct Limit<const MAX: i64>(pub i64);

fn integer_schema(minimum: i64, maximum: Option<i64>) -> MetaSchemaRef {
    MetaSchemaRef::Inline(Box::new(MetaSchema {
        minimum: Some(minimum as f64),
        maximum: maximum.map(|m| m as f64),
        ..MetaSchema::new_with_format("integer", "int64")
    }))
}

fn parse_integer<T: Type>(value: &str, make: impl FnOnce(i64) -> T) -> ParseResult<T> {
    value.parse().map(make).map_err(|_| ParseError::custom("expected an integer"))
}

macro_rules! page_param {
    ($ty:ty, $name:expr, $schema:expr, $make:expr, $($generics:tt)*) => {
        impl $($generics)* Type for $ty {
            const IS_REQUIRED: bool = true;
            type RawValueType = i64;
            type RawElementValueType = i64;

            fn name() -> Cow<'static, str> {
                $name
            }

            fn schema_ref() -> MetaSchemaRef {
                $schema
            }

            fn as_raw_value(&self) -> Option<&i64> {
                Some(&self.0)
            }

            fn raw_element_iter<'a>(&'a self) -> Box<dyn Iterator<Item = &'a i64> + 'a> {
                Box::new(self.as_raw_value().into_iter())
            }
        }

        impl $($generics)* ParseFromParameter for $ty {
            fn parse_from_parameter(value: &str) -> ParseResult<Self> {
                parse_integer(value, $make)
            }
        }
    };
}

page_param!(Skip, "skip".into(), integer_schema(0, None), Skip,);
page_param!(Limit<MAX>, format!("limit_{MAX}").into(), integer_schema(1, Some(MAX)), Limit, <const MAX: i64>);

/// A page of a list: `{items, total, skip, limit}`.
#[derive(Debug, Object)]
pub struct Paginated<T: ParseFromJSON + ToJSON + Type + Send + Sync> {
    pub items: Vec<T>,
    /// Number of items across all pages.
    pub total: i64,
    pub skip: i64,
    pub limit: i64,
}

impl<T: ParseFromJSON + ToJSON + Type + Send + Sync> Paginated<T> {
    pub fn new(items: Vec<T>, total: i64, page: PageQuery) -> Self {
        Paginated { items, total, skip: page.skip, limit: page.limit }
    }

    /// A page of stored rows, each turned into its API record.
    pub fn from_rows<R: Into<T>>(rows: crate::store::Page<R>, page: PageQuery) -> Self {
        Self::new(rows.items.into_iter().map(Into::into).collect(), rows.total, page)
    }
}
