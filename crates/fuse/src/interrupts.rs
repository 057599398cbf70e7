//! The requests in flight that the kernel may interrupt, by their FUSE
//! unique id, and the interrupts (FUSE_INTERRUPT) it sends for them.
//!
//! When the caller of a request the mount has read gets a signal — a
//! handled one (a SIGINT handler, `alarm()`) as well as a fatal one — the
//! kernel sends FUSE_INTERRUPT with that request's unique id (fuser as
//! vendored delivers it: `vendor/fuser/PATCHED.md`). Interrupts are read
//! before any other request, by whichever FUSE thread is free, while the
//! thread that read the request waits on the server. The waiting thread
//! registers its request with [`Interrupts::begin`] and races its server
//! call against [`InFlight::interrupted`]; what it may then abandon is the
//! file system's decision (`fs`: reads at once, mutations only if they
//! were never sent).
//!
//! Invariants:
//! - A request is registered from [`Interrupts::begin`] until its
//!   [`InFlight`] is dropped, after its reply was sent.
//! - An interrupt for a unique id not registered is kept for [`EARLY_KEEP`]
//!   (at most [`EARLY_MAX`] of them): the kernel queues an interrupt as
//!   soon as a thread has read the request, so another thread may see the
//!   interrupt a moment before the request is registered; a `begin` of that
//!   id then starts interrupted. The others (the request was answered
//!   already, or is one that never registers) are forgotten. (libfuse does
//!   the same. Answering EAGAIN instead would make the kernel send the
//!   interrupt again at once, over and over, until the request registers —
//!   or for as long as a request that never registers runs.)
//! - The kernel never reuses a unique id while its request is in flight.
//!
//! Cost: per request, an `Arc` and one insertion and one removal in a map
//! under a mutex (held for nothing else).

use parking_lot::Mutex;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long an interrupt for a request not (yet) registered is kept.
pub const EARLY_KEEP: Duration = Duration::from_secs(2);

/// At most this many such interrupts are kept (the oldest go first).
pub const EARLY_MAX: usize = 256;

/// The requests in flight of one mount.
#[derive(Default)]
pub struct Interrupts {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    flight: HashMap<u64, Arc<Flag>>,
    /// Interrupts of ids not registered when they came, oldest first.
    early: VecDeque<(u64, Instant)>,
}

#[derive(Default)]
struct Flag {
    set: AtomicBool,
    wake: tokio::sync::Notify,
}

impl Flag {
    fn raise(&self) {
        self.set.store(true, Ordering::Release);
        // A permit is kept if nobody waits yet.
        self.wake.notify_one();
    }
}

/// A registered request; unregistered when dropped.
pub struct InFlight<'a> {
    owner: &'a Interrupts,
    unique: u64,
    flag: Arc<Flag>,
}

impl InFlight<'_> {
    /// Has the kernel interrupted this request?
    pub fn is_interrupted(&self) -> bool {
        self.flag.set.load(Ordering::Acquire)
    }

    /// Resolves once the kernel has interrupted this request.
    pub async fn interrupted(&self) {
        while !self.is_interrupted() {
            self.flag.wake.notified().await;
        }
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        let mut g = self.owner.inner.lock();
        if g.flight
            .get(&self.unique)
            .is_some_and(|f| Arc::ptr_eq(f, &self.flag))
        {
            g.flight.remove(&self.unique);
        }
    }
}

