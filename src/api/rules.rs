//! What a body reader checks, as the OpenAPI document states it: the [`Rule`]s that
//! [`super::body::Fields`] records in describe mode, written into the request schemas.

use poem_openapi::registry::{MetaSchema, MetaSchemaRef, Registry};
use poem_openapi::types::Type;
use serde_json::Value;

/// What a reader checks of one field, as the document states it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Rule {
    pub required: bool,
    /// Characters of a string.
    pub len: Option<(usize, usize)>,
    /// Value of an integer.
    pub range: Option<(i64, i64)>,
    /// Elements of an array.
    pub count: Option<(usize, usize)>,
    /// The only strings allowed (of the value, or of each element of an array).
    pub one_of: Vec<String>,
    /// The regular expression of the grammar the reader's parser checks (the parser's own
    /// constant, e.g. `Bitrate::PATTERN`).
    pub pattern: Option<&'static str>,
    /// Integers: a multiple of this.
    pub multiple_of: Option<i64>,
    /// Strings: one of these formats (`ipv4`, `ipv6`…).
    pub formats: Vec<&'static str>,
    /// Arrays: no two elements equal.
    pub unique: bool,
    /// The rules of each object of an array of objects.
    pub fields: Vec<(String, Rule)>,
    /// One of several objects: the rules of each, by its schema's name.
    pub variants: Vec<(String, Vec<(String, Rule)>)>,
}

/// The values of a type documented as a closed set of strings.
pub(super) fn enum_names<T: Type>() -> Vec<String> {
    let mut registry = Registry::new();
    T::register(&mut registry);
    registry
        .schemas
        .get(T::name().as_ref())
        .map(|s| s.enum_items.iter().filter_map(|v| v.as_str().map(str::to_string)).collect())
        .unwrap_or_default()
}

/// Writes `rules` into the registered object schema `name` (and the schemas of its arrays of
/// objects). A rule for a property the schema lacks, or a property without a rule, means the
/// reader and the type disagree: that is a programming error, caught when the document is made
/// in a debug build (every test run).
pub(super) fn apply_rules(registry: &mut Registry, name: &str, rules: &[(String, Rule)]) {
    let mut nested = Vec::new();
    let Some(schema) = registry.schemas.get_mut(name) else {
        debug_assert!(false, "request schema {name} is not registered");
        return;
    };
    let declared: Vec<&str> = schema.properties.iter().map(|(p, _)| *p).collect();
    let read: Vec<&str> = rules.iter().map(|(n, _)| n.as_str()).collect();
    debug_assert!(
        declared.iter().all(|p| read.contains(p)) && read.iter().all(|r| declared.contains(r)),
        "{name}: the reader reads {read:?} but the type declares {declared:?}"
    );
    for (field, rule) in rules {
        let Some((prop, schema_ref)) = schema.properties.iter_mut().find(|(p, _)| *p == field) else {
            debug_assert!(false, "{name}: the reader reads `{field}`, which the type does not declare");
            continue;
        };
        if rule.required && !schema.required.contains(prop) {
            schema.required.push(prop);
        }
        // An object of its own (one, not an array of them; poem wraps a described one in
        // `allOf`): its rules go to its schema.
        let object = match &*schema_ref {
            MetaSchemaRef::Reference(object) => Some(object.clone()),
            MetaSchemaRef::Inline(s) => s.all_of.iter().find_map(|r| match r {
                MetaSchemaRef::Reference(object) => Some(object.clone()),
                MetaSchemaRef::Inline(_) => None,
            }),
        };
        if let (Some(object), false) = (&object, rule.fields.is_empty()) {
            nested.push((object.clone(), rule.fields.clone()));
            continue;
        }
        if object.is_some() && !rule.variants.is_empty() {
            nested.extend(rule.variants.iter().cloned());
            continue;
        }
        let MetaSchemaRef::Inline(prop_schema) = schema_ref else { continue };
        let prop_schema = prop_schema.as_mut();
        if let Some((min, max)) = rule.len {
            prop_schema.min_length = Some(min);
            prop_schema.max_length = Some(max);
        }
        if let Some((min, max)) = rule.range {
            prop_schema.minimum = Some(min as f64);
            prop_schema.maximum = Some(max as f64);
        }
        if let Some((min, max)) = rule.count {
            prop_schema.min_items = Some(min);
            prop_schema.max_items = Some(max);
        }
        if rule.unique {
            prop_schema.unique_items = Some(true);
        }
        let target = match (&mut prop_schema.items, rule.count) {
            (Some(items), Some(_)) => match items.as_mut() {
                MetaSchemaRef::Inline(items) => Some(items.as_mut()),
                MetaSchemaRef::Reference(object) => {
                    if !rule.fields.is_empty() {
                        nested.push((object.clone(), rule.fields.clone()));
                    }
                    None
                }
            },
            _ => Some(prop_schema),
        };
        if let Some(target) = target {
            if !rule.one_of.is_empty() {
                target.enum_items = rule.one_of.iter().map(|v| Value::String(v.clone())).collect();
            }
            if let Some(pattern) = rule.pattern {
                target.pattern = Some(pattern.to_string());
            }
            if let Some(m) = rule.multiple_of {
                target.multiple_of = Some(m as f64);
            }
            if !rule.formats.is_empty() {
                // A body type used by several operations is registered (and ruled) each time.
                let form = |format: &&'static str| {
                    MetaSchemaRef::Inline(Box::new(MetaSchema::new_with_format("string", format)))
                };
                target.any_of = rule.formats.iter().map(form).collect();
            }
        }
    }
    for (object, fields) in nested {
        apply_rules(registry, &object, &fields);
    }
}
