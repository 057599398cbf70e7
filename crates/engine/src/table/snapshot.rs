//! Table snapshots: the on-disk form of a whole table
//! (docs/formats/journal.md, "Snapshots").

use super::carried::CarriedClient;
use super::TableId;
use crate::inode::{Dentry, Inode};
use crate::journal::Lsn;
use serde::{Deserialize, Serialize};
use sextant_types::{Soid, SoidRange};

const SNAPSHOT_MAGIC: &[u8; 8] = b"SXTSNAP1";
/// Version 2: a trailer with the replies the table carries follows the
/// body (see [`super::carried`]).
const SNAPSHOT_MAGIC_V2: &[u8; 8] = b"SXTSNAP2";
const SNAPSHOT_HEADER_LEN: usize = 8 + 8 + 16 + 16 + 8 + 8;

#[derive(Serialize, Deserialize, Debug, Default)]
pub struct SnapshotBody {
    pub inodes: Vec<(Soid, Inode)>,
    pub dentries: Vec<(Soid, Dentry)>,
}

/// A decoded snapshot.
#[derive(Debug)]
pub struct Snapshot {
    pub id: TableId,
    pub range: SoidRange,
    pub lsn: Lsn,
    pub body: SnapshotBody,
    /// The replies the table carries (empty in a version-1 snapshot).
    pub carried: Vec<CarriedClient>,
}

/// Snapshot layout:
///
/// ```text
/// magic "SXTSNAP1" | table id u64 | range.first [16] | range.last [16] | lsn u64 | body_len u64
/// body (postcard: inodes, dentries) | crc32c u32 of everything before
/// ```
/// SOIDs big-endian, integers little-endian.
///
/// Version 2 (magic `"SXTSNAP2"`, written only when the table carries
/// replies) puts a trailer between the body and the checksum:
/// `carried_len u64 | carried (postcard Vec<CarriedClient>)`.
pub fn encode_snapshot(id: TableId, range: SoidRange, lsn: Lsn, body: &SnapshotBody) -> Vec<u8> {
    encode_snapshot_carrying(id, range, lsn, body, &[])
}

/// [`encode_snapshot`] with the replies the table carries.
pub fn encode_snapshot_carrying(
    id: TableId,
    range: SoidRange,
    lsn: Lsn,
    body: &SnapshotBody,
    carried: &[CarriedClient],
) -> Vec<u8> {
    let body_bytes = postcard::to_stdvec(body).expect("serializing to a Vec cannot fail");
    let carried_bytes = (!carried.is_empty())
        .then(|| postcard::to_stdvec(carried).expect("serializing to a Vec cannot fail"));
    let mut out = Vec::with_capacity(
        SNAPSHOT_HEADER_LEN + body_bytes.len() + 12 + carried_bytes.as_ref().map_or(0, Vec::len),
    );
    out.extend_from_slice(if carried_bytes.is_some() {
        SNAPSHOT_MAGIC_V2
    } else {
        SNAPSHOT_MAGIC
    });
    out.extend_from_slice(&id.to_le_bytes());
    out.extend_from_slice(&range.first.to_be_bytes());
    out.extend_from_slice(&range.last.to_be_bytes());
    out.extend_from_slice(&lsn.to_le_bytes());
    out.extend_from_slice(&(body_bytes.len() as u64).to_le_bytes());
    out.extend_from_slice(&body_bytes);
    if let Some(c) = carried_bytes {
        out.extend_from_slice(&(c.len() as u64).to_le_bytes());
        out.extend_from_slice(&c);
    }
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// Decodes a snapshot. Never panics; `Err` says what is wrong.
pub fn decode_snapshot(b: &[u8]) -> Result<Snapshot, String> {
    if b.len() < SNAPSHOT_HEADER_LEN + 4 {
        return Err(format!("snapshot too short ({} bytes)", b.len()));
    }
    let v2 = match &b[..8] {
        m if m == SNAPSHOT_MAGIC => false,
        m if m == SNAPSHOT_MAGIC_V2 => true,
        _ => return Err("bad snapshot magic".into()),
    };
    let (content, crc_bytes) = b.split_at(b.len() - 4);
    let crc = u32::from_le_bytes([crc_bytes[0], crc_bytes[1], crc_bytes[2], crc_bytes[3]]);
    if crc32c::crc32c(content) != crc {
        return Err("snapshot checksum mismatch".into());
    }
    let u64_at = |at: usize| {
        let mut a = [0u8; 8];
        a.copy_from_slice(&b[at..at + 8]);
        u64::from_le_bytes(a)
    };
    let soid_at = |at: usize| {
        let mut a = [0u8; 16];
        a.copy_from_slice(&b[at..at + 16]);
        Soid::from_be_bytes(a)
    };
    let id = u64_at(8);
    let range = SoidRange::new(soid_at(16), soid_at(32)).ok_or("snapshot range inverted")?;
    let lsn = u64_at(48);
    let body_len = u64_at(56);
    let after_header = (content.len() - SNAPSHOT_HEADER_LEN) as u64;
    let (body_bytes, carried) = if v2 {
        // The trailer's length field must fit after the body.
        if after_header < 8 || body_len > after_header - 8 {
            return Err("snapshot body length mismatch".into());
        }
        let body_end = SNAPSHOT_HEADER_LEN + body_len as usize;
        let carried_len = u64_at(body_end);
        if carried_len != (content.len() - body_end - 8) as u64 {
            return Err("snapshot trailer length mismatch".into());
        }
        let carried: Vec<CarriedClient> = match postcard::take_from_bytes(&content[body_end + 8..])
        {
            Ok((c, [])) => c,
            Ok((_, extra)) => {
                return Err(format!(
                    "snapshot trailer has {} trailing bytes",
                    extra.len()
                ))
            }
            Err(e) => return Err(format!("snapshot trailer: {e}")),
        };
        (&content[SNAPSHOT_HEADER_LEN..body_end], carried)
    } else {
        if body_len != after_header {
            return Err("snapshot body length mismatch".into());
        }
        (&content[SNAPSHOT_HEADER_LEN..], Vec::new())
    };
    let body: SnapshotBody = match postcard::take_from_bytes(body_bytes) {
        Ok((body, [])) => body,
        Ok((_, extra)) => return Err(format!("snapshot body has {} trailing bytes", extra.len())),
        Err(e) => return Err(format!("snapshot body: {e}")),
    };
    for (s, _) in &body.inodes {
        if !range.contains(*s) {
            return Err(format!("inode {s} outside the table range"));
        }
    }
    for (p, _) in &body.dentries {
        if !range.contains(*p) {
            return Err(format!("entry of {p} outside the table range"));
        }
    }
    Ok(Snapshot {
        id,
        range,
        lsn,
        body,
        carried,
    })
}
