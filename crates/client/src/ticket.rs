//! Identity tickets on the client: what lets a local user on a server's
//! Unix socket (no secret, no key) reach every server of a cluster
//! directly, instead of through its own server's forwarding.
//!
//! The client asks its socket's server for a ticket (the `Ticket` RPC:
//! a name, `t1.` + the body the server vouches for, and its key) when the
//! route map names more than one server ([`crate::Client`]'s
//! `learn_cluster`), then proves it on every call to another server as a
//! keyed client proves its key (`Inner::authorize`). Calls to the socket
//! itself carry nothing: the kernel says who we are there.
//!
//! Invariants:
//! - a ticket is used only before its expiry (less a margin for clocks);
//!   it is renewed from half its life on ([`Tickets::renew_due`], the
//!   client's `keep_ticket` task);
//! - a ticket a server refused, or none at all (an older server, a user
//!   in too many groups), leaves the client as it was without tickets:
//!   every request goes to the socket, whose server forwards it; a
//!   refused ticket is not used again for [`OFF_AFTER_REFUSAL`], and a
//!   new one is fetched once that is over (a refusal wakes the renewing
//!   task, [`Tickets::changed`]: it does not wait for the dropped
//!   ticket's half life).

use parking_lot::Mutex;
use sextant_proto::keyauth::ClientKey;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a refused ticket keeps the client on its socket before it
/// tries a new one.
pub const OFF_AFTER_REFUSAL: Duration = Duration::from_secs(60);
/// A ticket is not used within this many seconds of its expiry (the
/// servers' clocks may be ahead of ours).
const EXPIRY_MARGIN_SECS: i64 = 10;

/// A ticket held: its key (named by the ticket) and its life.
#[derive(Clone)]
struct Held {
    key: Arc<ClientKey>,
    issued: i64,
    expires: i64,
}

#[derive(Default)]
struct State {
    held: Option<Held>,
    /// Set by a refusal: no ticket is used (or fetched) before this.
    off_until: Option<Instant>,
    /// Whether this client uses tickets at all (a socket user on a
    /// cluster whose server issued one).
    wanted: bool,
}

/// The ticket of a client and its siblings (shared: one ticket, renewed
/// once, for all of a mount's lanes).
#[derive(Default)]
pub(crate) struct Tickets {
    state: Mutex<State>,
    /// Told when [`Tickets::renew_due`] may have come nearer (a refusal):
    /// the renewing task sleeps until then or this.
    changed: Arc<tokio::sync::Notify>,
}

fn now_secs() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

impl Tickets {
    /// The key to prove on a call to another server now (`None`: go
    /// through the socket).
    pub(crate) fn key(&self) -> Option<Arc<ClientKey>> {
        let s = self.state.lock();
        if s.off_until.is_some_and(|t| Instant::now() < t) {
            return None;
        }
        let h = s.held.as_ref()?;
        (now_secs() + EXPIRY_MARGIN_SECS < h.expires).then(|| Arc::clone(&h.key))
    }

    /// Whether requests for other servers go to them directly now.
    pub(crate) fn usable(&self) -> bool {
        self.key().is_some()
    }

    /// Whether this client uses tickets (then it keeps renewing them).
    pub(crate) fn wanted(&self) -> bool {
        self.state.lock().wanted
    }

    /// Keeps the ticket `name` with `key_hex`, good until `expires` (Unix
    /// seconds); `false` if the reply is malformed (then nothing changes).
    pub(crate) fn hold(&self, name: &str, key_hex: &str, expires: u64) -> bool {
        let Some(key) =
            sextant_proto::keyauth::unhex::<{ sextant_proto::keyauth::KEY_BYTES }>(key_hex.trim())
        else {
            return false;
        };
        if !sextant_types::ticket::is_ticket_name(name) || name.len() > 4096 {
            return false;
        }
        let mut s = self.state.lock();
        s.wanted = true;
        s.held = Some(Held {
            key: Arc::new(ClientKey {
                name: name.to_string(),
                key,
            }),
            issued: now_secs(),
            expires: i64::try_from(expires).unwrap_or(i64::MAX),
        });
        true
    }

    /// A server refused the ticket: drop it, and use none for
    /// [`OFF_AFTER_REFUSAL`] (requests go through the socket).
    pub(crate) fn refused(&self) {
        let mut s = self.state.lock();
        if s.held.take().is_some() {
            tracing::warn!(
                "a server refused this client's identity ticket: requests go through the \
                 local server for a while"
            );
        }
        s.off_until = Some(Instant::now() + OFF_AFTER_REFUSAL);
        drop(s);
        self.changed.notify_one();
    }

    /// What the renewing task waits on besides its sleep (see
    /// [`Tickets::refused`]).
    pub(crate) fn changed(&self) -> Arc<tokio::sync::Notify> {
        Arc::clone(&self.changed)
    }

    /// How long until a new ticket should be fetched: at half the held
    /// one's life; now if none is held (and none is refused).
    pub(crate) fn renew_due(&self) -> Duration {
        let s = self.state.lock();
        if let Some(until) = s.off_until {
            let left = until.saturating_duration_since(Instant::now());
            if !left.is_zero() {
                return left;
            }
        }
        let Some(h) = &s.held else {
            return Duration::ZERO;
        };
        let half = h.issued + (h.expires - h.issued) / 2;
        Duration::from_secs(u64::try_from(half - now_secs()).unwrap_or(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ticket_is_used_until_near_its_expiry_and_not_after_a_refusal() {
        let t = Tickets::default();
        assert!(!t.usable() && !t.wanted());
        assert_eq!(t.renew_due(), Duration::ZERO);
        let key = "ab".repeat(32);
        assert!(!t.hold("node1", &key, u64::MAX), "not a ticket's name");
        assert!(!t.hold("t1.AAAA", "00", u64::MAX), "not a key");
        let now = now_secs() as u64;
        assert!(t.hold("t1.AAAA", &key, now + 300));
        assert!(t.usable() && t.wanted());
        let due = t.renew_due();
        assert!(due > Duration::from_secs(140) && due <= Duration::from_secs(150));
        assert!(t.hold("t1.AAAA", &key, now + 5));
        assert!(!t.usable(), "within the margin of its expiry");
        assert!(t.hold("t1.AAAA", &key, now + 300));
        t.refused();
        assert!(!t.usable(), "refused");
        assert!(t.wanted(), "still a ticket user: it tries again later");
        assert!(t.renew_due() > Duration::from_secs(50));
    }
}
