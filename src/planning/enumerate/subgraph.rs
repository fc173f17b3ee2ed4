//! Sub-graphs of a dataflow graph (docs/collage.md, "Sub-graphs"): the inside set and the
//! entry, exit, input and output sets derived from it, depth, kind and label, validity under a
//! [`SubGraphConfig`], touching, disjoint union and nesting with function attributes.

use super::graph::DataflowGraph;
use crate::analysis::dataflow::IndexSet;
use crate::ir::AttrValue;
use crate::ops::OpPattern;
use crate::rules::ruletree::SubGraphConfig;
use std::cmp::Ordering;

/// Function attributes of a nested sub-graph (`Composite`, `Primitive`, `Compiler`).
pub type FnAttrs = Vec<(String, AttrValue)>;

/// A sub-graph.
#[derive(Clone, Debug)]
pub struct SubGraph {
    /// The nodes inside.
    pub inside: IndexSet,
    /// Inside nodes with an outside, non-inlinable input.
    pub entry: IndexSet,
    /// Inside nodes with an outside output, or the external root.
    pub exit: IndexSet,
    /// Outside, non-inlinable nodes that feed an inside node.
    pub input: IndexSet,
    /// Outside nodes fed by an inside node.
    pub output: IndexSet,
    /// Largest number of inside nodes on a path from an entry to an exit.
    pub depth: u32,
    /// The largest kind of the inside nodes (or of the parts of a union).
    pub kind: OpPattern,
    /// Labels of the inside nodes joined with `+`.
    pub label: String,
    /// Nested sub-graphs with the attributes of the functions they become.
    pub nested: Vec<(SubGraph, FnAttrs)>,
}

impl PartialEq for SubGraph {
    /// Equal inside sets and pairwise-equal nested sub-graphs *with* equal attributes (unlike
    /// TVM, which ignores the attributes, docs/collage.md quirk-6).
    fn eq(&self, other: &SubGraph) -> bool {
        self.inside == other.inside && self.nested == other.nested
    }
}

impl Eq for SubGraph {}

impl std::hash::Hash for SubGraph {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.inside.hash(state);
        self.nested.len().hash(state);
        for (sg, attrs) in &self.nested {
            sg.hash(state);
            attrs.hash(state);
        }
    }
}

impl SubGraph {
    /// The sub-graph with the given inside set, kind computed from its nodes (docs/collage.md).
    pub fn new(g: &DataflowGraph<'_>, inside: IndexSet) -> SubGraph {
        let mut kind = OpPattern::ElemWise;
        let mut labels: Vec<&str> = Vec::new();
        for i in inside.iter() {
            kind = kind.max(g.kind[i]);
            if !g.label[i].is_empty() {
                labels.push(&g.label[i]);
            }
        }
        let label = labels.join("+");
        SubGraph::with(g, inside, kind, label, Vec::new())
    }

    /// The sub-graph with explicit kind, label and nested sub-graphs.
    pub fn with(
        g: &DataflowGraph<'_>,
        inside: IndexSet,
        kind: OpPattern,
        label: String,
        mut nested: Vec<(SubGraph, FnAttrs)>,
    ) -> SubGraph {
        nested.sort_by(|a, b| a.0.order(&b.0));
        let n = g.len();
        SCRATCH.with_borrow_mut(|sc| {
            sc.clear();
            if sc.d.len() < n {
                sc.d.resize(n, 0);
            }
            // One pass in index order, which is topological: the boundary sets, and the longest
            // path from an entry to each node (`d`, zero when no entry reaches it).
            let mut depth = 0;
            for i in inside.iter() {
                let mut is_entry = false;
                let mut d = 0;
                for inp in g.inputs(i) {
                    let j = inp.index();
                    if inside.contains(j) {
                        if sc.d[j] > 0 {
                            d = d.max(sc.d[j] + 1);
                        }
                    } else if !g.inlinable[j] {
                        is_entry = true;
                        sc.input.push(j);
                    }
                }
                if is_entry {
                    d = d.max(1);
                    sc.entry.push(i);
                }
                sc.d[i] = d;
                let mut is_exit = g.is_external(i);
                for out in g.outputs(i) {
                    let j = out.index();
                    if !inside.contains(j) {
                        is_exit = true;
                        sc.output.push(j);
                    }
                }
                if is_exit {
                    depth = depth.max(d);
                    sc.exit.push(i);
                }
            }
            for i in inside.iter() {
                sc.d[i] = 0;
            }
            SubGraph {
                entry: IndexSet::from_sorted(n, &sc.entry),
                exit: IndexSet::from_sorted(n, &sc.exit),
                input: IndexSet::from_slice(n, &sc.input),
                output: IndexSet::from_slice(n, &sc.output),
                inside,
                depth,
                kind,
                label,
                nested,
            }
        })
    }

