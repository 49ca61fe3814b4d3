//! Where webhooks may be sent. In production mode a target must be https and resolve only to
//! public addresses: loopback, private, link-local, multicast and similar ranges are refused at
//! create and again at delivery, after DNS resolution, by the resolver the sender uses, so a name
//! that later resolves inside (DNS rebinding) still reaches nothing (CONTRACT: Webhooks).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use reqwest::Url;

/// Whether an address is on the public internet.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => is_public_v4(v4),
            None => is_public_v6(v6),
        },
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, ..] = ip.octets();
    !(ip.is_private()
        || ip.is_loopback()
        || ip.is_link_local()
        || ip.is_multicast()
        || ip.is_broadcast()
        || ip.is_unspecified()
        || ip.is_documentation()
        || a == 0
        || (a == 100 && (64..128).contains(&b)) // shared address space (CGNAT)
        || (a == 192 && b == 0 && ip.octets()[2] == 0) // IETF protocol assignments
        || (a == 198 && (18..20).contains(&b)) // benchmarking
        || a >= 240) // reserved
}

fn is_public_v6(ip: Ipv6Addr) -> bool {
    let first = ip.segments()[0];
    !(ip.is_loopback()
        || ip.is_unspecified()
        || ip.is_multicast()
        || (first & 0xfe00) == 0xfc00 // unique local
        || (first & 0xffc0) == 0xfe80 // link-local
        || first == 0x2001 && ip.segments()[1] == 0x0db8) // documentation
}

/// The grammar of a webhook URL, as the server checks it and as the OpenAPI document states it
/// (one constant for both): `http` or `https`; a host that is a DNS name (labels of letters,
/// digits and single inner dashes, the last starting with a letter, so never read as a
/// number), an IPv4 address or a bracketed IPv6 address; an optional port up to 65535; then
/// anything but control characters and whitespace after `/`, `?` or `#`. That class is spelled
/// out rather than written `[^\s]`: what `\s` takes differs between regex dialects (U+0085 is
/// whitespace to Rust, not to JavaScript; schemathesis found the gap), and a URL the document
/// allows must never be one the server refuses. No credentials (`user@`). Names are ASCII: an
/// internationalised name is written in its `xn--` form, which this grammar does not take (the
/// `--`), so such a host is refused. Production mode also wants https and public addresses,
/// which [`check_url`] and [`check_target`] check beyond the grammar.
pub const URL_PATTERN: &str = concat!(
    "^[Hh][Tt][Tt][Pp][Ss]?://",
    crate::domain::host_pattern!(),
    // port
    "(:([0-9]{1,4}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5]))?",
    // path, query, fragment
    "([/?#][^\\u0000-\\u0020\\u007F-\\u00A0\\u1680\\u2000-\\u200A\\u2028\\u2029\\u202F\\u205F\\u3000\\uFEFF]*)?$",
);

static URL_GRAMMAR: std::sync::LazyLock<Option<regex::Regex>> =
    std::sync::LazyLock::new(|| regex::Regex::new(URL_PATTERN).ok());

/// Checks what can be checked without DNS; returns the parsed URL.
pub fn check_url(url: &str, allow_private: bool) -> Result<Url, String> {
    if !URL_GRAMMAR.as_ref().is_some_and(|grammar| grammar.is_match(url)) {
        return Err("must be an http(s) URL whose host is a DNS name, an IPv4 or a bracketed IPv6 address, \
                    without credentials"
            .into());
    }
    let parsed = Url::parse(url).map_err(|e| format!("must be an absolute URL ({e})"))?;
    match parsed.scheme() {
        "https" => {}
        "http" if allow_private => {}
        "http" => return Err("must use https (plain http only in development mode)".into()),
        _ => return Err("must be an http(s) URL".into()),
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err("must not carry credentials".into());
    }
    match parsed.host() {
        None => Err("must have a host".into()),
        Some(url::Host::Ipv4(ip)) if !allow_private && !is_public(IpAddr::V4(ip)) => {
            Err("must not point to a loopback, private, link-local or multicast address".into())
        }
        Some(url::Host::Ipv6(ip)) if !allow_private && !is_public(IpAddr::V6(ip)) => {
            Err("must not point to a loopback, private, link-local or multicast address".into())
        }
        _ => Ok(parsed),
    }
}

