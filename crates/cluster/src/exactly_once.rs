//! Exactly-once: whether a retried mutation is answered with the reply
//! remembered for it, or runs.
//!
//! A server remembers the replies of the mutations it ran, each with the
//! membership generation (the server's lease) it ran under; a table also
//! carries the replies of the mutations in its contents, from owner to
//! owner (moves, BORROW, failover replay). The rule, in one place:
//!
//! - a reply the table carries is answered: its mutation is in the
//!   table's contents, whoever ran it;
//! - a reply made here under the *current* generation is answered: every
//!   table held under it was either kept or handed over with its contents
//!   (a handover's snapshot includes the mutation);
//! - a reply made under an *older* generation is not: the server lost its
//!   lease, and with it every table; the mutation (refused by R1, never
//!   acknowledged) may be in no table's contents — the next owner loaded
//!   the table before its record was written. It runs again;
//! - nothing remembered: it runs.
//!
//! Invariant: [`decide`] answers only when the mutation is in the
//! table's contents (the simulation checks it on every seed, and that
//! nothing runs twice).

/// What is remembered for a request's (client, seq).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Remembered {
    /// Run on this server under that membership generation.
    MadeUnder(u64),
    /// Carried with the table (seeded from its contents or journal).
    Carried,
}

/// What to do with a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Answer it with the remembered reply; do not run it.
    Answer,
    /// Run it (first time here, or its remembered reply is not trusted).
    Run,
}

/// The rule of the module docs.
pub fn decide(remembered: Option<Remembered>, current_generation: u64) -> Decision {
    match remembered {
        Some(Remembered::Carried) => Decision::Answer,
        Some(Remembered::MadeUnder(g)) if g >= current_generation => Decision::Answer,
        Some(Remembered::MadeUnder(_)) | None => Decision::Run,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_remembered_runs() {
        assert_eq!(decide(None, 0), Decision::Run);
        assert_eq!(decide(None, 7), Decision::Run);
    }

    #[test]
    fn a_reply_made_under_the_current_generation_is_answered() {
        assert_eq!(decide(Some(Remembered::MadeUnder(3)), 3), Decision::Answer);
    }

    #[test]
    fn a_reply_made_under_a_lost_lease_runs_again() {
        assert_eq!(decide(Some(Remembered::MadeUnder(2)), 3), Decision::Run);
        assert_eq!(decide(Some(Remembered::MadeUnder(0)), 1), Decision::Run);
    }

    #[test]
    fn a_carried_reply_is_answered_under_any_generation() {
        for g in [0, 1, 99] {
            assert_eq!(decide(Some(Remembered::Carried), g), Decision::Answer);
        }
    }
}
