//! Journal records: the physical redo of one committed operation.
//!
//! A record is the write set of one transaction — whole inodes and entries
//! as they are after the operation, and deletions — so replay is a plain,
//! idempotent "set these keys to these values" whatever the operation was.
//! An operation that touches several tables still writes one record, so it
//! is recovered whole or not at all.
//!
//! Versions: 1 is the mutations alone; 2 adds the client request the
//! operation answered ([`RequestTag`], see [`crate::requests`]) before
//! them. A record without a tag is still written as version 1, and both
//! decode.

use crate::inode::{Dentry, Inode};
use crate::requests::RequestTag;
use crate::soid::GlobalHighWater;
use serde::{Deserialize, Serialize};
use sextant_types::Soid;

/// Version byte at the start of a record payload: mutations only.
const RECORD_VERSION: u8 = 1;
/// Version byte of a record with a request tag.
const TAGGED_RECORD_VERSION: u8 = 2;

#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub enum Mutation {
    PutInode {
        soid: Soid,
        inode: Inode,
    },
    DeleteInode {
        soid: Soid,
    },
    PutDentry {
        parent: Soid,
        dentry: Dentry,
    },
    DeleteDentry {
        parent: Soid,
        name: Box<[u8]>,
    },
    /// New high-water marks of the global SOID counters.
    HighWater(GlobalHighWater),
}

impl Mutation {
    /// The SOID whose table this mutation belongs to (`None`: engine-wide).
    pub fn table_key(&self) -> Option<Soid> {
        match self {
            Mutation::PutInode { soid, .. } | Mutation::DeleteInode { soid } => Some(*soid),
            Mutation::PutDentry { parent, .. } | Mutation::DeleteDentry { parent, .. } => {
                Some(*parent)
            }
            Mutation::HighWater(_) => None,
        }
    }
}

pub fn encode_record(mutations: &[Mutation]) -> Vec<u8> {
    let mut out = vec![RECORD_VERSION];
    out.extend_from_slice(
        &postcard::to_stdvec(mutations).expect("serializing to a Vec cannot fail"),
    );
    out
}

/// A record of an operation that answered a client request (version 2);
/// without a tag, the same as [`encode_record`].
pub fn encode_tagged_record(tag: Option<&RequestTag>, mutations: &[Mutation]) -> Vec<u8> {
    let Some(tag) = tag else {
        return encode_record(mutations);
    };
    let mut out = vec![TAGGED_RECORD_VERSION];
    out.extend_from_slice(
        &postcard::to_stdvec(&(tag, mutations)).expect("serializing to a Vec cannot fail"),
    );
    out
}

/// [`encode_tagged_record`] from the write set already encoded as
/// `postcard(mutations)` ([`crate::logless::encode_mutations`]): the same
/// bytes (postcard writes a tuple as its fields one after another), for a
/// log-less member that needs both the record and the redo entry's body.
pub fn encode_tagged_record_from_body(tag: Option<&RequestTag>, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(body.len() + 64);
    match tag {
        None => out.push(RECORD_VERSION),
        Some(tag) => {
            out.push(TAGGED_RECORD_VERSION);
            postcard::to_io(tag, &mut out).expect("serializing to a Vec cannot fail");
        }
    }
    out.extend_from_slice(body);
    out
}

/// Decodes a record payload (either version), dropping any tag. Never
/// panics.
pub fn decode_record(b: &[u8]) -> Result<Vec<Mutation>, String> {
    decode_tagged_record(b).map(|(_, m)| m)
}

/// Decodes a record payload with its request tag (`None` for version 1).
/// Never panics.
pub fn decode_tagged_record(b: &[u8]) -> Result<(Option<RequestTag>, Vec<Mutation>), String> {
    fn whole<T>(r: postcard::Result<(T, &[u8])>) -> Result<T, String> {
        match r {
            Ok((v, [])) => Ok(v),
            Ok((_, extra)) => Err(format!("record has {} trailing bytes", extra.len())),
            Err(e) => Err(format!("bad record: {e}")),
        }
    }
    match b.split_first() {
        Some((&RECORD_VERSION, rest)) => Ok((None, whole(postcard::take_from_bytes(rest))?)),
        Some((&TAGGED_RECORD_VERSION, rest)) => {
            let (tag, m): (RequestTag, Vec<Mutation>) = whole(postcard::take_from_bytes(rest))?;
            Ok((Some(tag), m))
        }
        Some((v, _)) => Err(format!("unknown record version {v}")),
        None => Err("empty record".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sextant_types::FileType;

    #[test]
    fn a_record_from_the_encoded_body_is_the_same_bytes() {
        let m = vec![Mutation::DeleteInode {
            soid: sextant_types::Soid::from_u128(9),
        }];
        let body = crate::logless::encode_mutations(&m);
        let tag = RequestTag {
            id: crate::requests::RequestId {
                client: 3,
                seq: 4,
                acked_below: 1,
                digest: 5,
            },
            reply: crate::requests::Reply::Done,
        };
        for t in [None, Some(&tag)] {
            assert_eq!(
                encode_tagged_record_from_body(t, &body),
                encode_tagged_record(t, &m)
            );
        }
    }

    #[test]
    fn round_trip() {
        let m = vec![
            Mutation::DeleteInode {
                soid: Soid::from_u128(7),
            },
            Mutation::PutDentry {
                parent: Soid::ROOT,
                dentry: Dentry {
                    child: Soid::from_u128(7),
                    ftype: FileType::Regular,
                    name: b"x".as_slice().into(),
                },
            },
        ];
        assert_eq!(decode_record(&encode_record(&m)).unwrap(), m);
        assert!(decode_record(&[]).is_err());
        assert!(decode_record(&[9, 1, 2]).is_err());
    }

    #[test]
    fn tagged_round_trip_and_old_records_still_decode() {
        use crate::requests::{Reply, RequestId};
        let m = vec![Mutation::DeleteInode {
            soid: Soid::from_u128(7),
        }];
        let tag = RequestTag {
            id: RequestId {
                client: 1,
                seq: 2,
                acked_below: 1,
                digest: 3,
            },
            reply: Reply::Done,
        };
        let b = encode_tagged_record(Some(&tag), &m);
        assert_eq!(b[0], TAGGED_RECORD_VERSION);
        assert_eq!(decode_tagged_record(&b).unwrap(), (Some(tag), m.clone()));
        assert_eq!(decode_record(&b).unwrap(), m);
        // Version 1 (what older servers wrote, and untagged records now).
        let old = encode_tagged_record(None, &m);
        assert_eq!(old, encode_record(&m));
        assert_eq!(old[0], RECORD_VERSION);
        assert_eq!(decode_tagged_record(&old).unwrap(), (None, m));
        assert!(decode_tagged_record(&b[..b.len() - 1]).is_err());
    }
}
