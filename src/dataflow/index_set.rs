//! `IndexSet`: a fixed-size set of post-DFS indices, stored as 64-bit words.
//!
//! Every binary operation works a word at a time. The ordering is TVM's: scanning from index 0,
//! at the first index where two sets differ, the set that contains it is the smaller one (so a
//! superset sorts before the sets it shares a prefix with).

use std::cmp::Ordering;
use std::fmt;

/// A set of indices in `0..len`.
///
/// Besides the words, the set keeps the range `lo..hi` of words that may be non-zero, so that
/// operations on small, local sets (the common case: candidates cover a few neighbouring nodes)
/// touch one or two words instead of all of them.
#[derive(Clone)]
pub struct IndexSet {
    len: u32,
    words: Vec<u64>,
    /// Words outside `lo..hi` are zero.
    lo: u32,
    hi: u32,
}

impl PartialEq for IndexSet {
    fn eq(&self, other: &IndexSet) -> bool {
        self.len == other.len && self.words == other.words
    }
}

impl Eq for IndexSet {}

impl std::hash::Hash for IndexSet {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.len.hash(state);
        for i in self.lo..self.hi {
            let w = self.words[i as usize];
            if w != 0 {
                i.hash(state);
                w.hash(state);
            }
        }
    }
}

impl IndexSet {
    /// The empty set over `0..len`.
    pub fn new(len: usize) -> IndexSet {
        let n = len.div_ceil(64);
        IndexSet {
            len: len as u32,
            words: vec![0; n],
            lo: n as u32,
            hi: 0,
        }
    }

    /// Recomputes `lo..hi` from the words.
    fn trim(&mut self) {
        let n = self.words.len();
        let lo = self.words.iter().position(|&w| w != 0).unwrap_or(n);
        let hi = self
            .words
            .iter()
            .rposition(|&w| w != 0)
            .map_or(0, |i| i + 1);
        self.lo = lo as u32;
        self.hi = hi as u32;
    }

    /// The set of the given indices (all must be `< len`; out-of-range ones are ignored).
    pub fn from_indices(len: usize, indices: impl IntoIterator<Item = usize>) -> IndexSet {
        let mut s = IndexSet::new(len);
        for i in indices {
            s.insert(i);
        }
        s
    }

    /// The universe size.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Whether the set has no members.
    pub fn is_empty(&self) -> bool {
        self.words[self.range()].iter().all(|&w| w == 0)
    }

    fn range(&self) -> std::ops::Range<usize> {
        (self.lo as usize).min(self.hi as usize)..self.hi as usize
    }

    /// Adds an index (ignored if out of range).
    pub fn insert(&mut self, i: usize) {
        if i < self.len as usize {
            let w = i / 64;
            self.words[w] |= 1 << (i % 64);
            self.lo = self.lo.min(w as u32);
            self.hi = self.hi.max(w as u32 + 1);
        }
    }

    /// Removes an index.
    pub fn remove(&mut self, i: usize) {
        if i < self.len as usize {
            self.words[i / 64] &= !(1 << (i % 64));
        }
    }

    /// Whether `i` is a member.
    pub fn contains(&self, i: usize) -> bool {
        i < self.len as usize && self.words[i / 64] & (1 << (i % 64)) != 0
    }

    /// Number of members.
    pub fn count(&self) -> usize {
        self.words[self.range()]
            .iter()
            .map(|w| w.count_ones() as usize)
            .sum()
    }

    /// `self ∪ other`.
    pub fn union(&self, other: &IndexSet) -> IndexSet {
        self.zip(other, |a, b| a | b)
    }

    /// `self ∩ other`.
    pub fn intersection(&self, other: &IndexSet) -> IndexSet {
        self.zip(other, |a, b| a & b)
    }

    /// `self − other`.
    pub fn difference(&self, other: &IndexSet) -> IndexSet {
        self.zip(other, |a, b| a & !b)
    }

    /// Adds every member of `other`.
    pub fn union_with(&mut self, other: &IndexSet) {
        let r = other.range();
        for i in r.clone() {
            if let Some(a) = self.words.get_mut(i) {
                *a |= other.words[i];
            }
        }
        if !r.is_empty() {
            self.lo = self.lo.min(r.start as u32);
            self.hi = self.hi.max((r.end as u32).min(self.words.len() as u32));
        }
    }

    fn zip(&self, other: &IndexSet, f: impl Fn(u64, u64) -> u64) -> IndexSet {
        let n = self.words.len().max(other.words.len());
        let get = |s: &IndexSet, i: usize| s.words.get(i).copied().unwrap_or(0);
        let mut out = IndexSet {
            len: self.len.max(other.len),
            words: vec![0; n],
            lo: 0,
            hi: 0,
        };
        let lo = self.lo.min(other.lo) as usize;
        let hi = (self.hi.max(other.hi) as usize).min(n);
        for i in lo..hi {
            out.words[i] = f(get(self, i), get(other, i));
        }
        out.trim();
        out
    }

    /// Whether the sets share a member.
    pub fn intersects(&self, other: &IndexSet) -> bool {
        let lo = self.lo.max(other.lo) as usize;
        let hi = (self.hi.min(other.hi) as usize)
            .min(self.words.len())
            .min(other.words.len());
        (lo..hi).any(|i| self.words[i] & other.words[i] != 0)
    }

    /// Whether the sets share no member.
    pub fn is_disjoint(&self, other: &IndexSet) -> bool {
        !self.intersects(other)
    }

    /// Whether every member of `self` is in `other`.
    pub fn is_subset(&self, other: &IndexSet) -> bool {
        self.range()
            .all(|i| self.words[i] & !other.words.get(i).copied().unwrap_or(0) == 0)
    }

    /// The smallest member.
    pub fn first(&self) -> Option<usize> {
        self.range()
            .find(|&i| self.words[i] != 0)
            .map(|i| i * 64 + self.words[i].trailing_zeros() as usize)
    }

    /// The largest member.
    pub fn last(&self) -> Option<usize> {
        self.range()
            .rev()
            .find(|&i| self.words[i] != 0)
            .map(|i| i * 64 + 63 - self.words[i].leading_zeros() as usize)
    }

    /// The members in increasing order.
    pub fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        let r = self.range();
        let start = r.start;
        self.words[r].iter().enumerate().flat_map(move |(k, &w)| {
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

    /// The raw words (for hashing and fingerprints).
    pub fn words(&self) -> &[u64] {
        &self.words
    }

    /// The range of word indices that may be non-zero.
    pub fn word_range(&self) -> std::ops::Range<usize> {
        self.range()
    }
}

impl Ord for IndexSet {
    /// TVM's order: at the first differing index, the set containing it is smaller.
    fn cmp(&self, other: &IndexSet) -> Ordering {
        let n = self.words.len().max(other.words.len());
        for i in 0..n {
            let a = self.words.get(i).copied().unwrap_or(0);
            let b = other.words.get(i).copied().unwrap_or(0);
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