    /// TVM's order: by first inside index, then by the index-set order.
    pub fn order(&self, other: &SubGraph) -> Ordering {
        self.inside
            .first()
            .cmp(&other.inside.first())
            .then_with(|| self.inside.cmp(&other.inside))
    }

    /// Whether the sub-graph is valid under the configuration (docs/collage.md). `max_depth` of
    /// `None` means unlimited.
    pub fn is_valid(&self, g: &DataflowGraph<'_>, config: &SubGraphConfig) -> bool {
        self.is_valid_but_convexity(g, config) && self.is_convex(g)
    }

    /// [`SubGraph::is_valid`] without its convexity test (for callers with a cheaper one).
    pub fn is_valid_but_convexity(&self, g: &DataflowGraph<'_>, config: &SubGraphConfig) -> bool {
        if config.max_exits > 0 && self.exit.count() > config.max_exits as usize {
            return false;
        }
        if config.max_depth.is_some_and(|d| self.depth > d) {
            return false;
        }
        let mut blocks = self.inside.iter().map(|i| g.block[i]);
        if let Some(first) = blocks.next() {
            if blocks.any(|b| b != first) {
                return false;
            }
        }
        let mut union = IndexSet::new(g.len());
        for (sub, _) in &self.nested {
            if !sub.inside.is_subset(&self.inside) || union.intersects(&sub.inside) {
                return false;
            }
            union.union_with(&sub.inside);
        }
        if !config.allow_taps {
            for i in self.exit.iter() {
                if g.outputs(i).iter().any(|o| self.inside.contains(o.index())) {
                    return false;
                }
            }
        }
        true
    }

    /// Convexity: no data leaves the sub-graph and flows back in.
    pub fn is_convex(&self, g: &DataflowGraph<'_>) -> bool {
        !self
            .output
            .iter()
            .any(|o| g.downstream[o].intersects(&self.entry))
    }

    /// Whether data from `self` (outside `other`) flows back into `other`'s entries.
    pub fn flows_into(&self, g: &DataflowGraph<'_>, other: &SubGraph) -> bool {
        self.output
            .iter()
            .filter(|&o| !other.inside.contains(o))
            .any(|o| g.downstream[o].intersects(&other.entry))
    }

    /// Whether `self` (upstream) and `other` (downstream) touch (docs/collage.md): disjoint, some
    /// output of `self` is an entry of `other`, and neither flows back into the other.
    pub fn touches(&self, g: &DataflowGraph<'_>, other: &SubGraph) -> bool {
        self.inside.is_disjoint(&other.inside)
            && self.output.intersects(&other.entry)
            && !self.flows_into(g, other)
            && !other.flows_into(g, self)
    }

    /// An empty sub-graph that allocates nothing, to hold a place briefly.
    fn placeholder() -> SubGraph {
        SubGraph {
            inside: IndexSet::new(0),
            entry: IndexSet::new(0),
            exit: IndexSet::new(0),
            input: IndexSet::new(0),
            output: IndexSet::new(0),
            depth: 0,
            kind: OpPattern::ElemWise,
            label: String::new(),
            nested: Vec::new(),
        }
    }

