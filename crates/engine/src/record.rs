//! Journal records: the physical redo of one committed operation.
//!
//! A record is the write set of one transaction — whole inodes and entries
//! as they are after the operation, and deletions — so replay is a plain,
//! idempotent "set these keys to these values" whatever the operation was.
//! An operation that touches several tables still writes one record, so it
//! is recovered whole or not at all.

use crate::inode::{Dentry, Inode};
use crate::soid::GlobalHighWater;
use serde::{Deserialize, Serialize};
use sextant_types::Soid;

/// Version byte at the start of every record payload.
const RECORD_VERSION: u8 = 1;

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

/// Decodes a record payload. Never panics.
pub fn decode_record(b: &[u8]) -> Result<Vec<Mutation>, String> {
    match b.split_first() {
        Some((&RECORD_VERSION, rest)) => match postcard::take_from_bytes(rest) {
            Ok((m, [])) => Ok(m),
            Ok((_, extra)) => Err(format!("record has {} trailing bytes", extra.len())),
            Err(e) => Err(format!("bad record: {e}")),
        },
        Some((v, _)) => Err(format!("unknown record version {v}")),
        None => Err("empty record".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sextant_types::FileType;

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
}
