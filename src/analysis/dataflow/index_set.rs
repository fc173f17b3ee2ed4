//! `IndexSet`: a fixed-size set of post-DFS indices, stored as 64-bit words.
//!
//! Every binary operation works a word at a time. The ordering is TVM's: scanning from index 0,
//! at the first index where two sets differ, the set that contains it is the smaller one (so a
//! superset sorts before the sets it shares a prefix with).

use smallvec::SmallVec;
use std::cmp::Ordering;
use std::fmt;

/// The stored words of a set: one word is kept inline (most boundary sets and many inside sets
/// fit in one), more on the heap.
type Words = SmallVec<[(u32, u64); 1]>;

/// A set of indices in `0..len`.
///
/// Only the non-zero words are stored, each with its index, in increasing order, so that a set
/// costs a few words and operations touch only the words in use, whatever the size of the graph
/// and however far apart its members are (a candidate of one layer of a model may include a node
/// numbered at the very end of the graph, such as the producer of a field of the result tuple).
#[derive(Clone)]
pub struct IndexSet {
    len: u32,
    /// The non-zero words, `(word index, word)`, by increasing word index.
    words: Words,
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
        for &(i, w) in &self.words {
            i.hash(state);
            w.hash(state);
        }
    }
}

/// Whether every member of `a` is in `c`, for sets given by their stored words
/// ([`IndexSet::words`]).
pub fn words_subset(a: &[(u32, u64)], c: &[(u32, u64)]) -> bool {
    let mut rest = c;
    for &(i, w) in a {
        let p = rest.partition_point(|q| q.0 < i);
        rest = &rest[p..];
        match rest.first() {
            Some(&(j, v)) if j == i && w & !v == 0 => {}
            _ => return false,
        }
    }
    true
}

/// Merges two sorted word lists with `f` on the words at each index (zero where a side has
/// none), keeping the non-zero results.
fn merge(a: &[(u32, u64)], b: &[(u32, u64)], f: impl Fn(u64, u64) -> u64) -> Words {
    let mut out = Words::with_capacity(a.len() + b.len());
    let (mut x, mut y) = (0, 0);
    while x < a.len() || y < b.len() {
        let ia = a.get(x).map_or(u32::MAX, |p| p.0);
        let ib = b.get(y).map_or(u32::MAX, |p| p.0);
        let i = ia.min(ib);
        let wa = if ia == i {
            x += 1;
            a[x - 1].1
        } else {
            0
        };
        let wb = if ib == i {
            y += 1;
            b[y - 1].1
        } else {
            0
        };
        let w = f(wa, wb);
        if w != 0 {
            out.push((i, w));
        }
    }
    out
}

