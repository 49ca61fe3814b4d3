//! Bounds on AMF0 bodies before rml_amf0 decodes them.
//!
//! rml_amf0 decodes objects, ECMA arrays and strict arrays by recursion, one stack frame set per
//! level: a `connect` nesting objects 100,000 deep, sent before any credential is checked,
//! overflowed the stack and aborted the process. [`check_depth`] walks a body the way rml_amf0
//! reads it, with a stack of its own on the heap, and refuses it before decoding when it nests
//! deeper than allowed. The walk stops where rml_amf0 would stop (an end marker, an unknown
//! marker, the end of the bytes), so every level rml_amf0 would enter has been counted.

/// Nesting real encoders send: `connect` and `onMetaData` carry one or two levels.
pub const MAX_DEPTH: usize = 16;

const NUMBER: u8 = 0;
const BOOLEAN: u8 = 1;
const STRING: u8 = 2;
const OBJECT: u8 = 3;
const NULL: u8 = 5;
const UNDEFINED: u8 = 6;
const ECMA_ARRAY: u8 = 8;
const OBJECT_END: u8 = 9;
const STRICT_ARRAY: u8 = 10;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("AMF0 nested deeper than {MAX_DEPTH} levels")]
pub struct TooDeep;

enum Frame {
    Object,
    Array(u32),
}

/// Where the walk is: what the next bytes must be.
enum Next {
    Value,
    Property,
}

/// Refuses `body` when decoding it would nest more than [`MAX_DEPTH`] levels.
pub fn check_depth(body: &[u8]) -> Result<(), TooDeep> {
    let mut stack: Vec<Frame> = Vec::new();
    let mut at = 0usize;
    let take = |at: &mut usize, n: usize| -> Option<usize> {
        let start = *at;
        *at = at.checked_add(n)?;
        (*at <= body.len()).then_some(start)
    };
    loop {
        let next = match stack.last_mut() {
            None => Next::Value,
            Some(Frame::Object) => Next::Property,
            Some(Frame::Array(0)) => {
                stack.pop();
                continue;
            }
            Some(Frame::Array(n)) => {
                *n -= 1;
                Next::Value
            }
        };
        if let Next::Property = next {
            let Some(s) = take(&mut at, 2) else { return Ok(()) };
            let len = usize::from(u16::from_be_bytes([body[s], body[s + 1]]));
            if len == 0 {
                // The end marker closes the object; anything else ends the decode with an error.
                match body.get(at) {
                    Some(&OBJECT_END) => {
                        at += 1;
                        stack.pop();
                        continue;
                    }
                    _ => return Ok(()),
                }
            }
            if take(&mut at, len).is_none() {
                return Ok(());
            }
        }
        let Some(&marker) = body.get(at) else { return Ok(()) };
        at += 1;
        let skip = match marker {
            NUMBER => 8,
            BOOLEAN => 1,
            NULL | UNDEFINED => 0,
            STRING => {
                let Some(s) = take(&mut at, 2) else { return Ok(()) };
                usize::from(u16::from_be_bytes([body[s], body[s + 1]]))
            }
            OBJECT | ECMA_ARRAY => {
                if marker == ECMA_ARRAY && take(&mut at, 4).is_none() {
                    return Ok(());
                }
                stack.push(Frame::Object);
                0
            }
            STRICT_ARRAY => {
                let Some(s) = take(&mut at, 4) else { return Ok(()) };
                let count = u32::from_be_bytes([body[s], body[s + 1], body[s + 2], body[s + 3]]);
                stack.push(Frame::Array(count));
                0
            }
            OBJECT_END => match stack.last() {
                // The end of the values (top level), or of a strict array cut short.
                None => return Ok(()),
                Some(Frame::Array(_)) => {
                    stack.pop();
                    0
                }
                // A property without a value: the decode fails here.
                Some(Frame::Object) => return Ok(()),
            },
            _ => return Ok(()),
        };
        if stack.len() > MAX_DEPTH {
            return Err(TooDeep);
        }
        if take(&mut at, skip).is_none() {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rml_amf0::Amf0Value;
    use std::collections::HashMap;

    fn nested(depth: usize) -> Amf0Value {
        let mut v = Amf0Value::Number(1.0);
        for i in 0..depth {
            v = if i % 2 == 0 {
                Amf0Value::Object(HashMap::from([("a".to_string(), v)]))
            } else {
                Amf0Value::StrictArray(vec![Amf0Value::Null, v])
            };
        }
        v
    }

    fn body(values: Vec<Amf0Value>) -> Vec<u8> {
        rml_amf0::serialize(&values).unwrap()
    }

    #[test]
    fn a_real_connect_passes() {
        let object = Amf0Value::Object(HashMap::from([
            ("app".to_string(), Amf0Value::Utf8String("live".into())),
            ("flashVer".to_string(), Amf0Value::Utf8String("FMLE/3.0".into())),
            ("videoCodecs".to_string(), Amf0Value::Number(252.0)),
        ]));
        let b = body(vec![Amf0Value::Utf8String("connect".into()), Amf0Value::Number(1.0), object]);
        assert_eq!(check_depth(&b), Ok(()));
    }

    #[test]
    fn depth_is_counted_as_rml_amf0_decodes() {
        assert_eq!(check_depth(&body(vec![nested(MAX_DEPTH)])), Ok(()));
        assert_eq!(check_depth(&body(vec![nested(MAX_DEPTH + 1)])), Err(TooDeep));
    }

    #[test]
    fn a_hundred_thousand_levels_are_refused_without_recursion() {
        // Objects opened and never closed: `03 00 01 'a'` repeated.
        let mut b = vec![OBJECT];
        for _ in 0..100_000 {
            b.extend([0, 1, b'a', OBJECT]);
        }
        assert_eq!(check_depth(&b), Err(TooDeep));
        let mut arrays = Vec::new();
        for _ in 0..100_000 {
            arrays.extend([STRICT_ARRAY, 0, 0, 0, 1]);
        }
        assert_eq!(check_depth(&arrays), Err(TooDeep));
    }

    proptest::proptest! {
        /// Whatever the bytes, a body that passes decodes without nesting deeper than allowed.
        #[test]
        fn what_passes_decodes_shallow(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..400)) {
            if check_depth(&bytes).is_ok() {
                let mut cursor = std::io::Cursor::new(bytes);
                if let Ok(values) = rml_amf0::deserialize(&mut cursor) {
                    fn depth(v: &Amf0Value) -> usize {
                        match v {
                            Amf0Value::Object(m) => 1 + m.values().map(depth).max().unwrap_or(0),
                            Amf0Value::StrictArray(a) => 1 + a.iter().map(depth).max().unwrap_or(0),
                            _ => 0,
                        }
                    }
                    proptest::prop_assert!(values.iter().map(depth).max().unwrap_or(0) <= MAX_DEPTH);
                }
            }
        }
    }
}
