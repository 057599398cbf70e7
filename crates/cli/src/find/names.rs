//! The outside world `sextant find` consults: the user and group
//! databases (through `nix`'s `getpwuid_r` & co., cached per run; a uid without a name
//! prints as its number, as find does), the clock, and the client-only
//! tests that need them ([`Names::decide`]).

use super::parse::{ClientTest, Env};
use super::plan;
use nix::unistd::{Gid, Group, Uid, User};
use sextant_engine::search::{glob_match, SearchHit};
use sextant_types::{Attr, FileType, FsError, Nanos};
use std::collections::HashMap;

/// The user and group databases, cached.
#[derive(Default)]
pub(crate) struct Names {
    users: HashMap<u32, Option<String>>,
    groups: HashMap<u32, Option<String>>,
    /// [`Names::decide`] found a symlink loop where `-xtype` had to follow
    /// one (find reports it and exits 1; the test is false): taken by
    /// [`Names::take_loop`].
    looped: bool,
}

fn user_name(uid: u32) -> Option<String> {
    User::from_uid(Uid::from_raw(uid))
        .ok()
        .flatten()
        .map(|u| u.name)
}

fn group_name(gid: u32) -> Option<String> {
    Group::from_gid(Gid::from_raw(gid))
        .ok()
        .flatten()
        .map(|g| g.name)
}

fn uid_of(name: &str) -> Option<u32> {
    User::from_name(name).ok().flatten().map(|u| u.uid.as_raw())
}

fn gid_of(name: &str) -> Option<u32> {
    Group::from_name(name)
        .ok()
        .flatten()
        .map(|g| g.gid.as_raw())
}

impl Names {
    /// The user name, or the number when no user has it.
    pub(crate) fn user(&mut self, uid: u32) -> String {
        let n = self.users.entry(uid).or_insert_with(|| user_name(uid));
        n.clone().unwrap_or_else(|| uid.to_string())
    }

    pub(crate) fn group(&mut self, gid: u32) -> String {
        let n = self.groups.entry(gid).or_insert_with(|| group_name(gid));
        n.clone().unwrap_or_else(|| gid.to_string())
    }

    pub(super) fn has_user(&mut self, uid: u32) -> bool {
        self.users
            .entry(uid)
            .or_insert_with(|| user_name(uid))
            .is_some()
    }

    pub(super) fn has_group(&mut self, gid: u32) -> bool {
        self.groups
            .entry(gid)
            .or_insert_with(|| group_name(gid))
            .is_some()
    }

    /// Did a `-xtype` meet a symlink loop since the last call? (See
    /// [`Names::decide`].)
    pub(super) fn take_loop(&mut self) -> bool {
        std::mem::take(&mut self.looped)
    }

    /// Decides a client-only test for `hit` as `cred`, with what else is
    /// known of it (`seen`). access(2) follows symlinks. `-xtype` of a
    /// symlink that does not resolve is `l`, as find's, except for a loop:
    /// find reports that and the test is false (noted for
    /// [`Names::take_loop`]).
    pub(super) fn decide(
        &mut self,
        t: &ClientTest,
        hit: &SearchHit,
        cred: &sextant_types::Credentials,
        seen: &Seen<'_>,
    ) -> bool {
        let Seen {
            target,
            link,
            fstype,
            ino,
        } = *seen;
        match *t {
            ClientTest::LinkName { ref pattern, ci } => {
                hit.attr.ftype == FileType::Symlink
                    && link.is_some_and(|l| glob_match(pattern, l, ci))
            }
            ClientTest::NoUser => !self.has_user(hit.attr.uid),
            ClientTest::NoGroup => !self.has_group(hit.attr.gid),
            ClientTest::Access(m) if hit.attr.ftype == FileType::Symlink => {
                matches!(target, Some(Ok(a)) if plan::access(a, cred, m))
            }
            ClientTest::Access(m) => plan::access(&hit.attr, cred, m),
            ClientTest::XType(ref ts) if hit.attr.ftype == FileType::Symlink => match target {
                Some(Ok(a)) => ts.contains(&a.ftype),
                Some(Err(FsError::Loop)) => {
                    self.looped = true;
                    false
                }
                _ => ts.contains(&FileType::Symlink),
            },
            ClientTest::XType(ref ts) => ts.contains(&hit.attr.ftype),
            ClientTest::FsType(ref want) => *want == fstype,
            ClientTest::Inode(n) => ino == Some(n),
            ClientTest::Stat => true,
        }
    }
}

/// What [`Names::decide`] knows of an entry beside its attributes.
#[derive(Clone, Copy)]
pub(super) struct Seen<'a> {
    /// What a symlink resolves to (`None`: it was not followed; an error:
    /// it does not resolve, and access fails).
    pub(super) target: Option<Result<&'a Attr, FsError>>,
    /// A symlink's contents.
    pub(super) link: Option<&'a [u8]>,
    /// The starting point's file system type.
    pub(super) fstype: &'a str,
    /// The inode number the mount shows for it (under a mount, when the
    /// expression needs it).
    pub(super) ino: Option<u128>,
}

pub(super) struct RealEnv {
    pub(super) now: Nanos,
}

impl Env for RealEnv {
    fn now(&self) -> Nanos {
        self.now
    }
    fn day_start(&self) -> Nanos {
        let secs = self.now.secs() as libc::time_t;
        // SAFETY: localtime_r writes only into `tm`.
        let tm = unsafe {
            let mut tm: libc::tm = std::mem::zeroed();
            libc::localtime_r(&secs, &mut tm);
            tm
        };
        let into_day =
            i64::from(tm.tm_hour) * 3600 + i64::from(tm.tm_min) * 60 + i64::from(tm.tm_sec);
        Nanos::from_parts(self.now.secs() - into_day, 0).unwrap_or(self.now)
    }
    fn local_seconds(&self, c: &super::date::Civil) -> Option<i64> {
        // SAFETY: mktime reads and normalises only the `tm` we own.
        let t = unsafe {
            let mut tm: libc::tm = std::mem::zeroed();
            tm.tm_year = i32::try_from(c.year - 1900).ok()?;
            tm.tm_mon = c.month as i32 - 1;
            tm.tm_mday = c.day as i32;
            tm.tm_hour = c.hour as i32;
            tm.tm_min = c.minute as i32;
            tm.tm_sec = c.second as i32;
            tm.tm_isdst = -1;
            libc::mktime(&mut tm)
        };
        // -1 is also a valid instant (1969-12-31 23:59:59 UTC), but only
        // in a zone at UTC; elsewhere it is mktime's error.
        #[allow(clippy::useless_conversion)] // time_t is i32 on some targets
        (t != -1 || c.utc_seconds() == -1).then_some(i64::from(t))
    }
    fn uid_of(&self, user: &str) -> Option<u32> {
        uid_of(user)
    }
    fn gid_of(&self, group: &str) -> Option<u32> {
        gid_of(group)
    }
}

/// The current time.
pub(super) fn now() -> Nanos {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    Nanos::from_parts(d.as_secs() as i64, d.subsec_nanos()).unwrap_or(Nanos(i64::MAX))
}