impl Interrupts {
    /// Registers request `unique` (interrupted already if its interrupt
    /// came first).
    pub fn begin(&self, unique: u64) -> InFlight<'_> {
        let flag = Arc::new(Flag::default());
        let mut g = self.inner.lock();
        if !g.early.is_empty() {
            let now = Instant::now();
            forget_old(&mut g.early, now);
            if let Some(i) = g.early.iter().position(|(u, _)| *u == unique) {
                g.early.remove(i);
                flag.raise();
            }
        }
        g.flight.insert(unique, Arc::clone(&flag));
        InFlight {
            owner: self,
            unique,
            flag,
        }
    }

    /// The kernel interrupted request `unique`: wakes it if registered,
    /// else keeps the interrupt for a moment (see the module doc).
    pub fn interrupt(&self, unique: u64) {
        let mut g = self.inner.lock();
        if let Some(f) = g.flight.get(&unique) {
            f.raise();
            return;
        }
        let now = Instant::now();
        forget_old(&mut g.early, now);
        if g.early.len() >= EARLY_MAX {
            g.early.pop_front();
        }
        g.early.push_back((unique, now));
    }

    /// Requests registered now (for tests).
    pub fn in_flight(&self) -> usize {
        self.inner.lock().flight.len()
    }

    /// Interrupts kept for requests not registered (for tests).
    pub fn kept(&self) -> usize {
        self.inner.lock().early.len()
    }
}

fn forget_old(early: &mut VecDeque<(u64, Instant)>, now: Instant) {
    while early
        .front()
        .is_some_and(|(_, at)| now.duration_since(*at) >= EARLY_KEEP)
    {
        early.pop_front();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(f)
    }

    #[test]
    fn an_interrupt_wakes_its_request_only() {
        let ints = Interrupts::default();
        let a = ints.begin(10);
        let b = ints.begin(12);
        assert_eq!(ints.in_flight(), 2);
        assert!(!a.is_interrupted());
        ints.interrupt(10);
        assert!(a.is_interrupted());
        assert!(!b.is_interrupted());
        block_on(a.interrupted());
        let waited = block_on(async {
            tokio::time::timeout(Duration::from_millis(50), b.interrupted()).await
        });
        assert!(waited.is_err(), "12 was not interrupted");
        drop(a);
        drop(b);
        assert_eq!(ints.in_flight(), 0, "unregistered when dropped");
        assert_eq!(ints.kept(), 0);
    }

    #[test]
    fn a_waiting_request_is_woken_from_another_thread() {
        let ints = Arc::new(Interrupts::default());
        let other = Arc::clone(&ints);
        let t = std::thread::spawn(move || {
            while other.in_flight() == 0 {
                std::thread::sleep(Duration::from_millis(1));
            }
            std::thread::sleep(Duration::from_millis(20));
            other.interrupt(7);
        });
        let r = ints.begin(7);
        let woke =
            block_on(async { tokio::time::timeout(Duration::from_secs(5), r.interrupted()).await });
        assert!(woke.is_ok());
        t.join().unwrap();
    }

    #[test]
    fn an_interrupt_before_its_request_is_kept_for_it() {
        let ints = Interrupts::default();
        ints.interrupt(20);
        assert_eq!(ints.kept(), 1);
        let r = ints.begin(20);
        assert!(r.is_interrupted(), "the early interrupt counts");
        assert_eq!(ints.kept(), 0, "and is used up");
        drop(r);
        // The next request with another id is not interrupted by it.
        assert!(!ints.begin(22).is_interrupted());
    }

    #[test]
    fn interrupts_of_answered_requests_are_forgotten() {
        let ints = Interrupts::default();
        {
            let _answered = ints.begin(30);
        }
        for u in 0..(EARLY_MAX as u64 + 10) {
            ints.interrupt(1000 + u);
        }
        assert_eq!(ints.kept(), EARLY_MAX, "bounded");
        assert!(!ints.begin(1000).is_interrupted(), "the oldest went first");
        assert!(ints.begin(1000 + EARLY_MAX as u64 + 9).is_interrupted());
        // And by age.
        let ints = Interrupts::default();
        ints.interrupt(40);
        {
            let mut g = ints.inner.lock();
            g.early[0].1 = g.early[0].1.checked_sub(EARLY_KEEP).unwrap();
        }
        assert!(!ints.begin(40).is_interrupted(), "too old");
        assert_eq!(ints.kept(), 0);
    }
}
