//! `skip` / `limit` of list endpoints (interface: Pagination; CONTRACT: Conventions).

use poem_openapi::types::{ParseFromJSON, ToJSON, Type};
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
    pub fn list(skip: Option<i64>, limit: Option<i64>) -> ApiResult<Self> {
        Self::parse(skip, limit, 20, 100)
    }
}

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
