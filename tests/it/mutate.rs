//! The byte-level edits shared by the mutation fuzzers of the Relay front end
//! (`robustness.rs`) and of the rules language (`robustness_dsl.rs`). Each fuzzer supplies its
//! corpus, its dictionary of interesting strings and the weight of each kind of edit.

use proptest::prelude::*;
use proptest::sample::Index;

/// One edit of a byte string. Positions are [`Index`]es, scaled to the current length.
#[derive(Clone, Debug)]
pub enum ByteEdit {
    /// Flips one bit of one byte.
    FlipBit(Index, u8),
    /// Overwrites one byte with an arbitrary byte.
    ReplaceByte(Index, u8),
    /// Inserts arbitrary bytes.
    InsertBytes(Index, Vec<u8>),
    /// Inserts one of the fuzzer's interesting strings.
    InsertInteresting(Index, Index),
    /// Overwrites bytes with one of the fuzzer's interesting strings.
    ReplaceInteresting(Index, Index),
    /// Deletes a run of bytes.
    Delete(Index, u16),
    /// Duplicates a run of bytes in place.
    Duplicate(Index, u16),
    /// Inserts a slice of another corpus file.
    Splice {
        at: Index,
        file: Index,
        from: Index,
        len: u16,
    },
    /// Cuts the text.
    Truncate(Index),
}

/// Relative weights of the edits, in the order of [`ByteEdit`]'s variants.
pub struct Weights {
    pub flip_bit: u32,
    pub replace_byte: u32,
    pub insert_bytes: u32,
    pub insert_interesting: u32,
    pub replace_interesting: u32,
    pub delete: u32,
    pub duplicate: u32,
    pub splice: u32,
    pub truncate: u32,
}

impl Weights {
    /// The sum of the weights (for nesting this strategy in a larger `prop_oneof!`).
    pub fn total(&self) -> u32 {
        self.flip_bit
            + self.replace_byte
            + self.insert_bytes
            + self.insert_interesting
            + self.replace_interesting
            + self.delete
            + self.duplicate
            + self.splice
            + self.truncate
    }
}

/// Random edits with the given weights.
pub fn byte_edit(w: &Weights) -> impl Strategy<Value = ByteEdit> {
    prop_oneof![
        w.flip_bit => (any::<Index>(), 0u8..8).prop_map(|(i, b)| ByteEdit::FlipBit(i, b)),
        w.replace_byte => (any::<Index>(), any::<u8>()).prop_map(|(i, b)| ByteEdit::ReplaceByte(i, b)),
        w.insert_bytes => (any::<Index>(), prop::collection::vec(any::<u8>(), 1..8))
            .prop_map(|(i, b)| ByteEdit::InsertBytes(i, b)),
        w.insert_interesting => (any::<Index>(), any::<Index>())
            .prop_map(|(i, s)| ByteEdit::InsertInteresting(i, s)),
        w.replace_interesting => (any::<Index>(), any::<Index>())
            .prop_map(|(i, s)| ByteEdit::ReplaceInteresting(i, s)),
        w.delete => (any::<Index>(), 1u16..64).prop_map(|(i, n)| ByteEdit::Delete(i, n)),
        w.duplicate => (any::<Index>(), 1u16..256).prop_map(|(i, n)| ByteEdit::Duplicate(i, n)),
        w.splice => (any::<Index>(), any::<Index>(), any::<Index>(), 1u16..512)
            .prop_map(|(at, file, from, len)| ByteEdit::Splice { at, file, from, len }),
        w.truncate => any::<Index>().prop_map(ByteEdit::Truncate),
    ]
}

/// A position in `0..=len`.
pub fn pos(i: &Index, len: usize) -> usize {
    i.index(len + 1)
}

/// Applies one edit; `interesting` and `corpus` are the fuzzer's dictionary and files.
pub fn apply_byte_edit<S: AsRef<[u8]>>(
    bytes: &mut Vec<u8>,
    e: &ByteEdit,
    interesting: &[S],
    corpus: &[(String, String)],
) {
    let len = bytes.len();
    match e {
        ByteEdit::FlipBit(i, b) => {
            if len > 0 {
                bytes[i.index(len)] ^= 1 << b;
            }
        }
        ByteEdit::ReplaceByte(i, b) => {
            if len > 0 {
                bytes[i.index(len)] = *b;
            }
        }
        ByteEdit::InsertBytes(i, b) => {
            let p = pos(i, len);
            bytes.splice(p..p, b.iter().copied());
        }
        ByteEdit::InsertInteresting(i, s) => {
            let p = pos(i, len);
            bytes.splice(p..p, s.get(interesting).as_ref().iter().copied());
        }
        ByteEdit::ReplaceInteresting(i, s) => {
            let s = s.get(interesting).as_ref();
            let p = pos(i, len);
            let end = (p + s.len()).min(len);
            bytes.splice(p..end, s.iter().copied());
        }
        ByteEdit::Delete(i, n) => {
            let p = pos(i, len);
            let end = (p + *n as usize).min(len);
            bytes.drain(p..end);
        }
        ByteEdit::Duplicate(i, n) => {
            let p = pos(i, len);
            let end = (p + *n as usize).min(len);
            let run = bytes[p..end].to_vec();
            bytes.splice(p..p, run);
        }
        ByteEdit::Splice {
            at,
            file,
            from,
            len: n,
        } => {
            let other = file.get(corpus).1.as_bytes();
            let s = pos(from, other.len());
            let e = (s + *n as usize).min(other.len());
            let p = pos(at, len);
            bytes.splice(p..p, other[s..e].iter().copied());
        }
        ByteEdit::Truncate(i) => bytes.truncate(pos(i, len)),
    }
}

/// Applies edits to one corpus file with `apply`; invalid UTF-8 becomes U+FFFD. Returns the
/// file's name and the edited text.
pub fn mutate<M>(
    corpus: &[(String, String)],
    file: &Index,
    muts: &[M],
    apply: impl Fn(&mut Vec<u8>, &M),
) -> (String, String) {
    let (name, text) = file.get(corpus);
    let mut bytes = text.as_bytes().to_vec();
    for m in muts {
        apply(&mut bytes, m);
    }
    (name.clone(), String::from_utf8_lossy(&bytes).into_owned())
}
