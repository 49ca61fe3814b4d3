//! Simulcast targets (CONTRACT: Simulcast): where a live push is sent on, as the publisher sent
//! it. A target's URL is parsed once at the edge into a [`TargetUrl`]; its key and passphrase are
//! secrets, shown only masked ([`TargetUrl::masked`]).

use std::net::IpAddr;
use std::time::Duration;

use poem_openapi::Enum;

/// Targets a stream may have.
pub const MAX_TARGETS: usize = 10;
/// The longest target URL taken.
pub const MAX_URL_LEN: usize = 2048;
/// What a failing target waits before the next try: 1, 2, 4 … 30 s.
pub const BACKOFF_CAP: Duration = Duration::from_secs(30);

/// Where a target stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Enum)]
#[oai(rename_all = "lowercase")]
pub enum TargetStatus {
    /// Not sending: the stream is not live, or the target is disabled.
    Idle,
    /// Connecting (or waiting for the push's first keyframe).
    Connecting,
    /// Connected and sending.
    Live,
    /// The last try failed; `lastError` says why, and the next try waits its backoff.
    Error,
}

impl TargetStatus {
    pub const ALL: [TargetStatus; 4] =
        [TargetStatus::Idle, TargetStatus::Connecting, TargetStatus::Live, TargetStatus::Error];

    pub fn as_str(self) -> &'static str {
        match self {
            TargetStatus::Idle => "idle",
            TargetStatus::Connecting => "connecting",
            TargetStatus::Live => "live",
            TargetStatus::Error => "error",
        }
    }

    /// The stored form back; an unknown one reads as `idle`.
    pub fn parse(s: &str) -> TargetStatus {
        TargetStatus::ALL.into_iter().find(|t| t.as_str() == s).unwrap_or(TargetStatus::Idle)
    }
}

/// The wait before try `n + 1` after `n` failures in a row (`n ≥ 1`).
pub fn backoff(failures: u32) -> Duration {
    let secs = 1u64 << failures.saturating_sub(1).min(5);
    Duration::from_secs(secs).min(BACKOFF_CAP)
}

/// The protocol a target speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    /// FLV over RTMP.
    Rtmp,
    /// FLV over RTMP in TLS; the platform's certificate is verified.
    Rtmps,
    /// MPEG-TS over SRT (caller).
    Srt,
}

/// SRT's options, from the URL's query.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SrtOptions {
    pub streamid: Option<String>,
    pub passphrase: Option<String>,
    /// Milliseconds.
    pub latency: Option<u32>,
}

/// A target's URL, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetUrl {
    pub scheme: Scheme,
    /// A DNS name or an address (IPv6 without brackets).
    pub host: String,
    pub port: u16,
    /// RTMP: the application path (`live2`, or more segments), without slashes around it.
    pub app: String,
    /// RTMP: the stream key (the last path segment, with any query).
    pub key: String,
    pub srt: SrtOptions,
}

/// One SRT option of a target URL's query (see [`URL_PATTERN`]).
macro_rules! srt_option {
    () => {
        concat!(
            "(streamid=([A-Za-z0-9._~!$'()*,;:@/?=-]|%[0-7][0-9A-Fa-f]){0,512}",
            "|passphrase=[A-Za-z0-9._~!$'()*,;:@/?=-]{10,79}",
            "|latency=0*(2[0-9]|[3-9][0-9]|[1-9][0-9]{2}|[1-7][0-9]{3}|8000)",
            "|mode=caller)"
        )
    };
}

/// The grammar of a target URL, as the server checks it and as the OpenAPI document states it
/// (one constant for both; the webhook URL's host grammar): `rtmp`, `rtmps` or `srt` in any
/// case; a host that is a DNS name, an IPv4 or a bracketed IPv6 address; a port from 1 to 65535.
/// RTMP: then the application's path segments and the key (ASCII: letters, digits and
/// `._~!$&'()*+,;=:@-`, a segment never only dots) with any query after it. SRT: a port, no path,
/// and only `streamid` (at most 512 characters, ASCII, `%XX` escapes below `%80`), `passphrase`
/// (10–79 characters of the same set without `%`, `&` or `+`), `latency` (20–8000) and
/// `mode=caller`. [`TargetUrl::parse`] names what is wrong; a URL it takes must also match this.
pub const URL_PATTERN: &str = concat!(
    "^(",
    "[Rr][Tt][Mm][Pp][Ss]?://",
    super::host_pattern!(),
    "(:",
    super::port_pattern!(),
    ")?",
    "/+",
    "\\.*[A-Za-z0-9_~!$&'()*+,;=:@-][A-Za-z0-9._~!$&'()*+,;=:@-]*",
    "(/\\.*[A-Za-z0-9_~!$&'()*+,;=:@-][A-Za-z0-9._~!$&'()*+,;=:@-]*)+",
    "/*",
    "(\\?[A-Za-z0-9._~!$&'()*+,;=:@/?%-]*)?",
    "|[Ss][Rr][Tt]://",
    super::host_pattern!(),
    ":",
    super::port_pattern!(),
    "/*",
    "(\\?(",
    srt_option!(),
    "(&",
    srt_option!(),
    ")*",
    ")?)?",
    ")$",
);