    /// The disjoint union (docs/collage.md): the larger kind, labels joined in union order, nested
    /// sub-graphs merged where trivially unionable. Returns `None` if the insides overlap.
    pub fn disjoint_union(&self, g: &DataflowGraph<'_>, other: &SubGraph) -> Option<SubGraph> {
        if self.inside.intersects(&other.inside) {
            return None;
        }
        let nested = merge_nested(g, self.nested.clone(), other);
        Some(self.union_with_nested(g, other, nested))
    }

    /// [`SubGraph::disjoint_union`] taking `self`, whose nested sub-graphs move into the union
    /// instead of being copied (for a sub-graph that keeps growing). Gives `self` back if the
    /// insides overlap.
    pub fn absorb(
        mut self,
        g: &DataflowGraph<'_>,
        other: &SubGraph,
    ) -> Result<SubGraph, Box<SubGraph>> {
        if self.inside.intersects(&other.inside) {
            return Err(Box::new(self));
        }
        let nested = merge_nested(g, std::mem::take(&mut self.nested), other);
        Ok(self.union_with_nested(g, other, nested))
    }

    /// The union of disjoint sub-graphs, the same as absorbing them one after the other, in
    /// order ([`SubGraph::absorb`]), but built once: each level of nested sub-graphs is put
    /// together in one pass (trivially unionable wrappers merged, composites side by side), so
    /// the work is linear in the parts rather than in the parts times the growing union.
    pub fn union_all(g: &DataflowGraph<'_>, parts: &[&SubGraph]) -> SubGraph {
        SubGraph::union_all_like(g, parts, None)
    }

    /// [`SubGraph::union_all`], taking the boundary and depth from `like` when the union has
    /// the same nodes (a wrapper nested over all of a union's nodes has the union's boundary).
    fn union_all_like(
        g: &DataflowGraph<'_>,
        parts: &[&SubGraph],
        like: Option<&SubGraph>,
    ) -> SubGraph {
        let mut members: Vec<usize> = parts.iter().flat_map(|p| p.inside.iter()).collect();
        members.sort_unstable();
        let inside = IndexSet::from_sorted(g.len(), &members);
        let kind = parts
            .iter()
            .map(|p| p.kind)
            .max()
            .unwrap_or(OpPattern::ElemWise);
        let mut label = String::new();
        for p in parts {
            if !p.label.is_empty() {
                if !label.is_empty() {
                    label.push('+');
                }
                label.push_str(&p.label);
            }
        }
        let mut whole = match like {
            Some(like) if like.inside == inside => SubGraph {
                inside,
                entry: like.entry.clone(),
                exit: like.exit.clone(),
                input: like.input.clone(),
                output: like.output.clone(),
                depth: like.depth,
                kind,
                label,
                nested: Vec::new(),
            },
            _ => SubGraph::with(g, inside, kind, label, Vec::new()),
        };
        let mut nested = union_all_nested(g, parts.iter().flat_map(|p| &p.nested), &whole);
        nested.sort_by(|a, b| a.0.order(&b.0));
        whole.nested = nested;
        whole
    }

