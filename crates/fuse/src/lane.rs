//! Per-thread client lanes: each FUSE thread answers its requests on its
//! own server connection, driven by a calling-thread tokio runtime.
//!
//! Without lanes, a FUSE thread `block_on`s every client call on a shared
//! multi-thread runtime: the request goes to a worker thread (HTTP/2 send),
//! the reply comes back on another (session reader) and wakes the FUSE
//! thread — several thread hops per request, each a wake-up (an IPI on a
//! VM). With a lane, the FUSE thread itself runs the HTTP/2 connection and
//! the session reader while it waits, so a request is answered without
//! leaving the thread that read it from the kernel.
//!
//! Invariants:
//! - A lane belongs to one thread (it lives in a thread-local) and to one
//!   [`Lanes`] (one mount): a lane of another mount is replaced, not used.
//! - [`Lanes::client`] returns the calling thread's lane client only while
//!   that thread is inside [`Lanes::block_on`]; anywhere else it returns the
//!   shared client, whose runtime is always driven.
//! - A lane idle for longer than [`IDLE_MAX`] is replaced before use: while
//!   idle nobody drives its connection, so the server's keep-alive pings go
//!   unanswered and the server eventually drops it (see
//!   `Client::sibling`). Replacing it first avoids a failed send and a
//!   retry back-off on the next request.
//! - When a lane cannot be made (server unreachable), the thread uses the
//!   shared client and runtime, and tries again after [`RETRY_AFTER`].
//! - Making a lane (a connection: up to the client's connect timeout when
//!   the server takes connections but does not answer, e.g. stopped) is
//!   given up when the caller's `stop` resolves ([`Lanes::block_on_unless`]:
//!   the request was interrupted); the request then runs on the shared
//!   runtime, and the next one tries to make the lane again.
//!
//! Cost: each lane is a client of its own for the server's exactly-once
//! table (4,096 clients remembered by default, the least recently active
//! forgotten first): a mount uses up to one per FUSE thread at a time, and
//! a new one each time an idle lane is replaced.

use sextant_client::Client;
use std::cell::{Cell, RefCell};
use std::future::Future;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Longest idle spell after which a lane is replaced before use (below the
/// server's 30 s keep-alive interval).
pub const IDLE_MAX: Duration = Duration::from_secs(20);

/// How long a thread whose lane could not be made uses the shared client
/// before trying again.
pub const RETRY_AFTER: Duration = Duration::from_secs(1);

static NEXT_OWNER: AtomicU64 = AtomicU64::new(1);

struct Lane {
    owner: u64,
    rt: tokio::runtime::Runtime,
    client: Client,
    last_used: Cell<Instant>,
}

enum Slot {
    Empty,
    Ready(Rc<Lane>),
    /// Making a lane failed at this instant (for this owner).
    Failed(u64, Instant),
}

thread_local! {
    static SLOT: RefCell<Slot> = const { RefCell::new(Slot::Empty) };
    /// Set while this thread is inside `block_on` on its lane.
    static ACTIVE: RefCell<Option<Client>> = const { RefCell::new(None) };
}

/// The lanes of one mount, and the shared client they are made from.
pub struct Lanes {
    owner: u64,
    shared: Client,
    rt: tokio::runtime::Handle,
    /// The server's frame door, if the mount may use it (see
    /// `MountConfig::frame_door`).
    frame_door: Option<std::path::PathBuf>,
}

impl Lanes {
    /// `shared` runs on `rt` (a multi-thread runtime); lanes are made from
    /// it with `Client::sibling_with_frame_door`: a lane's requests to the
    /// server go through `frame_door` when it answers (each on the lane's
    /// thread, which blocks for the round trip — it would wait for the
    /// reply anyway), else through a Session stream of its own.
    pub fn new(
        shared: Client,
        rt: tokio::runtime::Handle,
        frame_door: Option<std::path::PathBuf>,
    ) -> Lanes {
        Lanes {
            owner: NEXT_OWNER.fetch_add(1, Ordering::Relaxed),
            shared,
            rt,
            frame_door,
        }
    }

    /// The client to call from inside [`Lanes::block_on`]: the calling
    /// thread's lane when it runs one, else the shared client.
    pub fn client(&self) -> Client {
        ACTIVE
            .with(|a| a.borrow().clone())
            .unwrap_or_else(|| self.shared.clone())
    }

    /// Runs `fut` to completion on the calling thread's lane (made or
    /// replaced first if needed), or on the shared runtime without one.
    ///
    /// REQUIRES: not called from inside a tokio runtime.
    pub fn block_on<F: Future>(&self, fut: F) -> F::Output {
        self.block_on_unless(fut, std::future::pending)
    }

    /// [`Lanes::block_on`], but a lane being made for it is given up when
    /// `stop()` resolves (`fut` then runs on the shared runtime).
    ///
    /// REQUIRES: not called from inside a tokio runtime.
    pub fn block_on_unless<F: Future, S: Future<Output = ()>>(
        &self,
        fut: F,
        stop: impl Fn() -> S,
    ) -> F::Output {
        match self.lane(stop) {
            Some(lane) => {
                let previous = ACTIVE.with(|a| a.replace(Some(lane.client.clone())));
                let out = lane.rt.block_on(fut);
                ACTIVE.with(|a| *a.borrow_mut() = previous);
                lane.last_used.set(Instant::now());
                out
            }
            None => self.rt.block_on(fut),
        }
    }

    /// This thread's lane for this mount, made or replaced if needed
    /// (unless `stop()` resolves first).
    fn lane<S: Future<Output = ()>>(&self, stop: impl Fn() -> S) -> Option<Rc<Lane>> {
        let now = Instant::now();
        let usable = SLOT.with(|s| match &*s.borrow() {
            Slot::Ready(l)
                if l.owner == self.owner && now.duration_since(l.last_used.get()) < IDLE_MAX =>
            {
                Some(Some(Rc::clone(l)))
            }
            Slot::Failed(owner, at)
                if *owner == self.owner && now.duration_since(*at) < RETRY_AFTER =>
            {
                Some(None)
            }
            _ => None,
        });
        if let Some(l) = usable {
            return l;
        }
        // Drop the old lane (its runtime and connection) before making one.
        SLOT.with(|s| *s.borrow_mut() = Slot::Empty);
        let made = self.make(stop)?;
        SLOT.with(|s| {
            *s.borrow_mut() = match &made {
                Some(l) => Slot::Ready(Rc::clone(l)),
                None => Slot::Failed(self.owner, Instant::now()),
            }
        });
        made
    }

    /// A new lane; `Some(None)` if it could not be made, `None` if
    /// `stop()` resolved first (nothing is known of the server then).
    fn make<S: Future<Output = ()>>(&self, stop: impl Fn() -> S) -> Option<Option<Rc<Lane>>> {
        let Ok(rt) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        else {
            return Some(None);
        };
        let connected = rt.block_on(async {
            tokio::select! {
                biased;
                c = self.shared.sibling_with_frame_door(self.frame_door.clone()) => Some(c),
                _ = stop() => None,
            }
        })?;
        let Ok(client) = connected else {
            return Some(None);
        };
        Some(Some(Rc::new(Lane {
            owner: self.owner,
            rt,
            client,
            last_used: Cell::new(Instant::now()),
        })))
    }
}
