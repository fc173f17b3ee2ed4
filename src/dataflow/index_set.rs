//! `IndexSet`: a fixed-size set of post-DFS indices, stored as 64-bit words.
//!
//! Every binary operation works a word at a time. The ordering is TVM's: scanning from index 0,
//! at the first index where two sets differ, the set that contains it is the smaller one (so a
//! superset sorts before the sets it shares a prefix with).

use std::cmp::Ordering;
use std::fmt;

/// A set of indices in `0..len`.
///
/// Only the words from the first to the last non-zero one are stored, together with the index
/// of the first, so that the small, local sets candidates are (a few neighbouring nodes) cost a
/// word or two whatever the size of the graph, and operations touch only the words in use.
#[derive(Clone)]
pub struct IndexSet {
    len: u32,
    /// Index of the word `words[0]`; zero when the set is empty.
    lo: u32,
    /// The words `lo..lo + words.len()`; the first and the last are non-zero.
    words: Vec<u64>,
}

impl PartialEq for IndexSet {
    fn eq(&self, other: &IndexSet) -> bool {
        self.len == other.len && self.lo == other.lo && self.words == other.words
    }
}

impl Eq for IndexSet {}

impl std::hash::Hash for IndexSet {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.len.hash(state);
        for (k, &w) in self.words.iter().enumerate() {
            if w != 0 {
                (self.lo + k as u32).hash(state);
                w.hash(state);
            }
        }
    }
}

impl IndexSet {
    /// The empty set over `0..len`.
    pub fn new(len: usize) -> IndexSet {
        IndexSet {
            len: len as u32,
            lo: 0,
            words: Vec::new(),
        }
    }

    /// The set over `0..len` with the given words starting at word `lo`, trimmed.
    fn from_words(len: u32, lo: usize, mut words: Vec<u64>) -> IndexSet {
        let end = words.iter().rposition(|&w| w != 0).map_or(0, |i| i + 1);
        words.truncate(end);
        let start = words.iter().position(|&w| w != 0).unwrap_or(words.len());
        if start > 0 {
            words.drain(..start);
        }
        IndexSet {
            len,
            lo: if words.is_empty() {
                0
            } else {
                (lo + start) as u32
            },
            words,
        }
    }

    /// The set of the given indices (all must be `< len`; out-of-range ones are ignored).
    pub fn from_indices(len: usize, indices: impl IntoIterator<Item = usize>) -> IndexSet {
        let mut s = IndexSet::new(len);
        for i in indices {
            s.insert(i);
        }
        s
    }

    /// The set of the given indices, in any order (all must be `< len`; out-of-range ones are
    /// ignored), allocated once.
    pub fn from_slice(len: usize, indices: &[usize]) -> IndexSet {
        let mut lo = usize::MAX;
        let mut hi = 0;
        for &i in indices {
            if i < len {
                lo = lo.min(i / 64);
                hi = hi.max(i / 64 + 1);
            }
        }
        if hi == 0 {
            return IndexSet::new(len);
        }
        let mut words = vec![0; hi - lo];
        for &i in indices {
            if i < len {
                words[i / 64 - lo] |= 1 << (i % 64);
            }
        }
        IndexSet {
            len: len as u32,
            lo: lo as u32,
            words,
        }
    }

    /// The set of the given indices, in increasing order (all must be `< len`).
    pub fn from_sorted(len: usize, indices: &[usize]) -> IndexSet {
        let (Some(&first), Some(&last)) = (indices.first(), indices.last()) else {
            return IndexSet::new(len);
        };
        debug_assert!(indices.windows(2).all(|w| w[0] <= w[1]) && last < len);
        let lo = first / 64;
        let mut words = vec![0; last / 64 + 1 - lo];
        for &i in indices {
            words[i / 64 - lo] |= 1 << (i % 64);
        }
        IndexSet {
            len: len as u32,
            lo: lo as u32,
            words,
        }
    }