    /// The union of `self` and `small` (disjoint) as a plain sub-graph (no nested parts, no
    /// label), its boundary derived from theirs: only the nodes of `small` and their neighbours
    /// are looked at, so the work grows with `small` and with the words of the sets, not with
    /// the nodes of `self`. The depth is not computed: it is set to the number of inside nodes,
    /// an upper bound, for tests against a depth limit at least that large.
    pub fn plain_union_shallow(&self, g: &DataflowGraph<'_>, small: &SubGraph) -> SubGraph {
        let inside = self.inside.union(&small.inside);
        // Only nodes with an edge between the two parts can stop being entries or exits (a
        // union moves nodes inside, never outside).
        let mut changed: Vec<usize> = Vec::new();
        for y in small.inside.iter() {
            for x in g.inputs(y).iter().chain(g.outputs(y)) {
                if self.inside.contains(x.index()) {
                    changed.push(x.index());
                    changed.push(y);
                }
            }
        }
        changed.sort_unstable();
        changed.dedup();
        let mut entry = self.entry.union(&small.entry);
        let mut exit = self.exit.union(&small.exit);
        for &x in &changed {
            let outside_input = g.inputs(x).iter().any(|j| {
                let j = j.index();
                !inside.contains(j) && !g.inlinable[j]
            });
            if !outside_input {
                entry.remove(x);
            }
            let leaves =
                g.is_external(x) || g.outputs(x).iter().any(|o| !inside.contains(o.index()));
            if !leaves {
                exit.remove(x);
            }
        }
        let input = self
            .input
            .difference(&small.inside)
            .union(&small.input.difference(&self.inside));
        let output = self
            .output
            .difference(&small.inside)
            .union(&small.output.difference(&self.inside));
        let depth = inside.count() as u32;
        SubGraph {
            inside,
            entry,
            exit,
            input,
            output,
            depth,
            kind: self.kind.max(small.kind),
            label: String::new(),
            nested: Vec::new(),
        }
    }

    /// The union of `self` and `other` (disjoint) with the given nested sub-graphs.
    fn union_with_nested(
        &self,
        g: &DataflowGraph<'_>,
        other: &SubGraph,
        nested: Vec<(SubGraph, FnAttrs)>,
    ) -> SubGraph {
        let inside = self.inside.union(&other.inside);
        let kind = self.kind.max(other.kind);
        let label = union_labels(&self.label, &other.label);
        SubGraph::with(g, inside, kind, label, nested)
    }

    /// The `Composite` functions nested in the sub-graph (at any depth, but not inside another
    /// composite): their names and sub-graphs, in node order.
    pub fn composites(&self) -> Vec<(&str, &SubGraph)> {
        let mut out = Vec::new();
        let mut stack = vec![self];
        while let Some(s) = stack.pop() {
            for (sub, attrs) in &s.nested {
                let name = attrs.iter().find_map(|(k, v)| match v {
                    AttrValue::Str(n) if k == "Composite" => Some(n.as_str()),
                    _ => None,
                });
                match name {
                    Some(n) => out.push((n, sub)),
                    None => stack.push(sub),
                }
            }
        }
        out.sort_by(|a, b| a.1.order(b.1));
        out
    }

    /// The same sub-graph nested once more, with the given function attributes.
    pub fn with_attrs(&self, g: &DataflowGraph<'_>, attrs: FnAttrs) -> SubGraph {
        SubGraph::with(
            g,
            self.inside.clone(),
            self.kind,
            self.label.clone(),
            vec![(self.clone(), attrs)],
        )
    }
}

/// `l+r`, or whichever side is non-empty.
pub fn union_labels(l: &str, r: &str) -> String {
    match (l.is_empty(), r.is_empty()) {
        (true, _) => r.to_string(),
        (_, true) => l.to_string(),
        _ => {
            let mut s = String::with_capacity(l.len() + 1 + r.len());
            s.push_str(l);
            s.push('+');
            s.push_str(r);
            s
        }
    }
}

/// `r` if it already starts with `l.`, else `l.r` (or whichever side is non-empty). TVM tests a
/// bare string prefix, which drops the target from names like `t` + `tanh`; we require the dot.
pub fn nest_labels(l: &str, r: &str) -> String {
    match (l.is_empty(), r.is_empty()) {
        (true, _) => r.to_string(),
        (_, true) => l.to_string(),
        _ if r.len() > l.len() && r.starts_with(l) && r[l.len()..].starts_with('.') => {
            r.to_string()
        }
        _ => format!("{l}.{r}"),
    }
}

