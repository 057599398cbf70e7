//! Keep-alives on search streams (`SearchRequest.keep_alive`; issue 21,
//! "a time bound on a spread search's parts").
//!
//! A search that finds nothing for a long time (a broad scan over
//! millions of entries, a part waiting for another server's directories)
//! sends nothing; an asker could not tell it from a server that stopped
//! (SIGSTOP, a hung machine, a network partition that resets nothing).
//! Asked for keep-alives, the `Search` call is answered at once — its
//! response header [`KEEP_ALIVE_HEADER`] announcing them — and [`pump`]
//! relays the search's batches, sending a batch with only `keep_alive`
//! set whenever nothing else went out for [`KEEP_ALIVE_EVERY`], from the
//! answer (the search may still wait for its turn, or resolve its scope
//! across the servers) until the search's last batch (`done` or `error`):
//! none after it. The asker may then take a stream silent for
//! [`sextant_proto::search::SILENT_FOR`] for a stopped server.
//!
//! A stream this server relays from another ([`bounded`]: a search
//! forwarded for a local user) is bounded the same way when that server
//! announced keep-alives, so that a relay's own keep-alives never hide a
//! stopped server behind it.
//!
//! Cancellation is unchanged: the asker's stream dropped, the relay ends
//! and drops the search's stream, which stops the search at its next hit.

use super::{SearchStream, SEARCH_QUEUE};
use sextant_proto::pb;
use sextant_proto::search::KEEP_ALIVE_EVERY;
use std::future::Future;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::StreamExt;
use tonic::Status;

fn keep_alive() -> Result<pb::SearchBatch, Status> {
    Ok(pb::SearchBatch {
        keep_alive: true,
        ..Default::default()
    })
}

/// Whether `item` ends a search (its `done`, its error): no keep-alive
/// may follow it (a client reading the stream to its end after `done`
/// takes any batch there for a protocol error).
fn is_last(item: &Result<pb::SearchBatch, Status>) -> bool {
    match item {
        Ok(b) => b.done.is_some() || b.error.is_some(),
        Err(_) => true,
    }
}

/// The stream of the search `opened` will start, with keep-alives (see
/// the module docs). Returns at once; `opened` runs in a task of its own.
pub(super) fn pump<F>(opened: F) -> SearchStream
where
    F: Future<Output = Result<SearchStream, Status>> + Send + 'static,
{
    pump_every(opened, KEEP_ALIVE_EVERY)
}

fn pump_every<F>(opened: F, every: Duration) -> SearchStream
where
    F: Future<Output = Result<SearchStream, Status>> + Send + 'static,
{
    let (tx, rx) = mpsc::channel(SEARCH_QUEUE);
    tokio::spawn(async move {
        tokio::pin!(opened);
        // Until the search started (its turn, its scope resolved).
        let mut search = loop {
            tokio::select! {
                _ = tx.closed() => return,
                s = &mut opened => match s {
                    Ok(s) => break s,
                    Err(status) => {
                        let _ = tx.send(Err(status)).await;
                        return;
                    }
                },
                _ = tokio::time::sleep(every) => {
                    if tx.send(keep_alive()).await.is_err() {
                        return;
                    }
                }
            }
        };
        // Its batches, a keep-alive after every `every` of silence, until
        // its last batch; whatever follows that is passed on as it is.
        let mut ended = false;
        loop {
            let next = if ended {
                tokio::select! {
                    _ = tx.closed() => return,
                    n = search.next() => Ok(n),
                }
            } else {
                tokio::select! {
                    _ = tx.closed() => return,
                    n = tokio::time::timeout(every, search.next()) => n,
                }
            };
            let item = match next {
                Ok(Some(item)) => item,
                Ok(None) => return,
                Err(_) => keep_alive(),
            };
            ended |= is_last(&item);
            if tx.send(item).await.is_err() {
                return;
            }
        }
    });
    Box::pin(ReceiverStream::new(rx))
}

