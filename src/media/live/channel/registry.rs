//! The channels of this process. The map lock is held only to look up, insert or take out a
//! channel; a channel that left the map is retired (its DVR writer told to finish and remove
//! the folder) after the lock is released.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use super::{Channel, ChannelConfig, ENDED_KEEP};

/// The channels of this process, by stream id. A channel outlives its push so viewers get the
/// ended playlists (and DVR) until the next push replaces it.
#[derive(Default)]
pub struct Channels {
    map: Mutex<HashMap<String, Arc<Channel>>>,
}

impl Channels {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Arc<Channel>>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn get(&self, stream_id: &str) -> Option<Arc<Channel>> {
        self.lock().get(stream_id).cloned()
    }

    /// The channel a new push feeds, and its generation: the same channel after a discontinuity
    /// when its playlists have not ended (the live session goes on) and its settings are the
    /// same, else a new one.
    /// The caller holds the stream's push session (one at a time): a channel still draining
    /// the previous push is continued too, and that push's late output is ignored.
    pub fn start_push(&self, stream_id: &str, config: ChannelConfig) -> (Arc<Channel>, u32) {
        let mut map = self.lock();
        if let Some(c) = map.get(stream_id) {
            let compatible = c.config.part == config.part
                && c.config.segment == config.segment
                && c.config.dvr.as_ref().map(|d| d.0) == config.dvr.as_ref().map(|d| d.0)
                && c.config.key == config.key;
            let s = c.lock();
            let continues = compatible && !s.ended;
            drop(s);
            if continues {
                let generation = c.reconnect();
                return (c.clone(), generation);
            }
        }
        let channel = Channel::new(config);
        let replaced = map.insert(stream_id.to_string(), channel.clone());
        drop(map);
        if let Some(old) = replaced {
            old.retire();
        }
        (channel, 0)
    }

    /// The stream id and live session of every channel a push feeds.
    pub fn live_sessions(&self) -> Vec<(String, String)> {
        self.lock()
            .iter()
            .filter(|(_, c)| c.is_live())
            .map(|(id, c)| (id.clone(), c.session.clone()))
            .collect()
    }

    /// Whether a push still feeds any channel.
    pub fn any_live(&self) -> bool {
        self.lock().values().any(|c| c.is_live())
    }

    /// Ends every channel no push feeds, without waiting for the reconnect grace (shutdown).
    pub fn finish_all(&self) {
        for c in self.lock().values() {
            c.finish(c.generation());
        }
    }

    /// Forgets the channels whose playlists ended longer ago than they keep: [`ENDED_KEEP`], or
    /// the DVR window when that is longer. Returns how many.
    pub fn sweep(&self) -> usize {
        let gone: Vec<Arc<Channel>> = {
            let mut map = self.lock();
            let expired: Vec<String> = map
                .iter()
                .filter(|(_, c)| {
                    let keep = c
                        .config
                        .dvr
                        .as_ref()
                        .map_or(ENDED_KEEP, |(s, _)| ENDED_KEEP.max(Duration::from_secs_f64(*s)));
                    c.lock().ended_at.is_some_and(|at| at.elapsed() >= keep)
                })
                .map(|(id, _)| id.clone())
                .collect();
            expired.iter().filter_map(|id| map.remove(id)).collect()
        };
        for c in &gone {
            c.retire();
        }
        gone.len()
    }

    /// Forgets a stream's channel (the stream was deleted).
    pub fn remove(&self, stream_id: &str) {
        let gone = self.lock().remove(stream_id);
        if let Some(c) = gone {
            c.retire();
        }
    }
}
