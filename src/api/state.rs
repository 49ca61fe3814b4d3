//! What the API's handlers work with: the services and stores [`crate::app`] built, each shared
//! with the edges that need it too. The handlers read it as request data; nothing below the API
//! sees it.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use crate::config::Settings;
use crate::domain::content_key::MasterKey;
use crate::events::Outbox;
use crate::media::egress::simulcast::Simulcast;
use crate::media::live::channel::Channels;
use crate::password_gate::PasswordGate;
use crate::ratelimit::{Limiter, Lockout};
use crate::services::endpoints::Endpoints;
use crate::services::policy::Policies;
use crate::services::streams::Streams;
use crate::services::vods::Vods;
use crate::storage::Storage;
use crate::store::keys::SigningKeys;
use crate::store::Db;
use crate::upload::Uploads;

pub struct ApiState {
    pub settings: Arc<Settings>,
    pub db: Db,
    pub outbox: Outbox,
    pub endpoints: Arc<Endpoints>,
    pub streams: Arc<Streams>,
    pub vods: Arc<Vods>,
    /// The origin's cache of playback policies, which the API clears when it changes one.
    pub policies: Arc<Policies>,
    /// The live edge of each stream pushed here (a deleted stream's goes at once).
    pub channels: Arc<Channels>,
    /// The senders to simulcast targets of the pushes held here, woken when a target changes.
    pub simulcast: Arc<Simulcast>,
    pub uploads: Arc<Uploads>,
    /// VOD sources and outputs.
    pub storage: Storage,
    /// Keys of signed URLs.
    pub keys: Arc<SigningKeys>,
    /// Seals push verifiers and webhook secrets.
    pub master_key: MasterKey,
    /// Per API key (and per signed-in user): sustained rate and burst of the contract.
    pub request_limiter: Arc<Limiter<String>>,
    /// Per client IP: failed authentications a minute. Only failing requests are refused.
    pub auth_failures: Arc<Lockout<IpAddr>>,
    /// Per e-mail address: failed sign-ins (10 in 15 minutes), then a lockout.
    pub login_failures: Arc<Lockout<String>>,
    /// Every password hash and check of the server runs through it.
    pub passwords: PasswordGate,
    /// The SSE followers of the event log: their caps, and the signal that ends them.
    pub followers: crate::api::events::Followers,
    /// When each key's `lastUsedAt` was last written by this process.
    pub(crate) key_uses: Mutex<HashMap<String, i64>>,
}

impl ApiState {
    /// Whether webhook targets may be plain http and private addresses (development mode).
    pub fn allow_private_webhooks(&self) -> bool {
        self.settings.mode == crate::config::Mode::Development
    }
}
