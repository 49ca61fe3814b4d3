//! The client's address, proxy-aware (CONTRACT: `SLUICE_TRUSTED_PROXIES`; Conventions).
//!
//! `X-Forwarded-For` is believed only when the TCP peer is a trusted proxy, and then only as far
//! as it was written by trusted proxies: the client is the rightmost address of the chain that
//! is not a trusted proxy. Anything a client writes into the header itself lies to the left of
//! that and is never read. The edge middleware resolves the address once per request and puts
//! it in the request's extensions ([`ClientIp`]); the failed-auth and login limiters, `allowIp`
//! pinning of playback tokens and the request log all read it from there.

use std::net::{IpAddr, SocketAddr};

use ipnet::IpNet;
use poem::Request;

/// The resolved client address of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientIp(pub IpAddr);

/// Addresses and networks of the reverse proxies whose `X-Forwarded-For` is believed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustedProxies(Vec<IpNet>);

impl TrustedProxies {
    /// A comma-separated list of IPs and CIDRs (`10.0.0.0/8, ::1`); empty trusts no one.
    pub fn parse(list: &str) -> Result<Self, String> {
        let mut nets = Vec::new();
        for entry in list.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let net = match entry.parse::<IpNet>() {
                Ok(net) => net.trunc(),
                Err(_) => entry
                    .parse::<IpAddr>()
                    .map(|ip| IpNet::from(canonical_ip(ip)))
                    .map_err(|_| format!("`{entry}` is not an IP address or CIDR"))?,
            };
            nets.push(net);
        }
        Ok(TrustedProxies(nets))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = canonical_ip(ip);
        self.0.iter().any(|net| net.contains(&ip))
    }

    /// The client of a connection from `peer` that carried these `X-Forwarded-For` values
    /// (in the order the header lines came).
    pub fn client<'a>(&self, peer: IpAddr, forwarded: impl IntoIterator<Item = &'a str>) -> IpAddr {
        let peer = canonical_ip(peer);
        if !self.contains(peer) {
            return peer;
        }
        let hops: Vec<&str> = forwarded.into_iter().flat_map(|v| v.split(',')).map(str::trim).collect();
        let mut client = peer;
        for hop in hops.iter().rev() {
            // Past an entry that is not an address nothing can be believed: the last trusted
            // hop is as far as the chain is known.
            let Some(ip) = parse_hop(hop) else { break };
            client = ip;
            if !self.contains(ip) {
                break;
            }
        }
        client
    }

    /// The client of `req` as the edge sees it: its peer, or what trusted proxies say.
    pub fn resolve(&self, req: &Request) -> Option<IpAddr> {
        let peer = canonical_ip(req.remote_addr().as_socket_addr()?.ip());
        // An untrusted peer is the client: its headers are not even looked up.
        if !self.contains(peer) {
            return Some(peer);
        }
        let forwarded = req.headers().get_all("x-forwarded-for").iter().filter_map(|v| v.to_str().ok());
        Some(self.client(peer, forwarded))
    }
}

/// `1.2.3.4`, `2001:db8::1`, and the forms with a port (`1.2.3.4:80`, `[2001:db8::1]:80`).
fn parse_hop(hop: &str) -> Option<IpAddr> {
    hop.parse::<IpAddr>().or_else(|_| hop.parse::<SocketAddr>().map(|s| s.ip())).ok().map(canonical_ip)
}

/// The client address of a request: the one the edge resolved, else the TCP peer.
pub fn of_request(req: &Request) -> Option<IpAddr> {
    req.extensions()
        .get::<ClientIp>()
        .map(|c| c.0)
        .or_else(|| req.remote_addr().as_socket_addr().map(|a| canonical_ip(a.ip())))
}

/// The key under which limits count an address: an IPv4 address as it is, an IPv6 address by
/// its /64 (one subscriber's network), so that hopping within it does not reset the count.
pub fn limit_key(ip: IpAddr) -> IpAddr {
    match canonical_ip(ip) {
        IpAddr::V6(v6) => {
            let prefix = u128::from(v6) & !((1u128 << 64) - 1);
            IpAddr::V6(prefix.into())
        }
        v4 => v4,
    }
}

/// `ip`, with an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`) as the IPv4 address it maps.
pub fn canonical_ip(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn limits_count_ipv6_by_its_64() {
        assert_eq!(limit_key(ip("2001:db8:1:2:aaaa::1")), ip("2001:db8:1:2::"));
        assert_eq!(limit_key(ip("2001:db8:1:2:bbbb::9")), ip("2001:db8:1:2::"));
        assert_eq!(limit_key(ip("192.0.2.1")), ip("192.0.2.1"));
        assert_eq!(limit_key(ip("::ffff:192.0.2.1")), ip("192.0.2.1"));
    }

    #[test]
    fn parses_ips_and_cidrs() {
        let t = TrustedProxies::parse(" 10.0.0.0/8, 192.168.1.7 ,::1,2001:db8::/32,").unwrap();
        assert!(t.contains(ip("10.200.3.4")));
        assert!(t.contains(ip("192.168.1.7")));
        assert!(!t.contains(ip("192.168.1.8")));
        assert!(t.contains(ip("::1")));
        assert!(t.contains(ip("2001:db8:ffff::1")));
        assert!(t.contains(ip("::ffff:10.1.1.1")), "an IPv4-mapped peer is its IPv4 address");
        assert!(TrustedProxies::parse("").unwrap().is_empty());
        assert!(TrustedProxies::parse("10.0.0.0/33").is_err());
        assert!(TrustedProxies::parse("proxy.local").is_err());
    }

    #[test]
    fn an_untrusted_peer_is_the_client_whatever_it_says() {
        let t = TrustedProxies::parse("10.0.0.1").unwrap();
        assert_eq!(t.client(ip("203.0.113.9"), ["1.1.1.1"]), ip("203.0.113.9"));
        let none = TrustedProxies::default();
        assert_eq!(none.client(ip("127.0.0.1"), ["1.1.1.1"]), ip("127.0.0.1"));
    }

    #[test]
    fn the_rightmost_untrusted_hop_is_the_client() {
        let t = TrustedProxies::parse("10.0.0.0/8").unwrap();
        let peer = ip("10.0.0.1");
        assert_eq!(t.client(peer, ["198.51.100.7"]), ip("198.51.100.7"));
        // A client that forges the header only adds entries to the left of its own.
        assert_eq!(t.client(peer, ["6.6.6.6, 198.51.100.7, 10.0.0.2"]), ip("198.51.100.7"));
        assert_eq!(t.client(peer, ["6.6.6.6", "198.51.100.7,10.0.0.2"]), ip("198.51.100.7"));
        assert_eq!(t.client(peer, ["[2001:db8::5]:443"]), ip("2001:db8::5"));
        assert_eq!(t.client(peer, ["198.51.100.7:5000"]), ip("198.51.100.7"));
        // No header, or only proxies: the leftmost proxy is as far as is known.
        assert_eq!(t.client(peer, []), peer);
        assert_eq!(t.client(peer, ["10.0.0.9, 10.0.0.2"]), ip("10.0.0.9"));
        // Garbage stops the walk at the last trusted hop.
        assert_eq!(t.client(peer, ["198.51.100.7, unknown, 10.0.0.2"]), ip("10.0.0.2"));
    }
}