    /// The universe size.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Whether the set has no members.
    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }

    /// The word at index `i` (zero outside the stored ones).
    #[inline]
    pub fn word(&self, i: usize) -> u64 {
        i.checked_sub(self.lo as usize)
            .and_then(|k| self.words.get(k))
            .copied()
            .unwrap_or(0)
    }

    /// Adds an index (ignored if out of range).
    pub fn insert(&mut self, i: usize) {
        if i >= self.len as usize {
            return;
        }
        let w = i / 64;
        let bit = 1 << (i % 64);
        let lo = self.lo as usize;
        if self.words.is_empty() {
            self.lo = w as u32;
            self.words.push(bit);
        } else if w < lo {
            self.words.splice(0..0, std::iter::repeat_n(0, lo - w));
            self.lo = w as u32;
            self.words[0] |= bit;
        } else {
            if w >= lo + self.words.len() {
                self.words.resize(w - lo + 1, 0);
            }
            self.words[w - lo] |= bit;
        }
    }

    /// Removes an index.
    pub fn remove(&mut self, i: usize) {
        if !self.contains(i) {
            return;
        }
        let k = i / 64 - self.lo as usize;
        self.words[k] &= !(1 << (i % 64));
        if self.words[k] == 0 && (k == 0 || k + 1 == self.words.len()) {
            self.trim();
        }
    }

    /// Whether `i` is a member.
    #[inline]
    pub fn contains(&self, i: usize) -> bool {
        i < self.len as usize && self.word(i / 64) & (1 << (i % 64)) != 0
    }

    /// Number of members.
    pub fn count(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// `self ∪ other`.
    pub fn union(&self, other: &IndexSet) -> IndexSet {
        if other.is_empty() {
            let mut s = self.clone();
            s.len = self.len.max(other.len);
            return s;
        }
        if self.is_empty() {
            let mut s = other.clone();
            s.len = self.len.max(other.len);
            return s;
        }
        let lo = self.lo.min(other.lo) as usize;
        let hi = self.word_range().end.max(other.word_range().end);
        let words = (lo..hi).map(|i| self.word(i) | other.word(i)).collect();
        IndexSet {
            len: self.len.max(other.len),
            lo: lo as u32,
            words,
        }
    }

    /// `self ∩ other`.
    pub fn intersection(&self, other: &IndexSet) -> IndexSet {
        let lo = self.lo.max(other.lo) as usize;
        let hi = self.word_range().end.min(other.word_range().end);
        let words = (lo..hi.max(lo))
            .map(|i| self.word(i) & other.word(i))
            .collect();
        IndexSet::from_words(self.len.max(other.len), lo, words)
    }

    /// `self − other`.
    pub fn difference(&self, other: &IndexSet) -> IndexSet {
        let r = self.word_range();
        let words = r.clone().map(|i| self.word(i) & !other.word(i)).collect();
        IndexSet::from_words(self.len.max(other.len), r.start, words)
    }

    /// Adds every member of `other`.
    pub fn union_with(&mut self, other: &IndexSet) {
        if other.is_empty() {
            return;
        }
        let nw = (self.len as usize).div_ceil(64);
        let r = other.word_range();
        let r = r.start..r.end.min(nw);
        if r.is_empty() {
            return;
        }
        let clipped = r.end < other.word_range().end;
        if self.is_empty() {
            self.lo = r.start as u32;
            self.words
                .extend_from_slice(&other.words[..r.end - r.start]);
            self.trim();
            return;
        }
        let lo = self.lo as usize;
        if r.start < lo {
            self.words
                .splice(0..0, std::iter::repeat_n(0, lo - r.start));
            self.lo = r.start as u32;
        }
        let lo = self.lo as usize;
        if r.end > lo + self.words.len() {
            self.words.resize(r.end - lo, 0);
        }
        for i in r {
            self.words[i - lo] |= other.word(i);
        }
        if clipped {
            self.trim();
        }
    }

    /// Restores the invariant: no zero word first or last.
    fn trim(&mut self) {
        let words = std::mem::take(&mut self.words);
        *self = IndexSet::from_words(self.len, self.lo as usize, words);
    }

    /// Whether the sets share a member.
    #[inline]
    pub fn intersects(&self, other: &IndexSet) -> bool {
        let lo = self.lo.max(other.lo) as usize;
        let hi = self.word_range().end.min(other.word_range().end);
        (lo..hi).any(|i| self.words[i - self.lo as usize] & other.words[i - other.lo as usize] != 0)
    }

    /// Whether the sets share no member.
    #[inline]
    pub fn is_disjoint(&self, other: &IndexSet) -> bool {
        !self.intersects(other)
    }

    /// Whether every member of `self` is in `other`.
    pub fn is_subset(&self, other: &IndexSet) -> bool {
        self.word_range()
            .all(|i| self.word(i) & !other.word(i) == 0)
    }

    /// The smallest member.
    pub fn first(&self) -> Option<usize> {
        let w = *self.words.first()?;
        Some(self.lo as usize * 64 + w.trailing_zeros() as usize)
    }

    /// The largest member.
    pub fn last(&self) -> Option<usize> {
        let w = *self.words.last()?;
        Some((self.lo as usize + self.words.len()) * 64 - 1 - w.leading_zeros() as usize)
    }

    /// The members in increasing order.
    pub fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        let start = self.lo as usize;
        self.words.iter().enumerate().flat_map(move |(k, &w)| {
            let i = start + k;
            let mut w = w;
            std::iter::from_fn(move || {
                if w == 0 {
                    return None;
                }
                let b = w.trailing_zeros() as usize;
                w &= w - 1;
                Some(i * 64 + b)
            })
        })
    }

    /// The stored words: those of [`IndexSet::word_range`], the first and the last non-zero.
    pub fn words(&self) -> &[u64] {
        &self.words
    }

    /// The range of word indices that may be non-zero.
    pub fn word_range(&self) -> std::ops::Range<usize> {
        self.lo as usize..self.lo as usize + self.words.len()
    }
}

