//! The engine's error type ([`EngineError`]): why an engine cannot open
//! (I/O, corrupt files, a store in use, an unrecovered log-less run), why
//! it stopped, or why a member-mode table operation was refused.
//! Namespace operations fail with `FsError` instead. A module of its own
//! so that the modules that open state for the engine (`durability`) name
//! it without naming the engine; re-exported as `crate::engine::EngineError`
//! and `crate::EngineError`.

use crate::journal::JournalError;
use crate::member::CatalogError;
use crate::soid::LayoutError;

/// Fatal conditions: the engine cannot open, or must stop.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("I/O error on {file}: {source}")]
    Io {
        file: String,
        #[source]
        source: std::io::Error,
    },
    #[error("corrupt data in {file}: {what}")]
    Corrupt { file: String, what: String },
    #[error(transparent)]
    Journal(#[from] JournalError),
    #[error("bad SOID layout: {0}")]
    Layout(#[from] LayoutError),
    #[error("the engine stopped after a fatal error (see the log); restart to recover")]
    Stopped,
    /// The journal could not be written or synced (`cause`: `NoSpace` for
    /// a full disk or quota, else `Io`): the engine stopped, and nothing
    /// after its last synced record was acknowledged. Restart the server
    /// (after freeing space) to recover; what clients hold is collected
    /// then.
    #[error(
        "the journal could not be synced ({cause}): the engine stopped, nothing after it \
         was acknowledged; restart the server (after freeing space, if the disk is full)"
    )]
    JournalStopped { cause: sextant_types::FsError },
    #[error(
        "{dir} is in use by another Sextant process (its LOCK file is held): stop that \
         process, or use another data directory"
    )]
    InUse { dir: String },
    #[error(
        "the last run used log-less durability and did not shut down cleanly: its \
         acknowledged operations are held by its clients; start with log-less \
         durability to recover them"
    )]
    LoglessNotRecovered,
    /// Member mode: the table catalogue refused or failed.
    #[error("table catalogue: {0}")]
    Catalog(#[from] CatalogError),
    /// Member mode: a table manifest or table operation that cannot be
    /// carried out (named in the message); nothing was changed.
    #[error("member mode: {0}")]
    Member(String),
    /// Member mode: the completion of dead member `member`'s journal was
    /// not claimed, because `member` is a member again (it joined after
    /// the view that found it dead); nothing was changed, and nothing is
    /// wrong — it serves its own journal again.
    #[error(
        "member {member} joined again (after the view that found it dead): its journal \
         is not completed"
    )]
    CompletionRefused { member: String },
    /// Member mode: the completion of dead member `member`'s run `run`
    /// was not written, because its state file no longer names that run
    /// as the one to complete: it restarted since the claimer read it
    /// (and completed `run` itself, or began a new one). Nothing was
    /// written; the next round asks again about the run it names now.
    #[error(
        "member {member}'s run {run:x} is no longer the one to complete (it restarted          since it was found dead): nothing written"
    )]
    RunMovedOn { member: String, run: u64 },
    /// Member mode: the completion of dead member `member`'s journal was
    /// not written, because this server's claim on it is gone (its own
    /// lease ran out — it was paused — and took the claim with it).
    /// Nothing was written; the next round may claim again.
    #[error("the claim on completing member {member}'s journal is gone: nothing written")]
    ClaimLost { member: String },
}
