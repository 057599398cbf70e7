//! Whether the program behind a request has been killed, so that a read
//! waiting on a server that is down can be abandoned at once.
//!
//! Why not FUSE_INTERRUPT: fuser 0.18 answers every FUSE_INTERRUPT with
//! ENOSYS itself (`request.rs`, "TODO: handle FUSE_INTERRUPT"), never
//! telling the file system; on that answer the kernel stops sending
//! interrupts for good (`fc->no_interrupt`) and, for a request already
//! read by the daemon, waits for the reply uninterruptibly — even a
//! SIGKILLed program stays until the mount answers (up to the client's
//! 30 s retry while the server is down). Handling interrupts would need a
//! patched fuser (a vendored copy). Instead the mount looks at the caller
//! itself: a fatal signal (SIGKILL, or any signal whose default action
//! kills, which the kernel turns into a SIGKILL of every thread) shows as
//! bit 9 of `SigPnd`/`ShdPnd` in `/proc/<tid>/status` of the blocked
//! thread (FUSE gives the caller's thread id). A non-fatal signal (a
//! handled SIGINT) does not interrupt: the kernel, told "no interrupts",
//! does not wake the caller for it either.
//!
//! Only what never changes the server is abandoned (lookups, getattr,
//! reads, listings, xattr reads, access): a mutation the server may
//! already have run keeps waiting for its reply, so its retry keeps its
//! exactly-once identity and the mount's bookkeeping (node ids, data
//! objects) follows what the server did.
//!
//! Cost: one timer per abandonable request, and a read of the caller's
//! status file every [`POLL`] while it waits (after the first [`POLL`]).

use std::time::Duration;

/// How often a waiting request looks at its caller.
pub const POLL: Duration = Duration::from_millis(200);

/// SIGKILL's bit in a `/proc` signal mask (bit n-1 for signal n).
const SIGKILL_BIT: u64 = 1 << (libc::SIGKILL - 1);

/// Does this `/proc/<tid>/status` text show a SIGKILL pending (for the
/// thread or its process)?
pub fn sigkill_pending(status: &str) -> bool {
    status.lines().any(|l| {
        let mask = l
            .strip_prefix("SigPnd:")
            .or_else(|| l.strip_prefix("ShdPnd:"));
        mask.and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
            .is_some_and(|m| m & SIGKILL_BIT != 0)
    })
}

/// Has thread `tid` a fatal signal pending? Unknown (no pid, status
/// unreadable) counts as no.
pub fn is_killed(tid: u32) -> bool {
    tid != 0
        && std::fs::read_to_string(format!("/proc/{tid}/status")).is_ok_and(|s| sigkill_pending(&s))
}

/// Resolves once thread `tid` has a fatal signal pending (never for no
/// pid).
pub async fn killed(tid: u32) {
    if tid == 0 {
        return std::future::pending().await;
    }
    loop {
        tokio::time::sleep(POLL).await;
        if is_killed(tid) {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_pending_sigkill_counts() {
        let status = |sigpnd: &str, shdpnd: &str| {
            format!(
                "Name:\tstat\nState:\tD (disk sleep)\nSigQ:\t1/1000\n\
                 SigPnd:\t{sigpnd}\nShdPnd:\t{shdpnd}\nSigBlk:\t0000000000000100\n\
                 SigIgn:\t0000000000000000\n"
            )
        };
        let none = "0000000000000000";
        let kill = "0000000000000100";
        let term = "0000000000004000";
        assert!(!sigkill_pending(&status(none, none)));
        assert!(sigkill_pending(&status(kill, none)), "the thread's");
        assert!(sigkill_pending(&status(none, kill)), "the process's");
        assert!(!sigkill_pending(&status(term, term)), "not fatal as such");
        assert!(!sigkill_pending("SigPnd:\tzz\n"), "garbage");
        assert!(!sigkill_pending(""));
        // SigBlk with bit 9 is not a pending signal.
        assert!(!sigkill_pending("SigBlk:\t0000000000000100\n"));
    }

    #[test]
    fn a_live_thread_is_not_killed() {
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() } as u32;
        assert!(!is_killed(tid));
        assert!(!is_killed(0));
    }
}
