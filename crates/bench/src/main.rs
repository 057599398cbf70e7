//! `sextant-engine-bench`: benchmarks of Sextant's metadata engine.
//!
//! Every subcommand repeats its measurement (`--reps`), reports medians,
//! and measures its comparison (journal off, 1 vs N in flight, 1 vs N
//! threads) in the same run. See docs/BENCHMARKS.md for results.

mod import;
mod measure;
mod report;
mod suite;
mod workload;

use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(name = "sextant-engine-bench", version, about)]
struct Cli {
    /// Print the report as JSON.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Durable creates with K in flight (and T threads), vs journal off.
    Create(suite::create::CreateArgs),
    /// getattr and lookup on cached tables, 1 vs N threads.
    Stat(suite::reads::StatArgs),
    /// readdir of directories of N entries.
    Readdir(suite::reads::ReaddirArgs),
    /// rename within and across directories, 1 vs K in flight.
    Rename(suite::mutate::MutateArgs),
    /// unlink, 1 vs K in flight.
    Unlink(suite::mutate::MutateArgs),
    /// Build a namespace of N inodes (synthetic or real-shaped), measure
    /// build rate and memory; keeps the store for `memory` and `restart`.
    Build(suite::namespace::BuildArgs),
    /// Resident memory per inode with every table of a store loaded.
    Memory(suite::namespace::DirArgs),
    /// open_dir + first resolve of a deep path on a cleanly closed store.
    Restart(suite::namespace::DirArgs),
    /// Search latency (Magellan's query sets, name globs and substrings,
    /// aggregations) from the indexes vs a brute-force scan, on a store
    /// made by `build`.
    Search(suite::search::SearchArgs),
    /// Recovery time of a journal of N records after a crash.
    Recovery(suite::recovery::RecoveryArgs),
    /// (internal) Build the journal for `recovery` and exit without close.
    #[command(hide = true)]
    RecoveryPrepare(suite::recovery::RecoveryArgs),
    /// Log-less recovery of N backed-up operations after a crash (open,
    /// replay by the stamp rule, write-back); compare with `recovery`.
    LoglessRecovery(suite::recovery::RecoveryArgs),
    /// (internal) Build the store and backups for `logless-recovery`.
    #[command(hide = true)]
    LoglessRecoveryPrepare(suite::recovery::RecoveryArgs),
}

fn main() {
    let cli = Cli::parse();
    let report = match &cli.command {
        Command::Create(a) => suite::create::run(a),
        Command::Stat(a) => suite::reads::stat(a),
        Command::Readdir(a) => suite::reads::readdir(a),
        Command::Rename(a) => suite::mutate::rename(a),
        Command::Unlink(a) => suite::mutate::unlink(a),
        Command::Build(a) => suite::namespace::build(a),
        Command::Memory(a) => suite::namespace::memory(a),
        Command::Restart(a) => suite::namespace::restart(a),
        Command::Search(a) => suite::search::search(a),
        Command::Recovery(a) => suite::recovery::recovery(a),
        Command::RecoveryPrepare(a) => suite::recovery::prepare(a),
        Command::LoglessRecovery(a) => suite::logless::recovery(a),
        Command::LoglessRecoveryPrepare(a) => suite::logless::prepare(a),
    };
    report.print(cli.json);
}