/// `stream` (a search another server at `from` runs for this one's
/// caller) ended UNAVAILABLE when it brings nothing for `silent_for`
/// (`None`: that server announced no keep-alives — unbounded, as
/// before).
pub(super) fn bounded(
    mut stream: tonic::Streaming<pb::SearchBatch>,
    from: String,
    silent_for: Option<Duration>,
) -> SearchStream {
    let Some(silent_for) = silent_for else {
        return Box::pin(stream);
    };
    let (tx, rx) = mpsc::channel(SEARCH_QUEUE);
    tokio::spawn(async move {
        loop {
            let next = tokio::select! {
                _ = tx.closed() => return,
                n = tokio::time::timeout(silent_for, stream.message()) => n,
            };
            let item = match next {
                Ok(Ok(Some(b))) => Ok(b),
                Ok(Ok(None)) => return,
                Ok(Err(s)) => Err(s),
                Err(_) => Err(Status::unavailable(format!(
                    "{from} sent nothing for {} s (no hit, keep-alive or end, though it \
                     announced keep-alives): taken for a stopped server",
                    silent_for.as_secs()
                ))),
            };
            let end = item.is_err();
            if tx.send(item).await.is_err() || end {
                return;
            }
        }
    });
    Box::pin(ReceiverStream::new(rx))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hits(n: usize) -> Result<pb::SearchBatch, Status> {
        Ok(pb::SearchBatch {
            hits: vec![pb::SearchHit::default(); n],
            ..Default::default()
        })
    }

    fn done() -> Result<pb::SearchBatch, Status> {
        Ok(pb::SearchBatch {
            done: Some(pb::SearchDone::default()),
            ..Default::default()
        })
    }

    /// What the asker reads: 'k' a keep-alive, 'h' hits, 'd' the end,
    /// 'e' an error.
    async fn read(mut s: SearchStream) -> String {
        let mut seen = String::new();
        while let Some(item) = s.next().await {
            seen.push(match item {
                Ok(b) if b.keep_alive => 'k',
                Ok(b) if b.done.is_some() => 'd',
                Ok(_) => 'h',
                Err(_) => 'e',
            });
        }
        seen
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_search_gets_keep_alives_until_its_end_and_none_after() {
        let every = Duration::from_secs(2);
        let (tx, rx) = mpsc::channel(4);
        let search: SearchStream = Box::pin(ReceiverStream::new(rx));
        // It waits 5 s for its turn, finds a batch, runs 5 s more without
        // a hit, ends; its stream closes 7 s after its `done`.
        let opened = async move {
            tokio::time::sleep(Duration::from_secs(5)).await;
            Ok(search)
        };
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(5_500)).await;
            tx.send(hits(3)).await.unwrap();
            tokio::time::sleep(Duration::from_secs(5)).await;
            tx.send(done()).await.unwrap();
            tokio::time::sleep(Duration::from_secs(7)).await;
        });
        let seen = read(pump_every(opened, every)).await;
        assert_eq!(seen, "kkhkkd");
    }

    #[tokio::test(start_paused = true)]
    async fn a_search_that_cannot_start_ends_with_its_error() {
        let opened = async {
            tokio::time::sleep(Duration::from_secs(3)).await;
            Err(Status::unavailable("shutting down"))
        };
        assert_eq!(read(pump_every(opened, Duration::from_secs(2))).await, "ke");
    }

    #[tokio::test(start_paused = true)]
    async fn the_asker_gone_the_search_is_dropped() {
        let (tx, rx) = mpsc::channel::<Result<pb::SearchBatch, Status>>(4);
        let search: SearchStream = Box::pin(ReceiverStream::new(rx));
        let s = pump_every(async move { Ok(search) }, Duration::from_secs(2));
        tokio::time::sleep(Duration::from_secs(1)).await;
        drop(s);
        // The relay ends and drops the search's receiver: the search sees
        // it closed (its `cancelled`).
        tokio::time::timeout(Duration::from_secs(5), tx.closed())
            .await
            .expect("the search's stream was not dropped");
    }
}