impl IndexSet {
    /// The empty set over `0..len`.
    pub fn new(len: usize) -> IndexSet {
        IndexSet {
            len: len as u32,
            words: Words::new(),
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
        let mut words = Words::with_capacity(indices.len());
        for &i in indices {
            if i < len {
                words.push(((i / 64) as u32, 1 << (i % 64)));
            }
        }
        words.sort_unstable_by_key(|p| p.0);
        words.dedup_by(|b, a| {
            if a.0 == b.0 {
                a.1 |= b.1;
                true
            } else {
                false
            }
        });
        words.shrink_to_fit();
        IndexSet {
            len: len as u32,
            words,
        }
    }

    /// The set of the given indices, in increasing order (all must be `< len`).
    pub fn from_sorted(len: usize, indices: &[usize]) -> IndexSet {
        debug_assert!(indices.windows(2).all(|w| w[0] <= w[1]));
        debug_assert!(indices.last().is_none_or(|&l| l < len));
        let n = match indices {
            [] => 0,
            [first, .., last] if first / 64 == last / 64 => 1,
            _ => {
                let mut n = 1;
                for w in indices.windows(2) {
                    n += usize::from(w[0] / 64 != w[1] / 64);
                }
                n
            }
        };
        let mut words = Words::with_capacity(n);
        for &i in indices {
            let (k, bit) = ((i / 64) as u32, 1u64 << (i % 64));
            match words.last_mut() {
                Some((j, w)) if *j == k => *w |= bit,
                _ => words.push((k, bit)),
            }
        }
        IndexSet {
            len: len as u32,
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

    /// The word at index `i` (zero where none is stored).
    #[inline]
    pub fn word(&self, i: usize) -> u64 {
        match self.words.binary_search_by_key(&(i as u32), |p| p.0) {
            Ok(k) => self.words[k].1,
            Err(_) => 0,
        }
    }

    /// Adds an index (ignored if out of range).
    pub fn insert(&mut self, i: usize) {
        if i >= self.len as usize {
            return;
        }
        let (k, bit) = ((i / 64) as u32, 1u64 << (i % 64));
        match self.words.last_mut() {
            Some((j, w)) if *j == k => *w |= bit,
            Some((j, _)) if *j < k => self.words.push((k, bit)),
            None => self.words.push((k, bit)),
            _ => match self.words.binary_search_by_key(&k, |p| p.0) {
                Ok(p) => self.words[p].1 |= bit,
                Err(p) => self.words.insert(p, (k, bit)),
            },
        }
    }

    /// Removes an index.
    pub fn remove(&mut self, i: usize) {
        if let Ok(p) = self.words.binary_search_by_key(&((i / 64) as u32), |p| p.0) {
            self.words[p].1 &= !(1 << (i % 64));
            if self.words[p].1 == 0 {
                self.words.remove(p);
            }
        }
    }

    /// Whether `i` is a member.
    #[inline]
    pub fn contains(&self, i: usize) -> bool {
        i < self.len as usize && self.word(i / 64) & (1 << (i % 64)) != 0
    }

    /// Number of members.
    pub fn count(&self) -> usize {
        self.words.iter().map(|w| w.1.count_ones() as usize).sum()
    }

    /// `self ∪ other`.
    pub fn union(&self, other: &IndexSet) -> IndexSet {
        let len = self.len.max(other.len);
        let words = if other.is_empty() {
            self.words.clone()
        } else if self.is_empty() {
            other.words.clone()
        } else {
            let mut w = merge(&self.words, &other.words, |a, b| a | b);
            w.shrink_to_fit();
            w
        };
        IndexSet { len, words }
    }

    /// `self ∩ other`.
    pub fn intersection(&self, other: &IndexSet) -> IndexSet {
        IndexSet {
            len: self.len.max(other.len),
            words: merge(&self.words, &other.words, |a, b| a & b),
        }
    }

    /// `self − other`.
    pub fn difference(&self, other: &IndexSet) -> IndexSet {
        IndexSet {
            len: self.len.max(other.len),
            words: merge(&self.words, &other.words, |a, b| a & !b),
        }
    }

    /// Adds every member of `other` (those below this set's size).
    pub fn union_with(&mut self, other: &IndexSet) {
        let nw = (self.len as usize).div_ceil(64) as u32;
        let end = other.words.partition_point(|p| p.0 < nw);
        let o = &other.words[..end];
        if o.is_empty() {
            return;
        }
        if self.words.last().is_none_or(|l| l.0 < o[0].0) {
            self.words.extend_from_slice(o);
            return;
        }
        self.words = merge(&self.words, o, |a, b| a | b);
    }

    /// Whether the sets share a member.
    #[inline]
    pub fn intersects(&self, other: &IndexSet) -> bool {
        let (small, large) = if self.words.len() <= other.words.len() {
            (&self.words, &other.words)
        } else {
            (&other.words, &self.words)
        };
        let mut rest: &[(u32, u64)] = large;
        for &(i, w) in small.iter() {
            let p = rest.partition_point(|q| q.0 < i);
            rest = &rest[p..];
            match rest.first() {
                None => return false,
                Some(&(j, v)) if j == i && v & w != 0 => return true,
                _ => {}
            }
        }
        false
    }

    /// Whether the sets share no member.
    #[inline]
    pub fn is_disjoint(&self, other: &IndexSet) -> bool {
        !self.intersects(other)
    }

    /// Whether every member of `self` is in `other`.
    pub fn is_subset(&self, other: &IndexSet) -> bool {
        words_subset(&self.words, &other.words)
    }

    /// The smallest member.
    pub fn first(&self) -> Option<usize> {
        let &(i, w) = self.words.first()?;
        Some(i as usize * 64 + w.trailing_zeros() as usize)
    }

    /// The largest member.
    pub fn last(&self) -> Option<usize> {
        let &(i, w) = self.words.last()?;
        Some(i as usize * 64 + 63 - w.leading_zeros() as usize)
    }

    /// The members in increasing order.
    pub fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.words.iter().flat_map(move |&(i, w)| {
            let i = i as usize;
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

    /// The stored words: the non-zero ones, each with its index, by increasing index.
    pub fn words(&self) -> &[(u32, u64)] {
        &self.words
    }
}

/// The order of [`IndexSet`]s (TVM's: at the first differing index, the set containing it is
/// smaller) for sets given by their stored words ([`IndexSet::words`]), whatever their sizes.
pub fn words_cmp(a: &[(u32, u64)], b: &[(u32, u64)]) -> Ordering {
    let (mut x, mut y) = (0, 0);
    while x < a.len() || y < b.len() {
        let ia = a.get(x).map_or(u32::MAX, |p| p.0);
        let ib = b.get(y).map_or(u32::MAX, |p| p.0);
        // A word stored on one side only is non-zero there, zero on the other.
        let (wa, wb) = match ia.cmp(&ib) {
            Ordering::Less => (a[x].1, 0),
            Ordering::Greater => (0, b[y].1),
            Ordering::Equal => (a[x].1, b[y].1),
        };
        if wa != wb {
            let first = (wa ^ wb).trailing_zeros();
            return if wa & (1 << first) != 0 {
                Ordering::Less
            } else {
                Ordering::Greater
            };
        }
        x += 1;
        y += 1;
    }
    Ordering::Equal
}

impl Ord for IndexSet {
    /// TVM's order: at the first differing index, the set containing it is smaller
    /// ([`words_cmp`]), then the smaller universe.
    fn cmp(&self, other: &IndexSet) -> Ordering {
        words_cmp(&self.words, &other.words).then(self.len.cmp(&other.len))
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
        assert_eq!(a.words(), [(2, 1 << 2)]);
        a.insert(3);
        assert_eq!(a.words(), [(0, 1 << 3), (2, 1 << 2)]);
        assert_eq!(a.iter().collect::<Vec<_>>(), [3, 130]);
        a.remove(3);
        assert_eq!(a.words(), [(2, 1 << 2)]);
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
        assert_eq!(small.words().len(), 1);
        assert_eq!(IndexSet::from_slice(200, &[130, 2, 130]), set(&[2, 130]));
        assert_eq!(set(&[1, 130]).intersection(&set(&[130, 131])), set(&[130]));
        assert_eq!(set(&[1, 130]).difference(&set(&[130])).words().len(), 1);
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
