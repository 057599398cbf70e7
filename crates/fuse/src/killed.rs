//! Whether the program behind a request has been killed, so that a read
//! waiting on a server that is down can be abandoned at once even when no
//! FUSE thread is free to read the kernel's interrupt.
//!
//! The mount handles FUSE_INTERRUPT (see [`crate::interrupts`]; fuser is
//! vendored with a patch for it). But an interrupt is read, like any
//! request, by a free FUSE thread: when every thread waits on the server
//! (`--threads` programs blocked at once), it stays queued in the kernel,
//! and the interrupted caller with it. This module is the fallback for a
//! killed caller: a fatal signal (SIGKILL, or any signal whose default
//! action kills, which the kernel turns into a SIGKILL of every thread)
//! shows as bit 9 of `SigPnd`/`ShdPnd` in `/proc/<tid>/status` of the
//! blocked thread (FUSE gives the caller's thread id), so a waiting
//! request sees it without the kernel's help. A handled signal leaves no
//! such trace: that caller waits for a free thread to read its interrupt.
//!
//! What a killed caller's request may give up is decided as for an
//! interrupt (`fs`): what never changes the server at once, a mutation
//! only if it was never sent; a mutation the server may already have run
//! keeps waiting for its reply, so its retry keeps its exactly-once
//! identity and the mount's bookkeeping (node ids, data objects) follows
//! what the server did.
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