static URL_GRAMMAR: std::sync::LazyLock<Option<regex::Regex>> =
    std::sync::LazyLock::new(|| regex::Regex::new(URL_PATTERN).ok());

/// A streamid as the grammar writes it: `%XX` for every byte but letters, digits and
/// `._~!$'()*,;:@/?=-`.
fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || b"._~!$'()*,;:@/?=-".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `****` after the first 4 characters (all of a secret of 4 or fewer).
pub fn mask(secret: &str) -> String {
    let shown: String = secret.chars().take(4).collect();
    if shown.chars().count() == secret.chars().count() {
        "****".to_string()
    } else {
        format!("{shown}****")
    }
}

fn host_of(host: &str) -> String {
    host.trim_start_matches('[').trim_end_matches(']').to_string()
}

impl TargetUrl {
    /// Parses a target URL: `rtmp://host[:port]/app/key`, `rtmps://…` (port 443 by default) or
    /// `srt://host:port[?streamid=…&passphrase=…&latency=…]`. The error says what is wrong.
    pub fn parse(raw: &str) -> Result<TargetUrl, String> {
        let url = TargetUrl::parse_parts(raw)?;
        if !URL_GRAMMAR.as_ref().is_some_and(|grammar| grammar.is_match(raw)) {
            return Err(match url.scheme {
                Scheme::Rtmp | Scheme::Rtmps => "must be rtmp(s)://<host>[:<port>]/<app>/<stream key>: a DNS name, \
                                                 IPv4 or bracketed IPv6 host, and an ASCII path of letters, digits \
                                                 and ._~!$&'()*+,;=:@-"
                    .into(),
                Scheme::Srt => "must be srt://<host>:<port>?streamid=…&passphrase=…&latency=…: a DNS name, IPv4 \
                                or bracketed IPv6 host, and options in ASCII (the passphrase without %, & or +)"
                    .into(),
            });
        }
        Ok(url)
    }

