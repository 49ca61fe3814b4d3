//! The state machine of a webhook delivery (CONTRACT: Webhooks — deliveries): `pending` until an
//! attempt is answered with 2xx (`success`) or the last attempt fails (`failed`); a finished
//! delivery can be queued again.

use poem_openapi::Enum;

/// Where a delivery stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Enum)]
#[oai(rename_all = "lowercase")]
pub enum DeliveryStatus {
    /// Waiting for its first or next attempt.
    Pending,
    /// An attempt was answered with 2xx.
    Success,
    /// Every attempt failed.
    Failed,
}

impl DeliveryStatus {
    pub const ALL: [DeliveryStatus; 3] =
        [DeliveryStatus::Pending, DeliveryStatus::Success, DeliveryStatus::Failed];

    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryStatus::Pending => "pending",
            DeliveryStatus::Success => "success",
            DeliveryStatus::Failed => "failed",
        }
    }

    pub fn parse(s: &str) -> Option<DeliveryStatus> {
        DeliveryStatus::ALL.into_iter().find(|d| d.as_str() == s)
    }
}

/// What happens to a delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryMove {
    /// An attempt was answered with 2xx.
    Answered,
    /// An attempt failed; `last` when no attempt is left.
    AttemptFailed { last: bool },
    /// Its webhook was disabled or deleted while it was leased: it ends without an attempt.
    Abandoned,
    /// `POST …/redeliver`: queued again with a fresh set of attempts.
    Requeued,
}

/// A move that does not apply in the delivery's status (409 at the API).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a {} delivery cannot {what}", from.as_str())]
pub struct DeliveryMoveError {
    pub from: DeliveryStatus,
    pub what: &'static str,
}

impl DeliveryStatus {
    /// The one place that says which moves are allowed.
    pub fn apply(self, m: DeliveryMove) -> Result<DeliveryStatus, DeliveryMoveError> {
        use DeliveryStatus::*;
        let refuse = |what| Err(DeliveryMoveError { from: self, what });
        match (self, m) {
            (Pending, DeliveryMove::Answered) => Ok(Success),
            (Pending, DeliveryMove::AttemptFailed { last: true }) => Ok(Failed),
            (Pending, DeliveryMove::AttemptFailed { last: false }) => Ok(Pending),
            (Pending, DeliveryMove::Abandoned) => Ok(Failed),
            (_, DeliveryMove::Answered | DeliveryMove::AttemptFailed { .. } | DeliveryMove::Abandoned) => {
                refuse("be attempted")
            }
            (Success | Failed, DeliveryMove::Requeued) => Ok(Pending),
            (Pending, DeliveryMove::Requeued) => refuse("be queued again: it is still pending"),
        }
    }

    /// The statuses `m` applies to, and where it leads (it leads to one place from each): what
    /// the store's compare-and-set writes.
    pub fn move_of(m: DeliveryMove) -> (Vec<DeliveryStatus>, Option<DeliveryStatus>) {
        let mut from = Vec::new();
        let mut to = None;
        for status in DeliveryStatus::ALL {
            if let Ok(next) = status.apply(m) {
                from.push(status);
                to = Some(next);
            }
        }
        (from, to)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attempts_apply_to_pending_deliveries_only_and_requeue_to_finished_ones() {
        let (from, to) = DeliveryStatus::move_of(DeliveryMove::Answered);
        assert_eq!((from, to), (vec![DeliveryStatus::Pending], Some(DeliveryStatus::Success)));
        let (from, to) = DeliveryStatus::move_of(DeliveryMove::AttemptFailed { last: false });
        assert_eq!((from, to), (vec![DeliveryStatus::Pending], Some(DeliveryStatus::Pending)));
        let (from, to) = DeliveryStatus::move_of(DeliveryMove::Requeued);
        assert_eq!(
            (from, to),
            (vec![DeliveryStatus::Success, DeliveryStatus::Failed], Some(DeliveryStatus::Pending))
        );
        assert!(DeliveryStatus::Pending.apply(DeliveryMove::Requeued).is_err());
        assert_eq!(DeliveryStatus::Pending.apply(DeliveryMove::Abandoned), Ok(DeliveryStatus::Failed));
        for s in DeliveryStatus::ALL {
            assert_eq!(DeliveryStatus::parse(s.as_str()), Some(s));
        }
    }
}
