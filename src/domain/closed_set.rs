//! A value written as one of a closed set of strings that is computed (not an enum's variants):
//! in the OpenAPI document a named schema with that `enum`, in JSON its name.

/// Implements poem-openapi's `Type`, `ToJSON` and `ParseFromJSON` for `$ty`, named `$name` in
/// the document with `$description`, its values `$values` (an expression giving `Vec<String>`),
/// written by `$write` (`fn(&$ty) -> String`) and read by `$read` (`fn(&str) -> Result<$ty, String>`).
macro_rules! closed_string_set {
    ($ty:ty, $name:literal, $description:literal, $values:expr, $write:expr, $read:expr) => {
        impl poem_openapi::types::Type for $ty {
            const IS_REQUIRED: bool = true;
            type RawValueType = Self;
            type RawElementValueType = Self;

            fn name() -> std::borrow::Cow<'static, str> {
                $name.into()
            }

            fn schema_ref() -> poem_openapi::registry::MetaSchemaRef {
                poem_openapi::registry::MetaSchemaRef::Reference($name.into())
            }

            fn register(registry: &mut poem_openapi::registry::Registry) {
                registry.create_schema::<Self, _>($name.into(), |_| poem_openapi::registry::MetaSchema {
                    description: Some($description),
                    enum_items: ($values).into_iter().map(serde_json::Value::String).collect(),
                    ..poem_openapi::registry::MetaSchema::new("string")
                });
            }

            fn as_raw_value(&self) -> Option<&Self> {
                Some(self)
            }

            fn raw_element_iter<'a>(&'a self) -> Box<dyn Iterator<Item = &'a Self> + 'a> {
                Box::new(self.as_raw_value().into_iter())
            }
        }

        impl poem_openapi::types::ToJSON for $ty {
            fn to_json(&self) -> Option<serde_json::Value> {
                Some(serde_json::Value::String(($write)(self)))
            }
        }

        impl poem_openapi::types::ParseFromJSON for $ty {
            fn parse_from_json(value: Option<serde_json::Value>) -> poem_openapi::types::ParseResult<Self> {
                match value {
                    Some(serde_json::Value::String(s)) => {
                        ($read)(s.as_str()).map_err(poem_openapi::types::ParseError::custom)
                    }
                    other => Err(poem_openapi::types::ParseError::expected_type(other.unwrap_or_default())),
                }
            }
        }
    };
}

pub(crate) use closed_string_set;
