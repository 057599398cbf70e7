//! Exactly-once across a restart (issue 25 item 12), engine side: a
//! mutation run for a client request journals the request and its reply;
//! recovery reports the replayed ones, and the ones written back since
//! (their records trimmed) as gone — never forgotten.

use sextant_engine::requests::{Reply, RequestId};
use sextant_engine::{Engine, EngineConfig};
use sextant_types::{Credentials, Soid};
use std::path::Path;

fn config() -> EngineConfig {
    EngineConfig {
        // Checkpoints only when asked (sync), so what is replayed is known.
        flush_interval: None,
        ..EngineConfig::default()
    }
}

fn open(dir: &Path) -> Engine {
    Engine::open_dir(dir, config()).unwrap()
}

fn id(seq: u64, acked_below: u64) -> RequestId {
    RequestId {
        client: 42,
        seq,
        acked_below,
        digest: 1000 + seq,
    }
}

#[test]
fn replay_reports_the_requests_of_the_records_it_replays() {
    let dir = tempfile::tempdir().unwrap();
    let root = Credentials::root();
    let (made, gone) = {
        let e = open(dir.path());
        let made = e
            .for_request(id(1, 1))
            .create(&root, Soid::ROOT, b"f", 0o644, true)
            .unwrap()
            .wait(&e)
            .unwrap();
        e.for_request(id(2, 1))
            .mkdir(&root, Soid::ROOT, b"d", 0o755)
            .unwrap()
            .wait(&e)
            .unwrap();
        let gone = e
            .for_request(id(3, 1))
            .rmdir(&root, Soid::ROOT, b"d")
            .unwrap()
            .wait(&e)
            .unwrap();
        // Untagged: not reported.
        e.mkdir(&root, Soid::ROOT, b"plain", 0o755)
            .unwrap()
            .wait(&e)
            .unwrap();
        // A crash: dropped without close (nothing written back).
        drop(e);
        (made, gone)
    };
    let e = open(dir.path());
    let r = e.take_recovered_requests().expect("recovery's report");
    assert!(e.take_recovered_requests().is_none(), "taken once");
    let replies: Vec<(u64, u64, Reply)> = r
        .replies
        .iter()
        .map(|t| (t.id.seq, t.id.digest, t.reply.clone()))
        .collect();
    assert_eq!(replies.len(), 3, "{replies:?}");
    // The no-xattrs hint is not recorded: a replayed reply says "not
    // known", which only costs its client a question.
    let unknown = |a: &sextant_types::Attr| sextant_types::Attr {
        no_xattrs: false,
        ..a.clone()
    };
    assert_eq!(replies[0], (1, 1001, Reply::Attr(unknown(&made))));
    assert_eq!(replies[2], (3, 1003, Reply::Attr(unknown(&gone))));
    assert!(r.replies.iter().all(|t| t.id.client == 42));

    // Written back (the journal trimmed): the replies are gone, but the
    // numbers are remembered as run, so a retry is refused, not rerun.
    e.for_request(id(4, 2))
        .unlink(&root, Soid::ROOT, b"f")
        .unwrap()
        .wait(&e)
        .unwrap();
    e.sync().unwrap();
    drop(e);
    let e = open(dir.path());
    let r = e.take_recovered_requests().unwrap();
    assert!(r.replies.is_empty(), "{:?}", r.replies);
    assert_eq!(r.floors, vec![(42, 2)]);
    assert_eq!(r.gone, vec![(42, 2), (42, 3), (42, 4)]);
    e.close().unwrap();
}