    fn parse_parts(raw: &str) -> Result<TargetUrl, String> {
        if raw.len() > MAX_URL_LEN {
            return Err(format!("must be at most {MAX_URL_LEN} characters"));
        }
        if raw.chars().any(|c| c.is_control() || c.is_whitespace()) {
            return Err("must not contain whitespace or control characters".into());
        }
        let scheme = match raw.split_once("://").map(|(s, _)| s.to_ascii_lowercase()).as_deref() {
            Some("rtmp") => Scheme::Rtmp,
            Some("rtmps") => Scheme::Rtmps,
            Some("srt") => Scheme::Srt,
            Some(other) => return Err(format!("scheme `{other}` is not taken; use rtmp, rtmps or srt")),
            None => return Err("must be an rtmp://, rtmps:// or srt:// URL".into()),
        };
        let url = url::Url::parse(raw).map_err(|e| match e {
            url::ParseError::InvalidPort => "the port must be a number from 1 to 65535".to_string(),
            e => format!("is not a URL ({e})"),
        })?;
        if !url.username().is_empty() || url.password().is_some() {
            return Err("must not carry credentials before the host".into());
        }
        if url.fragment().is_some() {
            return Err("must not have a fragment (#…)".into());
        }
        let host = match url.host_str() {
            Some(h) if !h.is_empty() => host_of(h),
            _ => return Err("must have a host".into()),
        };
        let port = match (url.port(), scheme) {
            (Some(0), _) => return Err("the port must be a number from 1 to 65535".into()),
            (Some(p), _) => p,
            (None, Scheme::Rtmp) => 1935,
            (None, Scheme::Rtmps) => 443,
            (None, Scheme::Srt) => return Err("an srt:// URL needs a port".into()),
        };
        match scheme {
            Scheme::Rtmp | Scheme::Rtmps => {
                let path = url.path().trim_matches('/');
                let Some((app, key)) = path.rsplit_once('/') else {
                    return Err("needs the application and the stream key in its path \
                                (rtmp://host/app/<stream key>)"
                        .into());
                };
                if app.is_empty() || key.is_empty() || app.split('/').any(str::is_empty) {
                    return Err("needs the application and the stream key in its path \
                                (rtmp://host/app/<stream key>)"
                        .into());
                }
                let key = match url.query() {
                    Some(q) => format!("{key}?{q}"),
                    None => key.to_string(),
                };
                Ok(TargetUrl { scheme, host, port, app: app.to_string(), key, srt: SrtOptions::default() })
            }
            Scheme::Srt => {
                if !url.path().trim_matches('/').is_empty() {
                    return Err("an srt:// URL has no path: srt://host:port?streamid=…".into());
                }
                let mut srt = SrtOptions::default();
                for (name, value) in url.query_pairs() {
                    match name.as_ref() {
                        "streamid" if value.len() <= 512 => srt.streamid = Some(value.into_owned()),
                        "streamid" => return Err("streamid must be at most 512 characters".into()),
                        "passphrase" if (10..=79).contains(&value.len()) => {
                            srt.passphrase = Some(value.into_owned())
                        }
                        "passphrase" => return Err("passphrase must be 10 to 79 characters".into()),
                        "latency" => match value.parse::<u32>() {
                            Ok(ms) if (20..=8000).contains(&ms) => srt.latency = Some(ms),
                            _ => return Err("latency must be milliseconds from 20 to 8000".into()),
                        },
                        "mode" if value == "caller" => {}
                        "mode" => return Err("mode must be caller: Sluice connects to the target".into()),
                        other => {
                            return Err(format!(
                                "`{other}` is not an option Sluice takes; use streamid, passphrase or latency"
                            ))
                        }
                    }
                }
                Ok(TargetUrl { scheme, host, port, app: String::new(), key: String::new(), srt })
            }
        }
    }

    /// The host as an address, when it is one.
    pub fn ip(&self) -> Option<IpAddr> {
        self.host.parse().ok()
    }

    fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    fn scheme_str(&self) -> &'static str {
        match self.scheme {
            Scheme::Rtmp => "rtmp",
            Scheme::Rtmps => "rtmps",
            Scheme::Srt => "srt",
        }
    }

    /// The URL in full (what is sealed and what the sender connects to).
    pub fn full(&self) -> String {
        self.render(|s| s.to_string())
    }

    /// The URL as the record shows it: the key, the streamid and the passphrase masked.
    pub fn masked(&self) -> String {
        self.render(mask)
    }

    fn render(&self, secret: impl Fn(&str) -> String) -> String {
        let base = format!("{}://{}", self.scheme_str(), self.authority());
        match self.scheme {
            Scheme::Rtmp | Scheme::Rtmps => format!("{base}/{}/{}", self.app, secret(&self.key)),
            Scheme::Srt => {
                // Written in the grammar's own form, so that it parses back to the same target:
                // the streamid escaped where it must be, the passphrase as it is (its characters
                // need no escape).
                let mut pairs = Vec::new();
                if let Some(s) = &self.srt.streamid {
                    pairs.push(format!("streamid={}", escape(&secret(s))));
                }
                if let Some(p) = &self.srt.passphrase {
                    pairs.push(format!("passphrase={}", secret(p)));
                }
                if let Some(l) = self.srt.latency {
                    pairs.push(format!("latency={l}"));
                }
                if pairs.is_empty() {
                    base
                } else {
                    format!("{base}?{}", pairs.join("&"))
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn platform_urls_parse_and_mask() {
        let yt = TargetUrl::parse("rtmp://a.rtmp.youtube.com/live2/abcd-efgh-ijkl-mnop").expect("youtube");
        assert_eq!((yt.scheme, yt.port, yt.app.as_str()), (Scheme::Rtmp, 1935, "live2"));
        assert_eq!(yt.masked(), "rtmp://a.rtmp.youtube.com:1935/live2/abcd****");
        assert_eq!(yt.full(), "rtmp://a.rtmp.youtube.com:1935/live2/abcd-efgh-ijkl-mnop");
        let tw = TargetUrl::parse("rtmps://live.twitch.tv/app/live_123?bandwidthtest=true").expect("twitch");
        assert_eq!(tw.port, 443);
        assert_eq!(tw.key, "live_123?bandwidthtest=true");
        assert!(!tw.masked().contains("123"));
        let srt =
            TargetUrl::parse("srt://[::1]:9000?streamid=publish/key1&passphrase=0123456789ab&latency=200")
                .expect("srt");
        assert_eq!((srt.host.as_str(), srt.port), ("::1", 9000));
        assert_eq!(srt.srt.latency, Some(200));
        let masked = srt.masked();
        assert!(masked.starts_with("srt://[::1]:9000?streamid=publ****&passphrase=0123****"), "{masked}");
        assert_eq!(TargetUrl::parse(&srt.full()).expect("round trip"), srt);
        assert_eq!(mask("abc"), "****");
    }

    #[test]
    fn bad_urls_say_what_is_wrong() {
        for (url, says) in [
            ("http://example.com/live/key", "scheme"),
            ("example.com/live/key", "rtmp://"),
            ("rtmp://example.com/live", "stream key"),
            ("rtmp://example.com/live/", "stream key"),
            ("rtmp://example.com//key", "stream key"),
            ("rtmp://example.com:70000/live/key", "port"),
            ("rtmp://example.com:0/live/key", "port"),
            ("srt://example.com?streamid=x", "port"),
            ("srt://example.com:9000?passphrase=short", "passphrase"),
            ("srt://example.com:9000?latency=5", "latency"),
            ("srt://example.com:9000?mode=listener", "caller"),
            ("srt://example.com:9000?foo=1", "foo"),
            ("rtmp://user:pw@example.com/live/key", "credentials"),
            ("rtmp://example.com/live/ke y", "whitespace"),
        ] {
            let e = TargetUrl::parse(url).expect_err(url);
            assert!(e.contains(says), "{url}: {e}");
        }
        assert!(TargetUrl::parse(&format!("rtmp://h/a/{}", "k".repeat(MAX_URL_LEN))).is_err());
    }

    proptest::proptest! {
        /// What the document promises a client is what the server takes, and what it seals
        /// parses back to the same target.
        #[test]
        fn every_url_of_the_documented_form_is_taken(url in URL_PATTERN.trim_start_matches('^').trim_end_matches('$')) {
            // The document's `maxLength` says the rest.
            proptest::prop_assume!(url.len() <= MAX_URL_LEN);
            let parsed = TargetUrl::parse(&url);
            proptest::prop_assert!(parsed.is_ok(), "{url}: {parsed:?}");
            if let Ok(t) = parsed {
                proptest::prop_assert_eq!(TargetUrl::parse(&t.full()), Ok(t.clone()), "{}", t.full());
            }
        }
    }

    #[test]
    fn urls_outside_the_grammar_are_refused() {
        for url in [
            "rtmp://a_b.com/live/key",
            "rtmp://a..b/live/key",
            "rtmp://host/live/../key",
            "rtmp://host/./key",
            "rtmp://host/live/k%C3%A9y",
            "rtmp://host/live/k\u{e9}y",
            "rtmp://[::1::2]/live/key",
            "srt://host:9000?streamid=a+b",
            "srt://host:9000?passphrase=abc%20defghijk",
            "srt://host:9000?streamid=%FF",
            "srt://host:9000?&latency=200",
            "srt://host:9000?streamid",
        ] {
            assert!(TargetUrl::parse(url).is_err(), "{url} should be refused");
        }
        for url in [
            "RTMP://Host.Example:0001935//live/sub/key/?x=%41&y",
            "rtmp://1.2.3.4/live/key",
            "rtmps://[2001:db8::1]:443/app/key",
            "srt://host:9000",
            "srt://host:9000/?",
            "srt://host:9000?streamid=%23!::r=live/key,m=publish&passphrase=a/b!c$d'e(f)&latency=0120&mode=caller",
        ] {
            let t = TargetUrl::parse(url).unwrap_or_else(|e| panic!("{url}: {e}"));
            assert_eq!(TargetUrl::parse(&t.full()), Ok(t.clone()), "{url} → {}", t.full());
        }
    }

    #[test]
    fn backoff_doubles_to_thirty_seconds() {
        let waits: Vec<u64> = (1..=8).map(|n| backoff(n).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 30, 30, 30]);
        assert_eq!(TargetStatus::parse("live"), TargetStatus::Live);
        assert_eq!(TargetStatus::parse("?"), TargetStatus::Idle);
    }
}