/// `nested` with `other`'s nested sub-graphs added, each merged into a trivially unionable one
/// disjoint from it where there is one.
fn merge_nested(
    g: &DataflowGraph<'_>,
    mut nested: Vec<(SubGraph, FnAttrs)>,
    other: &SubGraph,
) -> Vec<(SubGraph, FnAttrs)> {
    for (sub, attrs) in &other.nested {
        // A composite never merges: no need to look (the list can be long).
        let pos = if is_composite(attrs) {
            None
        } else {
            nested.iter().position(|(n, a)| {
                trivially_unionable(a, attrs) && n.inside.is_disjoint(&sub.inside)
            })
        };
        let Some(p) = pos else {
            nested.push((sub.clone(), attrs.clone()));
            continue;
        };
        // The part grows in place (its own nested parts move, they are not copied).
        let part = std::mem::replace(&mut nested[p].0, SubGraph::placeholder());
        // The two are disjoint (so chosen), so the merge succeeds; were it not to, they would
        // stay side by side.
        match part.absorb(g, sub) {
            Ok(merged) => nested[p].0 = merged,
            Err(part) => {
                nested[p].0 = *part;
                nested.push((sub.clone(), attrs.clone()));
            }
        }
    }
    nested
}

/// The nested sub-graphs of disjoint parts put together as [`merge_nested`] would, one after
/// the other: each wrapper joins the first earlier one it is trivially unionable with (they are
/// disjoint, the parts being so), recursively; composites stay as they are. A wrapper over all
/// of `outer`'s nodes takes `outer`'s boundary rather than finding it again.
fn union_all_nested<'s>(
    g: &DataflowGraph<'_>,
    items: impl Iterator<Item = &'s (SubGraph, FnAttrs)>,
    outer: &SubGraph,
) -> Vec<(SubGraph, FnAttrs)> {
    // Composites as they are, wrappers as groups to unite.
    let mut out: Vec<(Vec<&SubGraph>, &FnAttrs)> = Vec::new();
    let mut wrappers: Vec<usize> = Vec::new();
    for (sub, attrs) in items {
        if is_composite(attrs) {
            out.push((vec![sub], attrs));
            continue;
        }
        match wrappers
            .iter()
            .find(|&&k| trivially_unionable(out[k].1, attrs))
        {
            Some(&k) => out[k].0.push(sub),
            None => {
                wrappers.push(out.len());
                out.push((vec![sub], attrs));
            }
        }
    }
    out.into_iter()
        .map(|(subs, attrs)| {
            let sub = match subs[..] {
                [one] => one.clone(),
                _ => SubGraph::union_all_like(g, &subs, Some(outer)),
            };
            (sub, attrs.clone())
        })
        .collect()
}

fn is_composite(attrs: &FnAttrs) -> bool {
    attrs.iter().any(|(k, _)| k == "Composite")
}

/// Same attributes, no `Composite` among them: nested `Primitive`/`Compiler` wrappers merge,
/// composites never do.
fn trivially_unionable(a: &FnAttrs, b: &FnAttrs) -> bool {
    a.len() == b.len()
        && !a.iter().any(|(k, _)| k == "Composite")
        && a.iter()
            .all(|(k, v)| b.iter().any(|(k2, v2)| k == k2 && v == v2))
}

/// Buffers for [`SubGraph::with`], reused between calls.
#[derive(Default)]
struct Scratch {
    /// The inside nodes that are entries and exits, in index order.
    entry: Vec<usize>,
    exit: Vec<usize>,
    /// Inputs and outputs, possibly repeated.
    input: Vec<usize>,
    output: Vec<usize>,
    /// Per node: the longest path from an entry, while a sub-graph is built; zero otherwise.
    d: Vec<u32>,
}

impl Scratch {
    fn clear(&mut self) {
        self.entry.clear();
        self.exit.clear();
        self.input.clear();
        self.output.clear();
    }
}

thread_local! {
    static SCRATCH: std::cell::RefCell<Scratch> = std::cell::RefCell::new(Scratch::default());
}