/// Checks a webhook target at create: the static rules, then (in production) that its name
/// resolves, and only to public addresses.
pub async fn check_target(url: &str, allow_private: bool) -> Result<Url, String> {
    let parsed = check_url(url, allow_private)?;
    if allow_private {
        return Ok(parsed);
    }
    if let Some(url::Host::Domain(name)) = parsed.host() {
        resolves_public(name, parsed.port_or_known_default().unwrap_or(443)).await?;
    }
    Ok(parsed)
}

/// Checks that `name` resolves, and only to public addresses (a target's host in production:
/// webhooks, simulcast targets).
pub async fn resolves_public(name: &str, port: u16) -> Result<(), String> {
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host((name, port))
        .await
        .map_err(|_| format!("host {name} does not resolve"))?
        .collect();
    if addrs.is_empty() {
        return Err(format!("host {name} does not resolve"));
    }
    if addrs.iter().any(|a| !is_public(a.ip())) {
        return Err("must not resolve to a loopback, private, link-local or multicast address".into());
    }
    Ok(())
}

/// The sender's DNS resolver: in production it drops every non-public address, and fails when
/// none is left.
pub struct GuardedResolver {
    pub allow_private: bool,
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let allow_private = self.allow_private;
        Box::pin(async move {
            let host = name.as_str().to_string();
            let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let allowed: Vec<SocketAddr> =
                addrs.into_iter().filter(|a| allow_private || is_public(a.ip())).collect();
            if allowed.is_empty() {
                return Err(format!("{host} resolves to no public address; refused").into());
            }
            Ok(Box::new(allowed.into_iter()) as Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// What the document promises a client is what the server takes (development mode).
        #[test]
        fn every_url_of_the_documented_form_is_taken(url in URL_PATTERN.trim_start_matches('^').trim_end_matches('$')) {
            proptest::prop_assert!(check_url(&url, true).is_ok(), "{url}: {:?}", check_url(&url, true));
        }
    }

    #[test]
    fn hosts_outside_the_grammar_are_refused() {
        for url in [
            "https://a*b.com/",
            "https://a_b.com/",
            "https://-a.com/",
            "https://a-.com/",
            "https://a..b/",
            "https://a.123/",
            "https://1.2.3.4.5/",
            "https://256.1.1.1/",
            "https://xn--bcher-kva.example/",
            "https://user:pass@example.com/",
            "https://example.com:65536/",
            "https://[::1::2]/",
            "ftp://example.com/",
            "https://example.com/a b",
            // Whitespace to Rust's `\s` but not to JavaScript's: refused by both now.
            "https://example.com/a\u{85}b",
            "https://example.com/a\u{5}b",
            "0",
        ] {
            assert!(check_url(url, true).is_err(), "{url} should be refused");
        }
        for url in [
            "http://127.0.0.1:45839/x",
            "http://[::1]:8080/x",
            "https://1a.example.com:65535/ü?q=1#f",
            "HTTPS://Example.COM",
        ] {
            assert!(check_url(url, true).is_ok(), "{url}: {:?}", check_url(url, true));
        }
    }

    #[test]
    fn public_and_private_addresses() {
        for private in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "0.0.0.0",
            "224.0.0.1",
            "100.64.0.1",
            "::1",
            "fe80::1",
            "fd00::1",
            "::ffff:127.0.0.1",
            "ff02::1",
        ] {
            assert!(!is_public(private.parse().unwrap()), "{private}");
        }
        for public in ["93.184.216.34", "1.1.1.1", "2606:4700:4700::1111"] {
            assert!(is_public(public.parse().unwrap()), "{public}");
        }
    }

    #[test]
    fn url_rules() {
        assert!(check_url("https://93.184.216.34/hook", false).is_ok());
        assert!(check_url("http://93.184.216.34/hook", false).unwrap_err().contains("https"));
        assert!(check_url("http://127.0.0.1:9/hook", true).is_ok());
        assert!(check_url("https://127.0.0.1/hook", false).unwrap_err().contains("loopback"));
        assert!(check_url("https://[::1]/hook", false).is_err());
        assert!(check_url("ftp://example.com/", true).is_err());
        assert!(check_url("not a url", true).is_err());
        assert!(check_url("https://user:pw@example.com/", true).is_err());
    }
}
