//! Attribute changes held back: a chmod, chown or utimes of a file this
//! mount has open for writing, made by the process that opened it before
//! it closes it ([`crate::writers`]), is answered at once and sent to the
//! server with the file's size at the next close of the file (by any
//! process or thread), fsync or release — one request
//! instead of one per change (tar sets owner, mode and times of each file
//! it writes before closing it: four requests and four journal syncs per
//! file became two).
//!
//! This is CephFS's buffered attribute change under exclusive caps, bounded
//! to files open for writing here: like their size, such changes reach
//! other clients at close (close-to-open), fsync makes them durable, and a
//! mount killed before the close loses them with the size (the README's
//! durability table).
//!
//! Invariants (what keeps the answer the server's):
//! - A change is held only when the attributes it applies to are known
//!   (the file's last seen attributes, or those after the changes held
//!   already) and [`sextant_engine::setattr::apply`] — the server's own
//!   rules — accepts it; what it answers is what the server will store.
//! - Held changes are merged into one request only when applying the
//!   merged request to the attributes before the first held change gives
//!   exactly what applying them one after the other gives (a chown after a
//!   chmod does not: the chown's clearing of set-ID bits would come first);
//!   and only for one caller (the request carries one identity). Otherwise
//!   the caller sends what is held, then its change, as before.
//! - While a held change is being sent, no other is held for that file, so
//!   a failed send can be put back as it was.
//! - A time set to "now" by the owner is held as that instant, so the
//!   server stores the time the kernel was told.
//! - A send the server refuses (the file's owner changed elsewhere
//!   meanwhile, say) drops what was held: the close or fsync returns the
//!   error, the size is sent alone at once, and the file shows the
//!   server's attributes again.
//! - Pure bookkeeping: no I/O.

use parking_lot::Mutex;
use sextant_engine::setattr::apply;
use sextant_types::{Attr, Credentials, Nanos, SetAttr, Soid, TimeSet};
use std::collections::HashMap;

/// Changes held for one file.
#[derive(Debug, Clone, PartialEq)]
pub struct Held {
    /// Who made them (the request is sent as this caller).
    pub cred: Credentials,
    /// Merged, no size (the size goes with it when sent).
    pub set: SetAttr,
    /// The file's attributes before the first held change.
    pub before: Attr,
    /// After every held change: what the kernel was answered.
    pub after: Attr,
}

#[derive(Debug)]
enum Slot {
    Held(Box<Held>),
    /// Taken to be sent; nothing is held meanwhile.
    Sending,
}

/// See the module docs.
#[derive(Debug, Default)]
pub struct HeldChanges {
    files: Mutex<HashMap<Soid, Slot>>,
}

/// `b` laid over `a`: the later change of each attribute wins.
fn merged(a: &SetAttr, b: &SetAttr) -> SetAttr {
    SetAttr {
        perm: b.perm.or(a.perm),
        uid: b.uid.or(a.uid),
        gid: b.gid.or(a.gid),
        size: None,
        atime: b.atime.or(a.atime),
        mtime: b.mtime.or(a.mtime),
    }
}

fn applied(attr: &Attr, cred: &Credentials, set: &SetAttr, now: Nanos) -> Option<Attr> {
    let mut a = attr.clone();
    apply(&mut a, cred, set, false, now).ok()?;
    Some(a)
}

