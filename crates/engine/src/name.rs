//! File names as tables store them.
//!
//! Hand-written rather than taken from a crate: POSIX names are bytes, the
//! small-string crates hold UTF-8, and `smallvec` inlines only 16 bytes in
//! the same 24. Most names are short, and every inode and entry holds one,
//! so not allocating them is a large part of the memory per inode.
//!
//! Invariant: an inline name is at most [`INLINE`] bytes; `len` says how
//! many of `bytes` are the name. The serialized form is that of a byte
//! string (length, then bytes), the same as `Box<[u8]>`'s in postcard.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::ops::Deref;

/// Names up to this many bytes are stored inline.
pub const INLINE: usize = 22;

/// A file name: inline up to [`INLINE`] bytes, else on the heap. 24 bytes.
#[derive(Clone)]
pub struct Name(Repr);

#[derive(Clone)]
enum Repr {
    Inline(u8, [u8; INLINE]),
    Heap(Box<[u8]>),
}

impl Name {
    pub fn new(bytes: &[u8]) -> Name {
        if bytes.len() <= INLINE {
            let mut inline = [0u8; INLINE];
            inline[..bytes.len()].copy_from_slice(bytes);
            Name(Repr::Inline(bytes.len() as u8, inline))
        } else {
            Name(Repr::Heap(Box::from(bytes)))
        }
    }

    /// Bytes on the heap (0 for inline names), for memory accounting.
    pub fn heap_bytes(&self) -> usize {
        match &self.0 {
            Repr::Inline(..) => 0,
            Repr::Heap(b) => b.len(),
        }
    }
}

impl Deref for Name {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match &self.0 {
            Repr::Inline(len, bytes) => &bytes[..*len as usize],
            Repr::Heap(b) => b,
        }
    }
}

impl From<&[u8]> for Name {
    fn from(b: &[u8]) -> Name {
        Name::new(b)
    }
}

impl From<Box<[u8]>> for Name {
    fn from(b: Box<[u8]>) -> Name {
        Name::new(&b)
    }
}

impl From<Vec<u8>> for Name {
    fn from(b: Vec<u8>) -> Name {
        Name::new(&b)
    }
}

impl From<&Name> for Box<[u8]> {
    fn from(n: &Name) -> Box<[u8]> {
        Box::from(&**n)
    }
}

impl PartialEq for Name {
    fn eq(&self, other: &Name) -> bool {
        **self == **other
    }
}

impl Eq for Name {}

impl PartialEq<[u8]> for Name {
    fn eq(&self, other: &[u8]) -> bool {
        **self == *other
    }
}

impl fmt::Debug for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(self))
    }
}

impl Serialize for Name {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(self)
    }
}

impl<'de> Deserialize<'de> for Name {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Name, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = Name;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a file name (bytes)")
            }
            fn visit_bytes<E>(self, v: &[u8]) -> Result<Name, E> {
                Ok(Name::new(v))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Name, A::Error> {
                let mut v = Vec::new();
                while let Some(b) = seq.next_element::<u8>()? {
                    v.push(b);
                }
                Ok(Name::from(v))
            }
        }
        d.deserialize_bytes(Visitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn is_24_bytes_and_round_trips() {
        assert_eq!(std::mem::size_of::<Name>(), 24);
        for len in [0usize, 1, 22, 23, 255] {
            let bytes: Vec<u8> = (0..len).map(|i| i as u8).collect();
            let n = Name::new(&bytes);
            assert_eq!(&*n, &bytes[..]);
            assert_eq!(n.heap_bytes(), if len > INLINE { len } else { 0 });
            let enc = postcard::to_stdvec(&n).unwrap();
            // The same bytes as a Box<[u8]>: formats on disk do not change.
            let boxed: Box<[u8]> = bytes.clone().into_boxed_slice();
            assert_eq!(enc, postcard::to_stdvec(&boxed).unwrap());
            let back: Name = postcard::from_bytes(&enc).unwrap();
            assert_eq!(back, n);
        }
    }
}
