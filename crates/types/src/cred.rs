//! The identity a request runs as.

use serde::{Deserialize, Serialize};

/// The caller's uid, primary gid and supplementary groups, as the kernel
/// reports them for the calling process. Permission checks use exactly these.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
pub struct Credentials {
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups (may or may not repeat `gid`).
    pub groups: Vec<u32>,
}

impl Credentials {
    pub fn root() -> Credentials {
        Credentials {
            uid: 0,
            gid: 0,
            groups: Vec::new(),
        }
    }

    pub fn user(uid: u32, gid: u32) -> Credentials {
        Credentials {
            uid,
            gid,
            groups: Vec::new(),
        }
    }

    pub fn is_root(&self) -> bool {
        self.uid == 0
    }

    /// True when `gid` is the caller's primary or a supplementary group.
    pub fn in_group(&self, gid: u32) -> bool {
        self.gid == gid || self.groups.contains(&gid)
    }
}
