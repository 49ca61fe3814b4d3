//! Scopes of API keys and the roles of user sessions (interface: Scopes; CONTRACT: Scopes).

use std::fmt;
use std::str::FromStr;

use poem_openapi::Enum;

/// A permission an API key can hold. `*` holds every scope, including ones added later.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Enum)]
pub enum Scope {
    #[oai(rename = "streams:read")]
    StreamsRead,
    #[oai(rename = "streams:write")]
    StreamsWrite,
    #[oai(rename = "vod:read")]
    VodRead,
    #[oai(rename = "vod:write")]
    VodWrite,
    #[oai(rename = "webhooks:read")]
    WebhooksRead,
    #[oai(rename = "webhooks:write")]
    WebhooksWrite,
    #[oai(rename = "api-keys:read")]
    ApiKeysRead,
    #[oai(rename = "api-keys:write")]
    ApiKeysWrite,
    #[oai(rename = "*")]
    All,
}

impl Scope {
    pub const ALL: [Scope; 9] = [
        Scope::StreamsRead,
        Scope::StreamsWrite,
        Scope::VodRead,
        Scope::VodWrite,
        Scope::WebhooksRead,
        Scope::WebhooksWrite,
        Scope::ApiKeysRead,
        Scope::ApiKeysWrite,
        Scope::All,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Scope::StreamsRead => "streams:read",
            Scope::StreamsWrite => "streams:write",
            Scope::VodRead => "vod:read",
            Scope::VodWrite => "vod:write",
            Scope::WebhooksRead => "webhooks:read",
            Scope::WebhooksWrite => "webhooks:write",
            Scope::ApiKeysRead => "api-keys:read",
            Scope::ApiKeysWrite => "api-keys:write",
            Scope::All => "*",
        }
    }

    /// Whether holding `self` grants `needed`: `*` grants all, `x:write` grants `x:read`.
    pub fn grants(self, needed: Scope) -> bool {
        if self == needed || self == Scope::All {
            return true;
        }
        matches!(
            (self, needed),
            (Scope::StreamsWrite, Scope::StreamsRead)
                | (Scope::VodWrite, Scope::VodRead)
                | (Scope::WebhooksWrite, Scope::WebhooksRead)
                | (Scope::ApiKeysWrite, Scope::ApiKeysRead)
        )
    }

    pub fn names() -> String {
        Scope::ALL.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Scope {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Scope::ALL
            .into_iter()
            .find(|scope| scope.as_str() == s)
            .ok_or_else(|| format!("must be one of {}", Scope::names()))
    }
}

/// The scopes a principal holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScopeSet(Vec<Scope>);

impl ScopeSet {
    pub fn new(mut scopes: Vec<Scope>) -> Self {
        scopes.sort();
        scopes.dedup();
        ScopeSet(scopes)
    }

    pub fn all() -> Self {
        ScopeSet(vec![Scope::All])
    }

    /// Whether any held scope grants `needed`.
    pub fn allows(&self, needed: Scope) -> bool {
        self.0.iter().any(|held| held.grants(needed))
    }

    /// Whether every scope of `other` is granted by this set (no escalation when creating keys).
    pub fn covers(&self, other: &ScopeSet) -> bool {
        other.0.iter().all(|wanted| self.allows(*wanted))
    }

    pub fn as_slice(&self) -> &[Scope] {
        &self.0
    }

    /// Stored form: space-separated names.
    pub fn to_db(&self) -> String {
        self.0.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(" ")
    }

    /// Reads the stored form; names this build does not know are dropped (never granted).
    pub fn from_db(text: &str) -> Self {
        ScopeSet::new(text.split_whitespace().filter_map(|s| s.parse().ok()).collect())
    }
}

/// A user's role in a project (CONTRACT: Scopes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Enum)]
#[oai(rename_all = "lowercase")]
pub enum Role {
    Viewer,
    Member,
    Admin,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Member => "member",
            Role::Admin => "admin",
        }
    }

    pub fn parse_db(s: &str) -> Option<Role> {
        match s {
            "viewer" => Some(Role::Viewer),
            "member" => Some(Role::Member),
            "admin" => Some(Role::Admin),
            _ => None,
        }
    }

    /// viewer = every `:read`; member = viewer plus the `:write` of streams, vod and webhooks;
    /// admin = everything.
    pub fn scopes(self) -> ScopeSet {
        use Scope::*;
        let reads = [StreamsRead, VodRead, WebhooksRead, ApiKeysRead];
        match self {
            Role::Viewer => ScopeSet::new(reads.to_vec()),
            Role::Member => {
                let mut v = reads.to_vec();
                v.extend([StreamsWrite, VodWrite, WebhooksWrite]);
                ScopeSet::new(v)
            }
            Role::Admin => ScopeSet::all(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_grants_read_and_star_grants_all() {
        assert!(Scope::StreamsWrite.grants(Scope::StreamsRead));
        assert!(!Scope::StreamsRead.grants(Scope::StreamsWrite));
        assert!(!Scope::VodWrite.grants(Scope::StreamsRead));
        assert!(Scope::All.grants(Scope::ApiKeysWrite));
        assert!(!Scope::ApiKeysWrite.grants(Scope::All));
    }

    #[test]
    fn covers_prevents_escalation() {
        let held = ScopeSet::new(vec![Scope::StreamsWrite, Scope::ApiKeysWrite]);
        assert!(held.covers(&ScopeSet::new(vec![Scope::StreamsRead])));
        assert!(!held.covers(&ScopeSet::all()));
        assert!(!held.covers(&ScopeSet::new(vec![Scope::VodRead])));
        assert!(ScopeSet::all().covers(&ScopeSet::all()));
    }

    #[test]
    fn roles_map_to_scopes() {
        assert!(Role::Viewer.scopes().allows(Scope::VodRead));
        assert!(!Role::Viewer.scopes().allows(Scope::VodWrite));
        assert!(Role::Member.scopes().allows(Scope::WebhooksWrite));
        assert!(!Role::Member.scopes().allows(Scope::ApiKeysWrite));
        assert!(Role::Admin.scopes().allows(Scope::All));
    }

    #[test]
    fn db_round_trip_drops_unknown_names() {
        let s = ScopeSet::from_db("vod:read bogus streams:write");
        assert_eq!(s.to_db(), "streams:write vod:read");
        assert_eq!("api-keys:read".parse::<Scope>(), Ok(Scope::ApiKeysRead));
        assert!("admin".parse::<Scope>().is_err());
    }
}
