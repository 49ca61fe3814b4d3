//! Pieces of the URL grammars that the server checks and the OpenAPI document states (webhook
//! URLs, simulcast target URLs), as macros that expand to string literals so that each grammar
//! is one `concat!` constant.

/// A host: a DNS name (labels of letters, digits and single inner dashes, the last starting with
/// a letter, so never read as a number), an IPv4 address or a bracketed IPv6 address (without an
/// embedded IPv4 or a zone).
macro_rules! host_pattern {
    () => {
        concat!(
            "(",
            // DNS name
            "([A-Za-z0-9]+(-[A-Za-z0-9]+)*\\.)*[A-Za-z][A-Za-z0-9]*(-[A-Za-z0-9]+)*",
            // IPv4
            "|((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\\.){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])",
            // IPv6
            "|\\[(",
            "([0-9A-Fa-f]{1,4}:){7}[0-9A-Fa-f]{1,4}",
            "|([0-9A-Fa-f]{1,4}:){1,7}:",
            "|([0-9A-Fa-f]{1,4}:){1,6}:[0-9A-Fa-f]{1,4}",
            "|([0-9A-Fa-f]{1,4}:){1,5}(:[0-9A-Fa-f]{1,4}){1,2}",
            "|([0-9A-Fa-f]{1,4}:){1,4}(:[0-9A-Fa-f]{1,4}){1,3}",
            "|([0-9A-Fa-f]{1,4}:){1,3}(:[0-9A-Fa-f]{1,4}){1,4}",
            "|([0-9A-Fa-f]{1,4}:){1,2}(:[0-9A-Fa-f]{1,4}){1,5}",
            "|[0-9A-Fa-f]{1,4}:(:[0-9A-Fa-f]{1,4}){1,6}",
            "|:((:[0-9A-Fa-f]{1,4}){1,7}|:)",
            ")\\]",
            ")"
        )
    };
}

/// A port from 1 to 65535, leading zeros allowed (as URL parsers read them).
macro_rules! port_pattern {
    () => {
        "0*([1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])"
    };
}

pub(crate) use host_pattern;
pub(crate) use port_pattern;
