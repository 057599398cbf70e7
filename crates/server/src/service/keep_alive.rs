//! Keep-alives on search streams (`SearchRequest.keep_alive`; issue 21,
//! "a time bound on a spread search's parts").
//!
//! A search that finds nothing for a long time (a broad scan over
//! millions of entries, a part waiting for another server's directories)
//! sends nothing; an asker could not tell it from a server that stopped
//! (SIGSTOP, a hung machine, a network partition that resets nothing).
//! Asked for keep-alives, the `Search` call is answered at once — its
//! response header [`KEEP_ALIVE_HEADER`] announcing them — and [`pump`]
//! passes the search's batches on, sending a batch with only `keep_alive`
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
//! Both are stream adapters around the search's stream (one timer each,
//! reset by every item), polled by the task that sends the response: no
//! task or channel of their own (issue 21: a relay task and channel per
//! search cost 2 – 5 % of a short search's server CPU;
//! docs/BENCHMARKS.md). Cancellation is unchanged: the asker gone, the
//! response stream is dropped and with it the search's stream, which
//! stops the search at its next hit.

use super::SearchStream;
use sextant_proto::pb;
use sextant_proto::search::KEEP_ALIVE_EVERY;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio_stream::Stream;
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
/// the module docs). Returns at once; `opened` is polled as the stream is
/// (by the task that sends the call's response): no task or channel of
/// its own, one timer per search.
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
    Box::pin(Pump {
        state: State::Opening(Box::pin(opened)),
        timer: Box::pin(tokio::time::sleep(every)),
        every,
        ended: false,
    })
}

/// Where a [`Pump`]'s search is.
enum State {
    /// Not started yet (its turn, its scope resolved across the servers).
    Opening(Pin<Box<dyn Future<Output = Result<SearchStream, Status>> + Send>>),
    /// Its batches.
    Running(SearchStream),
    /// It could not start, or its stream ended: nothing more.
    Over,
}

/// A search's stream with a keep-alive whenever nothing went out for
/// `every`, until its last batch; whatever follows that is passed on as
/// it is. Dropped (the asker gone), it drops the search's stream.
struct Pump {
    state: State,
    /// When a keep-alive is due: `every` after the last item sent.
    timer: Pin<Box<tokio::time::Sleep>>,
    every: Duration,
    /// The search's last batch (`done`, an error) was sent: no keep-alive
    /// follows it.
    ended: bool,
}

impl Pump {
    fn send(
        &mut self,
        item: Result<pb::SearchBatch, Status>,
    ) -> Poll<Option<Result<pb::SearchBatch, Status>>> {
        self.ended |= is_last(&item);
        let due = tokio::time::Instant::now() + self.every;
        self.timer.as_mut().reset(due);
        Poll::Ready(Some(item))
    }
}

impl Stream for Pump {
    type Item = Result<pb::SearchBatch, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        if let State::Opening(opened) = &mut this.state {
            match opened.as_mut().poll(cx) {
                Poll::Ready(Ok(search)) => this.state = State::Running(search),
                Poll::Ready(Err(status)) => {
                    this.state = State::Over;
                    return this.send(Err(status));
                }
                Poll::Pending => {}
            }
        }
        match &mut this.state {
            State::Opening(_) => {}
            State::Running(search) => match search.as_mut().poll_next(cx) {
                Poll::Ready(Some(item)) => return this.send(item),
                Poll::Ready(None) => {
                    this.state = State::Over;
                    return Poll::Ready(None);
                }
                Poll::Pending => {}
            },
            State::Over => return Poll::Ready(None),
        }
        if !this.ended && this.timer.as_mut().poll(cx).is_ready() {
            return this.send(keep_alive());
        }
        Poll::Pending
    }
}