impl Ord for IndexSet {
    /// TVM's order: at the first differing index, the set containing it is smaller.
    fn cmp(&self, other: &IndexSet) -> Ordering {
        let lo = self.lo.min(other.lo) as usize;
        let hi = self.word_range().end.max(other.word_range().end);
        for i in lo..hi {
            let a = self.word(i);
            let b = other.word(i);
            if a != b {
                let first = (a ^ b).trailing_zeros();
                return if a & (1 << first) != 0 {
                    Ordering::Less
                } else {
                    Ordering::Greater
                };
            }
        }
        self.len.cmp(&other.len)
    }
}

impl PartialOrd for IndexSet {
    fn partial_cmp(&self, other: &IndexSet) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// `{a,b..c,…}`: runs of three or more consecutive members print as `a..c`.
impl fmt::Display for IndexSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let members: Vec<usize> = self.iter().collect();
        f.write_str("{")?;
        let mut i = 0;
        let mut first = true;
        while i < members.len() {
            let mut j = i;
            while j + 1 < members.len() && members[j + 1] == members[j] + 1 {
                j += 1;
            }
            if !first {
                f.write_str(",")?;
            }
            first = false;
            if j - i >= 2 {
                write!(f, "{}..{}", members[i], members[j])?;
            } else {
                write!(f, "{}", members[i])?;
                if j > i {
                    write!(f, ",{}", members[j])?;
                }
            }
            i = j + 1;
        }
        f.write_str("}")
    }
}

impl fmt::Debug for IndexSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(xs: &[usize]) -> IndexSet {
        IndexSet::from_indices(200, xs.iter().copied())
    }

    #[test]
    fn basic_operations() {
        let a = set(&[1, 2, 70, 130]);
        let b = set(&[2, 3, 130]);
        assert_eq!(a.union(&b), set(&[1, 2, 3, 70, 130]));
        assert_eq!(a.intersection(&b), set(&[2, 130]));
        assert_eq!(a.difference(&b), set(&[1, 70]));
        assert!(a.intersects(&b));
        assert!(set(&[2, 130]).is_subset(&a));
        assert!(!b.is_subset(&a));
        assert_eq!(a.first(), Some(1));
        assert_eq!(a.last(), Some(130));
        assert_eq!(a.count(), 4);
        assert_eq!(a.iter().collect::<Vec<_>>(), [1, 2, 70, 130]);
        assert!(IndexSet::new(5).is_empty());
        assert_eq!(IndexSet::new(5).first(), None);
    }

    #[test]
    fn only_the_words_in_use_are_stored() {
        let mut a = set(&[130]);
        assert_eq!(a.word_range(), 2..3);
        a.insert(3);
        assert_eq!(a.word_range(), 0..3);
        assert_eq!(a.iter().collect::<Vec<_>>(), [3, 130]);
        a.remove(3);
        assert_eq!(a.word_range(), 2..3);
        assert_eq!(a, set(&[130]));
        a.remove(130);
        assert!(a.is_empty());
        assert_eq!(a, set(&[]));
        let mut b = set(&[70]);
        b.union_with(&set(&[1, 190]));
        assert_eq!(b, set(&[1, 70, 190]));
        let mut small = IndexSet::from_indices(64, [5]);
        small.union_with(&set(&[6, 130]));
        assert_eq!(small.iter().collect::<Vec<_>>(), [5, 6]);
        assert_eq!(small.word_range(), 0..1);
        assert_eq!(IndexSet::from_slice(200, &[130, 2, 130]), set(&[2, 130]));
        assert_eq!(set(&[1, 130]).intersection(&set(&[130, 131])), set(&[130]));
        assert_eq!(set(&[1, 130]).difference(&set(&[130])).word_range(), 0..1);
        assert!(!set(&[1]).intersects(&set(&[130])));
        assert_eq!(set(&[64, 130]).first(), Some(64));
        assert_eq!(set(&[64, 130]).last(), Some(130));
    }

    #[test]
    fn tvm_order_puts_supersets_first() {
        assert!(set(&[2, 3]) < set(&[2]));
        assert!(set(&[2, 3]) < set(&[2, 4]));
        assert!(set(&[1]) < set(&[2]));
        assert!(set(&[64]) < set(&[65]));
    }

    #[test]
    fn display_compresses_runs() {
        assert_eq!(set(&[1, 2, 3, 5, 7, 8]).to_string(), "{1..3,5,7,8}");
        assert_eq!(set(&[]).to_string(), "{}");
        assert_eq!(set(&[4]).to_string(), "{4}");
    }
}
