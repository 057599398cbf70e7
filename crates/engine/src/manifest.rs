//! The manifest: which tables exist, where their snapshots are, and where
//! journal replay starts. Rewritten whole (atomically) by every checkpoint.
//!
//! ```text
//! magic "SXTMANI1" | body_len u32 | body (postcard Manifest) | crc32c u32 of everything before
//! ```

use crate::journal::Lsn;
use crate::soid::{GlobalHighWater, SoidLayout};
use crate::table::TableId;
use serde::{Deserialize, Serialize};
use sextant_types::SoidRange;

pub const MANIFEST_NAME: &str = "MANIFEST";
const MAGIC: &[u8; 8] = b"SXTMANI1";

/// One table as the last checkpoint left it on disk.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableEntry {
    pub id: TableId,
    pub range: SoidRange,
    /// Blob name of its snapshot.
    pub file: String,
    /// The snapshot holds every record up to this LSN that touched the table.
    pub lsn: Lsn,
    pub inodes: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub layout: SoidLayout,
    /// Sorted by range; the ranges partition the SOID space.
    pub tables: Vec<TableEntry>,
    /// Journal records from this LSN on may be needed by some table.
    pub replay_from: Lsn,
    pub high_water: GlobalHighWater,
    pub next_table_id: TableId,
}

impl Manifest {
    pub fn encode(&self) -> Vec<u8> {
        let body = postcard::to_stdvec(self).expect("serializing to a Vec cannot fail");
        let mut out = Vec::with_capacity(body.len() + 16);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&(body.len() as u32).to_le_bytes());
        out.extend_from_slice(&body);
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// Decodes and validates a manifest. Never panics.
    pub fn decode(b: &[u8]) -> Result<Manifest, String> {
        if b.len() < 16 || &b[..8] != MAGIC {
            return Err("bad manifest header".into());
        }
        let (content, crc) = b.split_at(b.len() - 4);
        if crc32c::crc32c(content) != u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]]) {
            return Err("manifest checksum mismatch".into());
        }
        let len = u32::from_le_bytes([b[8], b[9], b[10], b[11]]) as usize;
        if len != content.len() - 12 {
            return Err("manifest length mismatch".into());
        }
        let m: Manifest = match postcard::take_from_bytes(&content[12..]) {
            Ok((m, [])) => m,
            Ok((_, extra)) => return Err(format!("manifest has {} trailing bytes", extra.len())),
            Err(e) => return Err(format!("manifest body: {e}")),
        };
        m.check()?;
        Ok(m)
    }

    /// The tables must partition the SOID space in order.
    fn check(&self) -> Result<(), String> {
        let mut expect = Some(SoidRange::ALL.first);
        let mut ids = std::collections::BTreeSet::new();
        for t in &self.tables {
            if t.range.first > t.range.last {
                return Err(format!("table {} has an inverted range", t.id));
            }
            if !ids.insert(t.id) {
                return Err(format!("table id {} appears twice", t.id));
            }
            if Some(t.range.first) != expect {
                return Err(format!(
                    "table {} does not start where the previous ended",
                    t.id
                ));
            }
            expect = t.range.last.checked_next();
        }
        if expect.is_some() {
            return Err("tables do not cover the SOID space".into());
        }
        Ok(())
    }
}
