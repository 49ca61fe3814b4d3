//! Project slugs and user e-mail addresses.

/// A project's slug: 3–40 characters of `a-z`, `0-9` and `-`, not starting or ending with `-`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProjectSlug(String);

impl ProjectSlug {
    /// What [`ProjectSlug::parse`] accepts, as the OpenAPI document states it.
    pub const PATTERN: &'static str = "^[a-z0-9]([a-z0-9-]*[a-z0-9])?$";

    pub fn parse(s: &str) -> Result<Self, String> {
        let ok_chars = s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if !(3..=40).contains(&s.len()) {
            return Err("must be 3 to 40 characters long".into());
        }
        if !ok_chars || s.starts_with('-') || s.ends_with('-') {
            return Err("must be lowercase letters, digits and inner dashes".into());
        }
        Ok(ProjectSlug(s.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A user's e-mail address, kept lowercase. Only its shape is checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Email(String);

impl Email {
    /// The grammar of an address, checked by [`Email::parse`] and stated by the OpenAPI
    /// document (one constant for both): printable ASCII around one `@`, no spaces; 3 to 254
    /// characters. Only the shape is checked.
    pub const PATTERN: &'static str = "^[!-?A-~]+@[!-?A-~]+$";

    pub fn parse(s: &str) -> Result<Self, String> {
        let shaped = s.len() <= 254
            && s.split_once('@').is_some_and(|(local, domain)| {
                let part = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_graphic() && b != b'@');
                part(local) && part(domain)
            });
        if shaped {
            Ok(Email(s.to_ascii_lowercase()))
        } else {
            Err("must be an e-mail address".into())
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// The document's patterns name forms the parsers take.
        #[test]
        fn documented_slugs_and_emails_are_taken(
            slug in ProjectSlug::PATTERN.trim_start_matches('^').trim_end_matches('$'),
            email in Email::PATTERN.trim_start_matches('^').trim_end_matches('$'),
        ) {
            let slug_fits = (3..=40).contains(&slug.len());
            proptest::prop_assert_eq!(ProjectSlug::parse(&slug).is_ok(), slug_fits, "{}", slug);
            let email_fits = (3..=254).contains(&email.len());
            proptest::prop_assert_eq!(Email::parse(&email).is_ok(), email_fits, "{}", email);
        }
    }

    #[test]
    fn slugs() {
        assert!(ProjectSlug::parse("demo").is_ok());
        assert!(ProjectSlug::parse("my-project-2").is_ok());
        assert!(ProjectSlug::parse("ab").is_err());
        assert!(ProjectSlug::parse("-abc").is_err());
        assert!(ProjectSlug::parse("Abc").is_err());
        assert!(ProjectSlug::parse("a/bc").is_err());
    }

    #[test]
    fn emails() {
        assert_eq!(Email::parse("A@B.io").unwrap().as_str(), "a@b.io");
        assert!(Email::parse(" a@b.io").is_err(), "the document's grammar has no spaces");
        assert!(Email::parse("ü@b.io").is_err(), "nor non-ASCII");
        assert!(Email::parse("nope").is_err());
        assert!(Email::parse("a@b@c").is_err());
    }
}
