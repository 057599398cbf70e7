//! The fail-stop state: once a journal write or a write-back fails, the
//! engine acknowledges nothing more (the in-memory state may hold changes
//! that will never be durable), and every later request fails with the
//! error this state gives. A restart recovers from the journal and the
//! table snapshots (nothing acknowledged is lost: the failed write was
//! never acknowledged).
//!
//! What clients see depends on why it stopped: a full disk (`ENOSPC`, or a
//! quota, `EDQUOT`) gives [`FsError::NoSpace`], which programs and users
//! know what to do about; anything else [`FsError::Io`].
//!
//! Invariant: the state only moves from running to stopped, and the first
//! cause recorded wins (later failures are consequences of the first).

use sextant_types::FsError;
use std::sync::atomic::{AtomicU8, Ordering};

const RUNNING: u8 = 0;
const IO: u8 = 1;
const NO_SPACE: u8 = 2;

/// Running, or stopped and why.
#[derive(Debug, Default)]
pub struct StopState(AtomicU8);

impl StopState {
    /// Records that the engine stops because of `cause` (if it was still
    /// running).
    pub fn stop(&self, cause: Cause) {
        let code = match cause {
            Cause::NoSpace => NO_SPACE,
            Cause::Other => IO,
        };
        let _ = self
            .0
            .compare_exchange(RUNNING, code, Ordering::AcqRel, Ordering::Acquire);
    }

    /// `None` while running; else what requests fail with.
    pub fn error(&self) -> Option<FsError> {
        match self.0.load(Ordering::Acquire) {
            RUNNING => None,
            NO_SPACE => Some(FsError::NoSpace),
            _ => Some(FsError::Io),
        }
    }

    pub fn stopped(&self) -> bool {
        self.error().is_some()
    }
}

/// Why the engine stopped, as far as clients are concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// The disk (or the owner's quota) is full.
    NoSpace,
    Other,
}

impl Cause {
    /// The cause an I/O error stands for.
    pub fn of(e: &std::io::Error) -> Cause {
        const ENOSPC: i32 = 28;
        const EDQUOT: i32 = 122;
        match e.raw_os_error() {
            Some(ENOSPC | EDQUOT) => Cause::NoSpace,
            _ if e.kind() == std::io::ErrorKind::StorageFull => Cause::NoSpace,
            _ => Cause::Other,
        }
    }

    /// The cause of the first I/O error in `e`'s source chain, if any.
    pub fn of_chain(e: &(dyn std::error::Error + 'static)) -> Cause {
        let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
        while let Some(err) = cur {
            if let Some(io) = err.downcast_ref::<std::io::Error>() {
                return Cause::of(io);
            }
            cur = err.source();
        }
        Cause::Other
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io;

    #[test]
    fn the_first_cause_wins_and_maps_to_errno() {
        let s = StopState::default();
        assert_eq!(s.error(), None);
        s.stop(Cause::NoSpace);
        s.stop(Cause::Other);
        assert_eq!(s.error(), Some(FsError::NoSpace));
        let s = StopState::default();
        s.stop(Cause::Other);
        s.stop(Cause::NoSpace);
        assert_eq!(s.error(), Some(FsError::Io));
    }

    #[test]
    fn causes_of_io_errors() {
        assert_eq!(Cause::of(&io::Error::from_raw_os_error(28)), Cause::NoSpace);
        assert_eq!(
            Cause::of(&io::Error::from_raw_os_error(122)),
            Cause::NoSpace
        );
        assert_eq!(Cause::of(&io::Error::from_raw_os_error(5)), Cause::Other);
        assert_eq!(
            Cause::of(&io::Error::from(io::ErrorKind::StorageFull)),
            Cause::NoSpace
        );
        // Found through wrapping errors' sources.
        #[derive(Debug, thiserror::Error)]
        #[error("writing x")]
        struct Wrap(#[source] io::Error);
        let e = Wrap(io::Error::from_raw_os_error(28));
        assert_eq!(Cause::of_chain(&e), Cause::NoSpace);
        #[derive(Debug, thiserror::Error)]
        #[error("no io inside")]
        struct Plain;
        assert_eq!(Cause::of_chain(&Plain), Cause::Other);
    }
}
