//! `IndexSet`: a fixed-size set of post-DFS indices, stored as 64-bit words.
//!
//! Every binary operation works a word at a time. The ordering is TVM's: scanning from index 0,
//! at the first index where two sets differ, the set that contains it is the smaller one (so a
//! superset sorts before the sets it shares a prefix with).

use std::cmp::Ordering;
use std::fmt;

/// A set of indices in `0..len`.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct IndexSet {
    len: u32,
    words: Vec<u64>,
}

impl IndexSet {
    /// The empty set over `0..len`.
    pub fn new(len: usize) -> IndexSet {
        IndexSet {
            len: len as u32,
            words: vec![0; len.div_ceil(64)],
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

    /// The universe size.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Whether the set has no members.
    pub fn is_empty(&self) -> bool {
        self.words.iter().all(|&w| w == 0)
    }

    /// Adds an index (ignored if out of range).
    pub fn insert(&mut self, i: usize) {
        if i < self.len as usize {
            self.words[i / 64] |= 1 << (i % 64);
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
        self.words.iter().map(|w| w.count_ones() as usize).sum()
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
        for (a, b) in self.words.iter_mut().zip(&other.words) {
            *a |= b;
        }
    }

    fn zip(&self, other: &IndexSet, f: impl Fn(u64, u64) -> u64) -> IndexSet {
        let n = self.words.len().max(other.words.len());
        let get = |s: &IndexSet, i: usize| s.words.get(i).copied().unwrap_or(0);
        IndexSet {
            len: self.len.max(other.len),
            words: (0..n).map(|i| f(get(self, i), get(other, i))).collect(),
        }
    }

    /// Whether the sets share a member.
    pub fn intersects(&self, other: &IndexSet) -> bool {
        self.words.iter().zip(&other.words).any(|(a, b)| a & b != 0)
    }

    /// Whether the sets share no member.
    pub fn is_disjoint(&self, other: &IndexSet) -> bool {
        !self.intersects(other)
    }

    /// Whether every member of `self` is in `other`.
    pub fn is_subset(&self, other: &IndexSet) -> bool {
        self.words
            .iter()
            .enumerate()
            .all(|(i, a)| a & !other.words.get(i).copied().unwrap_or(0) == 0)
    }

    /// The smallest member.
    pub fn first(&self) -> Option<usize> {
        self.words
            .iter()
            .enumerate()
            .find(|(_, w)| **w != 0)
            .map(|(i, w)| i * 64 + w.trailing_zeros() as usize)
    }

    /// The largest member.
    pub fn last(&self) -> Option<usize> {
        self.words
            .iter()
            .enumerate()
            .rev()
            .find(|(_, w)| **w != 0)
            .map(|(i, w)| i * 64 + 63 - w.leading_zeros() as usize)
    }

    /// The members in increasing order.
    pub fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.words.iter().enumerate().flat_map(|(i, &w)| {
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
