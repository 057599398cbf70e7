//! Phase timestamps of a command, printed to stderr when the environment
//! variable `SEXTANT_SEARCH_TIMING` is set: a diagnostic of where a
//! query's fixed cost goes (connecting, route maps, resolving the scope,
//! each server's part of a spread search). Times are milliseconds since
//! the first mark of the process. Off (one load) when the variable is unset.

use std::sync::OnceLock;
use std::time::Instant;

/// The first mark's instant, when timing is on.
fn origin() -> Option<Instant> {
    static ORIGIN: OnceLock<Option<Instant>> = OnceLock::new();
    *ORIGIN.get_or_init(|| std::env::var_os("SEXTANT_SEARCH_TIMING").map(|_| Instant::now()))
}

/// Whether timing is on.
pub fn on() -> bool {
    origin().is_some()
}

/// Prints `what` with the time since the first mark (when on).
pub fn mark(what: impl FnOnce() -> String) {
    if let Some(o) = origin() {
        eprintln!(
            "[timing] {:8.3} ms  {}",
            o.elapsed().as_secs_f64() * 1e3,
            what()
        );
    }
}