impl HeldChanges {
    /// Holds change `set` (no size) by `cred` of file `soid`, whose
    /// attributes now are `known` (ignored when changes are held: those
    /// after them count). Returns the attributes after it, or `None` when
    /// it cannot be held: the caller sends what is held ([`Self::take`])
    /// and then the change itself.
    pub fn hold(
        &self,
        soid: Soid,
        cred: &Credentials,
        set: &SetAttr,
        known: Option<Attr>,
        now: Nanos,
    ) -> Option<Attr> {
        if set.size.is_some() || set.is_empty() {
            return None;
        }
        let mut set = set.clone();
        let mut files = self.files.lock();
        let (before, prior, base) = match files.get(&soid) {
            Some(Slot::Sending) => return None,
            Some(Slot::Held(h)) if h.cred != *cred => return None,
            Some(Slot::Held(h)) => (h.before.clone(), h.set.clone(), h.after.clone()),
            None => {
                let k = known.filter(|k| k.soid == soid)?;
                (k.clone(), SetAttr::default(), k)
            }
        };
        // The owner may set explicit times: hold "now" as this instant.
        if cred.is_root() || cred.uid == base.uid {
            for t in [&mut set.atime, &mut set.mtime] {
                if *t == Some(TimeSet::Now) {
                    *t = Some(TimeSet::At(now));
                }
            }
        }
        let after = applied(&base, cred, &set, now)?;
        let all = merged(&prior, &set);
        if applied(&before, cred, &all, now).as_ref() != Some(&after) {
            return None;
        }
        files.insert(
            soid,
            Slot::Held(Box::new(Held {
                cred: cred.clone(),
                set: all,
                before,
                after: after.clone(),
            })),
        );
        Some(after)
    }

    /// The attributes after the changes held for `soid` (what the kernel
    /// was answered), if any are.
    pub fn attr(&self, soid: Soid) -> Option<Attr> {
        match self.files.lock().get(&soid) {
            Some(Slot::Held(h)) => Some(h.after.clone()),
            _ => None,
        }
    }

    /// Takes what is held for `soid` to send it; until [`Self::sent`] or
    /// [`Self::put_back`] nothing else is held for it.
    pub fn take(&self, soid: Soid) -> Option<Held> {
        let mut files = self.files.lock();
        match files.get(&soid) {
            Some(Slot::Held(_)) => match files.insert(soid, Slot::Sending) {
                Some(Slot::Held(h)) => Some(*h),
                _ => None,
            },
            _ => None,
        }
    }

    /// The server has what [`Self::take`] gave (or refused it for good).
    pub fn sent(&self, soid: Soid) {
        let mut files = self.files.lock();
        if matches!(files.get(&soid), Some(Slot::Sending)) {
            files.remove(&soid);
        }
    }

    /// The send failed or was abandoned: hold it again.
    pub fn put_back(&self, soid: Soid, held: Held) {
        self.files.lock().insert(soid, Slot::Held(Box::new(held)));
    }

    /// A write to `soid`: the server sets its mtime when it takes the new
    /// size, after the held changes' times — so a held mtime from before
    /// the write must not overrule it.
    pub fn written(&self, soid: Soid) {
        if let Some(Slot::Held(h)) = self.files.lock().get_mut(&soid) {
            if h.set.mtime.take().is_some() {
                h.after.mtime = h.before.mtime;
            }
        }
    }

    /// A link of `soid` was made or removed: it now has `nlink`.
    pub fn links(&self, soid: Soid, nlink: u32) {
        if let Some(Slot::Held(h)) = self.files.lock().get_mut(&soid) {
            h.before.nlink = nlink;
            h.after.nlink = nlink;
        }
    }

    /// `a` (a server's reply about a file) with the changes held for it
    /// laid over, if any are: the kernel is never told the attributes
    /// from before a change it was told was made.
    pub fn over(&self, a: &Attr) -> Option<Attr> {
        let files = self.files.lock();
        let Some(Slot::Held(h)) = files.get(&a.soid) else {
            return None;
        };
        Some(Attr {
            perm: h.after.perm,
            uid: h.after.uid,
            gid: h.after.gid,
            atime: h.after.atime,
            mtime: h.after.mtime,
            ctime: h.after.ctime,
            ..a.clone()
        })
    }

    /// The file is gone (its last link removed): nothing to send.
    pub fn forget(&self, soid: Soid) {
        self.files.lock().remove(&soid);
    }