/// `stream` (a search another server at `from` runs for this one's
/// caller) ended UNAVAILABLE when it brings nothing for `silent_for`
/// (`None`: that server announced no keep-alives — unbounded, as
/// before). No task or channel of its own, as [`pump`].
pub(super) fn bounded(
    stream: tonic::Streaming<pb::SearchBatch>,
    from: String,
    silent_for: Option<Duration>,
) -> SearchStream {
    let Some(silent_for) = silent_for else {
        return Box::pin(stream);
    };
    bounded_by(stream, from, silent_for)
}

fn bounded_by<S>(stream: S, from: String, silent_for: Duration) -> SearchStream
where
    S: Stream<Item = Result<pb::SearchBatch, Status>> + Unpin + Send + 'static,
{
    Box::pin(Bounded {
        stream: Some(stream),
        from,
        timer: Box::pin(tokio::time::sleep(silent_for)),
        silent_for,
    })
}

/// [`bounded`]'s stream: `stream` until it ends or fails, or brings
/// nothing for `silent_for` (then one UNAVAILABLE error, and the end).
struct Bounded<S> {
    /// `None` once it ended, failed or went silent.
    stream: Option<S>,
    from: String,
    /// When it is taken for stopped: `silent_for` after its last message.
    timer: Pin<Box<tokio::time::Sleep>>,
    silent_for: Duration,
}

impl<S> Stream for Bounded<S>
where
    S: Stream<Item = Result<pb::SearchBatch, Status>> + Unpin,
{
    type Item = Result<pb::SearchBatch, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        let Some(stream) = &mut this.stream else {
            return Poll::Ready(None);
        };
        match Pin::new(stream).poll_next(cx) {
            Poll::Ready(Some(Ok(b))) => {
                let due = tokio::time::Instant::now() + this.silent_for;
                this.timer.as_mut().reset(due);
                return Poll::Ready(Some(Ok(b)));
            }
            Poll::Ready(Some(Err(s))) => {
                this.stream = None;
                return Poll::Ready(Some(Err(s)));
            }
            Poll::Ready(None) => {
                this.stream = None;
                return Poll::Ready(None);
            }
            Poll::Pending => {}
        }
        if this.timer.as_mut().poll(cx).is_ready() {
            this.stream = None;
            return Poll::Ready(Some(Err(Status::unavailable(format!(
                "{} sent nothing for {} s (no hit, keep-alive or end, though it \
                 announced keep-alives): taken for a stopped server",
                this.from,
                this.silent_for.as_secs()
            )))));
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::mpsc;
    use tokio_stream::wrappers::ReceiverStream;
    use tokio_stream::StreamExt;

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
    async fn a_relayed_stream_silent_for_its_bound_ends_unavailable() {
        let bound = Duration::from_secs(10);
        let (tx, rx) = mpsc::channel(4);
        // Hits, keep-alives 6 s apart (within the bound), then nothing.
        tokio::spawn(async move {
            tx.send(hits(1)).await.unwrap();
            for _ in 0..3 {
                tokio::time::sleep(Duration::from_secs(6)).await;
                tx.send(keep_alive()).await.unwrap();
            }
            tokio::time::sleep(Duration::from_secs(60)).await;
            drop(tx);
        });
        let s = bounded_by(ReceiverStream::new(rx), "b".into(), bound);
        let started = tokio::time::Instant::now();
        assert_eq!(read(s).await, "hkkke");
        assert_eq!(started.elapsed(), Duration::from_secs(28));
    }

    #[tokio::test(start_paused = true)]
    async fn a_relayed_stream_that_ends_is_passed_on_whole() {
        let (tx, rx) = mpsc::channel(4);
        tokio::spawn(async move {
            tx.send(hits(2)).await.unwrap();
            tokio::time::sleep(Duration::from_secs(9)).await;
            tx.send(done()).await.unwrap();
        });
        let s = bounded_by(ReceiverStream::new(rx), "b".into(), Duration::from_secs(10));
        assert_eq!(read(s).await, "hd");
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
