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

/// A form of webhook URL that [`check_url`] accepts in development mode, as the OpenAPI
/// document states it: http(s), a host name whose labels start with a letter (so never read as
/// an IPv4 number), an optional port and path; no credentials.
pub const URL_PATTERN: &str =
    "^[Hh][Tt][Tt][Pp][Ss]?://[A-Za-z][A-Za-z0-9-]*(\\.[A-Za-z][A-Za-z0-9-]*)*(:[0-9]{1,4})?(/[!-~]*)?$";

/// Checks what can be checked without DNS; returns the parsed URL.
pub fn check_url(url: &str, allow_private: bool) -> Result<Url, String> {
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
        let port = parsed.port_or_known_default().unwrap_or(443);
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
    }
    Ok(parsed)
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