    pub fn len(&self) -> usize {
        self.files.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sextant_types::{FileType, S_ISUID};

    fn file(uid: u32, perm: u32) -> Attr {
        Attr {
            soid: Soid::from_u128(7),
            ftype: FileType::Regular,
            perm,
            uid,
            gid: uid,
            nlink: 1,
            size: 10,
            rdev: 0,
            atime: Nanos(1),
            mtime: Nanos(2),
            ctime: Nanos(3),
            parent: Soid::ROOT,
            no_xattrs: false,
        }
    }

    fn chmod(p: u32) -> SetAttr {
        SetAttr {
            perm: Some(p),
            ..Default::default()
        }
    }

    fn chown(uid: u32, gid: u32) -> SetAttr {
        SetAttr {
            uid: Some(uid),
            gid: Some(gid),
            ..Default::default()
        }
    }

    fn times(t: TimeSet) -> SetAttr {
        SetAttr {
            atime: Some(t),
            mtime: Some(t),
            ..Default::default()
        }
    }

    /// tar as root: owner, mode (with set-user-ID), times — held as one
    /// request whose outcome is the one of the three in a row.
    #[test]
    fn tar_s_three_changes_are_one_request_with_the_same_outcome() {
        let h = HeldChanges::default();
        let f = file(0, 0o600);
        let root = Credentials::root();
        let now = Nanos(100);
        let a = h.hold(f.soid, &root, &chown(1000, 100), Some(f.clone()), now);
        assert_eq!(a.as_ref().map(|a| (a.uid, a.gid)), Some((1000, 100)));
        let a = h.hold(f.soid, &root, &chmod(0o4755), None, now).unwrap();
        assert_eq!(a.perm, 0o4755, "the mode after the chown keeps set-user-ID");
        let a = h
            .hold(f.soid, &root, &times(TimeSet::At(Nanos(50))), None, now)
            .unwrap();
        assert_eq!((a.atime, a.mtime, a.ctime), (Nanos(50), Nanos(50), now));
        let held = h.take(f.soid).unwrap();
        assert_eq!(
            held.set,
            SetAttr {
                perm: Some(0o4755),
                uid: Some(1000),
                gid: Some(100),
                size: None,
                atime: Some(TimeSet::At(Nanos(50))),
                mtime: Some(TimeSet::At(Nanos(50))),
            }
        );
        // What the server computes from the merged request is what the
        // kernel was told.
        let mut server = f.clone();
        apply(&mut server, &root, &held.set, false, now).unwrap();
        assert_eq!(server, held.after);
    }

    /// A chown after a chmod clears the set-ID bits the chmod set; one
    /// request would apply the chown first and keep them: not merged.
    #[test]
    fn a_chown_after_a_set_id_chmod_is_not_merged() {
        let h = HeldChanges::default();
        let f = file(0, 0o600);
        let root = Credentials::root();
        assert!(h
            .hold(f.soid, &root, &chmod(0o4755), Some(f.clone()), Nanos(9))
            .is_some());
        assert_eq!(h.hold(f.soid, &root, &chown(5, 5), None, Nanos(9)), None);
        // A chmod without set-ID bits commutes with the chown.
        let h = HeldChanges::default();
        assert!(h
            .hold(f.soid, &root, &chmod(0o644), Some(f.clone()), Nanos(9))
            .is_some());
        let a = h.hold(f.soid, &root, &chown(5, 5), None, Nanos(9)).unwrap();
        assert_eq!((a.perm, a.uid), (0o644, 5));
    }

    /// What the server would refuse is never held (the caller sends it and
    /// the server answers the error); nor anything without attributes.
    #[test]
    fn what_the_server_refuses_or_cannot_be_computed_is_not_held() {
        let h = HeldChanges::default();
        let f = file(1000, 0o644);
        let other = Credentials::user(2000, 2000);
        assert_eq!(
            h.hold(f.soid, &other, &chmod(0o600), Some(f.clone()), Nanos(9)),
            None
        );
        let owner = Credentials::user(1000, 1000);
        assert_eq!(
            h.hold(f.soid, &owner, &chown(0, 0), Some(f.clone()), Nanos(9)),
            None
        );
        assert_eq!(h.hold(f.soid, &owner, &chmod(0o600), None, Nanos(9)), None);
        let mut wrong = f.clone();
        wrong.soid = Soid::from_u128(8);
        assert_eq!(
            h.hold(f.soid, &owner, &chmod(0o600), Some(wrong), Nanos(9)),
            None
        );
        assert_eq!(
            h.hold(
                f.soid,
                &owner,
                &SetAttr {
                    size: Some(1),
                    ..Default::default()
                },
                Some(f.clone()),
                Nanos(9)
            ),
            None,
            "a size is never held"
        );
        assert!(h.is_empty());
    }

    /// One request carries one identity: a second caller's change is not
    /// merged; nor is anything held while a send is out, and a failed send
    /// is held again as it was.
    #[test]
    fn one_caller_per_request_and_nothing_held_while_sending() {
        let h = HeldChanges::default();
        let f = file(1000, 0o644);
        let owner = Credentials::user(1000, 1000);
        let a = h.hold(f.soid, &owner, &chmod(0o600), Some(f.clone()), Nanos(9));
        assert!(a.is_some());
        assert_eq!(
            h.hold(f.soid, &Credentials::root(), &chmod(0o700), None, Nanos(9)),
            None
        );
        let taken = h.take(f.soid).unwrap();
        assert_eq!(h.attr(f.soid), None);
        assert_eq!(
            h.hold(f.soid, &owner, &chmod(0o640), Some(f.clone()), Nanos(9)),
            None
        );
        h.put_back(f.soid, taken.clone());
        assert_eq!(h.attr(f.soid), a);
        assert_eq!(h.take(f.soid), Some(taken));
        h.sent(f.soid);
        assert!(h.is_empty());
    }

    /// The owner's "now" is held as the instant the kernel was told; a
    /// writer who is not the owner may only set "now", which stays "now".
    #[test]
    fn now_is_held_as_an_instant_for_the_owner_only() {
        let h = HeldChanges::default();
        let f = file(1000, 0o666);
        let owner = Credentials::user(1000, 1000);
        h.hold(
            f.soid,
            &owner,
            &times(TimeSet::Now),
            Some(f.clone()),
            Nanos(77),
        );
        assert_eq!(
            h.take(f.soid).unwrap().set.mtime,
            Some(TimeSet::At(Nanos(77)))
        );
        h.sent(f.soid);
        let writer = Credentials::user(2000, 2000);
        let a = h.hold(
            f.soid,
            &writer,
            &times(TimeSet::Now),
            Some(f.clone()),
            Nanos(78),
        );
        assert_eq!(a.map(|a| a.mtime), Some(Nanos(78)));
        assert_eq!(h.take(f.soid).unwrap().set.mtime, Some(TimeSet::Now));
    }

    /// A write after a held mtime: the server's size update sets the mtime
    /// after the held times, so the held mtime goes; link counts follow;
    /// a server reply is shown with the held changes over it.
    #[test]
    fn writes_links_and_replies_follow_the_held_changes() {
        let h = HeldChanges::default();
        let f = file(0, 0o644 | S_ISUID);
        let root = Credentials::root();
        h.hold(
            f.soid,
            &root,
            &times(TimeSet::At(Nanos(5))),
            Some(f.clone()),
            Nanos(9),
        );
        h.written(f.soid);
        let a = h.attr(f.soid).unwrap();
        assert_eq!((a.atime, a.mtime), (Nanos(5), f.mtime));
        let taken = h.take(f.soid).unwrap();
        assert_eq!(taken.set.mtime, None);
        h.put_back(f.soid, taken);
        h.links(f.soid, 3);
        assert_eq!(h.attr(f.soid).map(|a| a.nlink), Some(3));
        let reply = Attr {
            size: 99,
            ..f.clone()
        };
        let shown = h.over(&reply).unwrap();
        assert_eq!((shown.size, shown.atime), (99, Nanos(5)));
        h.forget(f.soid);
        assert_eq!(h.over(&reply), None);
    }
}
