//! Inode numbers through the mount stay the same for as long as a file
//! exists, also after the kernel forgets its inodes. A test binary of its
//! own: it drops the whole machine's dentry and inode caches, which would
//! disturb the request counts other mount tests assert (cargo runs test
//! binaries one at a time).

use std::os::unix::fs::MetadataExt;

mod common;

use common::{fuse_available, sh, Mounted};

/// A file's inode number is stable for as long as it exists, also after
/// the kernel forgets its inode (here: dropped caches, as memory pressure
/// or an invalidation would): tar, du and rsync -H detect hard links by
/// it, and `find -inum` or a later walk compare it.
#[test]
fn inode_numbers_stay_when_the_kernel_forgets_the_inodes() {
    if !fuse_available() {
        return;
    }
    let m = Mounted::start();
    sh(&m.mnt, "mkdir -p a/b && echo x > a/b/f && ln a/b/f a/g");
    let inos = || -> Vec<u64> {
        ["a", "a/b", "a/b/f", "a/g"]
            .iter()
            .map(|p| std::fs::symlink_metadata(m.p(p)).unwrap().ino())
            .collect()
    };
    let before = inos();
    assert_eq!(before[2], before[3], "hard links share it");
    // Drops unused dentries and inodes: the kernel sends FORGETs.
    if std::fs::write("/proc/sys/vm/drop_caches", "2").is_err() {
        eprintln!("SKIPPED: cannot write /proc/sys/vm/drop_caches");
        return;
    }
    assert_eq!(
        inos(),
        before,
        "the same numbers after the kernel forgot them"
    );
    // A file removed and another made: a number is never handed out again.
    sh(&m.mnt, "rm a/b/f a/g && echo y > a/h");
    let h = std::fs::symlink_metadata(m.p("a/h")).unwrap().ino();
    assert!(!before.contains(&h), "{h} reused");
}
