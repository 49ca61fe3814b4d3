//! Services: the lifecycles that the protocol edges (media, playback) and the API drive. Each is
//! built once by [`crate::app`] and handed to what uses it.
//!
//! - [`streams`]: every status change of a stream ([`streams::Streams::apply`]) and the push
//!   sessions of this process;
//! - [`credits`]: the meter that draws live time from each project's credits (billing on);
//! - [`kills`]: on Postgres, the ends of pushes that a disable in another process asks for;
//! - [`vods`]: every status change of a VOD ([`vods::Vods::apply`]) and its job queue;
//! - [`policy`]: the playback policy and content keys of each stream and VOD, cached;
//! - [`endpoints`]: the URLs this process is reached at;
//! - [`viewers`]: who is watching: HLS playback sessions, RTSP clients, VOD views;
//! - [`nodes`]: the node registry of several processes on one database, and who holds a push.

pub mod credits;
pub mod endpoints;
pub mod kills;
pub mod nodes;
pub mod policy;
pub mod streams;
pub mod viewers;
pub mod vods;
