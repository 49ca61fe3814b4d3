//! The playback origin under `{playback_base}` (served at `/play`): live LL-HLS and VOD.
//! Every request passes [`authorize`] first, so no path serves media around it.

pub mod origin;
pub mod token;
pub mod vod;

use poem::Request;

pub use origin::routes;

/// What a playback request reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resource<'a> {
    Stream(&'a str),
    Vod(&'a str),
}

/// Why playback was refused (401 with `X-Deny-Reason`, CONTRACT: Signed playback).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deny {
    MissingToken,
    BadSignature,
    Expired,
    IpMismatch,
    WrongResource,
}

impl Deny {
    pub fn reason(self) -> &'static str {
        match self {
            Deny::MissingToken => "missing_token",
            Deny::BadSignature => "bad_signature",
            Deny::Expired => "expired",
            Deny::IpMismatch => "ip_mismatch",
            Deny::WrongResource => "wrong_resource",
        }
    }
}

/// The one authorisation step of every playback request. Playback is open today; signed
/// playback (issue 7) checks the token of `req` against `resource` here.
pub fn authorize(_req: &Request, _resource: &Resource<'_>) -> Result<(), Deny> {
    Ok(())
}
