//! Property tests of sub-graphs (`collage::planning::enumerate::SubGraph`) on random dataflow graphs.
//!
//! Random DAGs of up to 12 operator calls are written as RelayScript: unary elementwise calls,
//! binary broadcasts, scalar and tensor-constant operands, injective transposes and reshapes,
//! an out-elementwise-fusable `nn.dense`, `concatenate` of a tuple, `split` with its
//! projections, and shared subexpressions (an operand may be used several times, even twice by
//! one call). On random subsets of nodes, everything `SubGraph` computes is compared with a
//! brute-force definition written here from docs/collage.md, "Sub-graphs":
//!
//! * entry, exit, input and output sets, computed directly from the graph's edges;
//! * depth: the longest path, counting nodes, from an entry to an exit through inside nodes, by
//!   enumerating the paths;
//! * validity: exits counted, depth, one basic block, taps, and convexity by explicit path
//!   search (invalid iff some path leaves the set and comes back in);
//! * touching and the disjoint union, including how nested wrappers merge.
//!
//! The number of cases is `COLLAGE_PROP_CASES` (default 300).

use crate::support::load_text;
use collage::analysis::dataflow::{IndexSet, NodeRef};
use collage::ir::{AttrValue, Expr, Module};
use collage::ops::OpPattern;
use collage::planning::enumerate::{DataflowGraph, SubGraph};
use collage::planning::partition;
use collage::rules::ruletree::SubGraphConfig;
use proptest::prelude::*;
use proptest::test_runner::Config;
use std::collections::BTreeSet;

pub(crate) fn config() -> Config {
    let cases = std::env::var("COLLAGE_PROP_CASES")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(300);
    Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    }
}

// ---------------------------------------------------------------------------------------------
// Random models

/// The two tensor shapes values have: `S` = (4, 4) and `H` = (2, 4) (a half of `S`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Shape {
    S,
    H,
}

impl Shape {
    fn ty(self) -> &'static str {
        match self {
            Shape::S => "Tensor[(4, 4), float32]",
            Shape::H => "Tensor[(2, 4), float32]",
        }
    }

    fn dims(self) -> &'static str {
        match self {
            Shape::S => "[4, 4]",
            Shape::H => "[2, 4]",
        }
    }
}

/// One generation step: which operation, and choices for its operands.
pub(crate) type Step = (u8, u16, u16, u8);

/// The model being written.
struct Gen {
    body: Vec<String>,
    /// Values so far (name and shape), and whether each is used.
    pool: Vec<(String, Shape)>,
    used: Vec<bool>,
    next: usize,
}

impl Gen {
    fn fresh(&mut self) -> String {
        self.next += 1;
        format!("%{}", self.next - 1)
    }

    /// Binds `rhs` to a fresh name; the value joins the pool.
    fn push(&mut self, rhs: String, shape: Shape) {
        let name = self.fresh();
        self.body.push(format!("  {name} = {rhs};"));
        self.pool.push((name, shape));
        self.used.push(false);
    }

    /// Binds `rhs` to a fresh name that is not a value of the pool (a tuple or a split).
    fn bind(&mut self, rhs: String) -> String {
        let name = self.fresh();
        self.body.push(format!("  {name} = {rhs};"));
        name
    }

    /// Picks a value (of a shape, if given) and marks it used.
    fn pick(&mut self, choice: u16, shape: Option<Shape>) -> Option<(String, Shape)> {
        let options: Vec<usize> = (0..self.pool.len())
            .filter(|&i| shape.is_none_or(|s| self.pool[i].1 == s))
            .collect();
        if options.is_empty() {
            return None;
        }
        let i = options[choice as usize % options.len()];
        self.used[i] = true;
        Some(self.pool[i].clone())
    }
}

/// Writes a model: `params` parameters (the third, if any, of shape `H`), then one binding per
/// step, then the result: a tuple of every unused value, or the last value only (unused values
/// are then unreachable and not in the graph).
pub(crate) fn model_text(params: u8, steps: &[Step], tuple_result: bool) -> String {
    let mut gen = Gen {
        body: Vec::new(),
        pool: Vec::new(),
        used: Vec::new(),
        next: 0,
    };
    let mut sig = Vec::new();
    for p in 0..params {
        let shape = if p == 2 { Shape::H } else { Shape::S };
        sig.push(format!("%p{p}: {}", shape.ty()));
        gen.pool.push((format!("%p{p}"), shape));
        gen.used.push(true);
    }
    let mut consts: Vec<Shape> = Vec::new();
    for &(op, a, b, c) in steps {
        let (x, xs) = gen.pick(a, None).expect("parameters are values");
        match op {
            1 => {
                let f = ["add", "multiply", "subtract", "maximum"][c as usize % 4];
                let (y, _) = gen.pick(b, Some(xs)).expect("x itself has the shape");
                gen.push(format!("{f}({x}, {y})"), xs);
            }
            2 => {
                let rhs = if c.is_multiple_of(2) {
                    format!("multiply({x}, 2f)")
                } else {
                    format!("add(1f, {x})")
                };
                gen.push(rhs, xs);
            }
            3 => {
                // A tensor constant (not inlinable); sometimes one used before (the same node).
                let k = match consts.iter().position(|&s| s == xs) {
                    Some(k) if c.is_multiple_of(4) => k,
                    _ => {
                        consts.push(xs);
                        consts.len() - 1
                    }
                };
                let rhs = format!("add({x}, meta[relay.Constant][{k}] /* ty={} */)", xs.ty());
                gen.push(rhs, xs);
            }
            4 if xs == Shape::S => gen.push(format!("transpose({x}, axes=[1, 0])"), xs),
            5 => gen.push(format!("reshape({x}, newshape={})", xs.dims()), xs),
            6 => match gen.pick(b, Some(Shape::S)) {
                Some((w, _)) => gen.push(format!("nn.dense({x}, {w}, units=4)"), xs),
                None => gen.push(format!("nn.relu({x})"), xs),
            },
            7 => match (gen.pick(a, Some(Shape::H)), gen.pick(b, Some(Shape::H))) {
                (Some((h1, _)), Some((h2, _))) => {
                    let t = gen.bind(format!("({h1}, {h2})"));
                    gen.push(format!("concatenate({t})"), Shape::S);
                }
                _ => gen.push(format!("tanh({x})"), xs),
            },
            8 if xs == Shape::S => {
                let s = gen.bind(format!("split({x}, indices_or_sections=2, axis=0)"));
                gen.push(format!("{s}.0"), Shape::H);
                if !c.is_multiple_of(3) {
                    gen.push(format!("{s}.1"), Shape::H);
                }
            }
            _ => {
                let f = ["nn.relu", "abs", "tanh", "exp", "negative", "sigmoid"][c as usize % 6];
                gen.push(format!("{f}({x})"), xs);
            }
        }
    }
    let last = gen.pool.last().unwrap().0.clone();
    let result = if tuple_result {
        let sinks: Vec<&str> = gen
            .pool
            .iter()
            .zip(&gen.used)
            .filter(|(_, u)| !**u)
            .map(|((n, _), _)| n.as_str())
            .collect();
        match sinks.as_slice() {
            [] => last,
            [one] => one.to_string(),
            many => format!("({})", many.join(", ")),
        }
    } else {
        last
    };
    format!(
        "#[version = \"0.0.5\"]\ndef @main({}) {{\n{}\n  {result}\n}}\n",
        sig.join(", "),
        gen.body.join("\n")
    )
}

pub(crate) fn load(text: &str) -> Module {
    let (sources, _, result) = load_text("random.relay", text);
    match result {
        Ok(m) => m,
        Err(d) => panic!(
            "generated model does not load:\n{}\n{text}",
            d.render_plain(&sources)
        ),
    }
}

// ---------------------------------------------------------------------------------------------
// Brute-force definitions (docs/collage.md, "Kinds and labels" and "Sub-graphs")

/// Facts about the graph computed independently of `SubGraph`.
pub(crate) struct Facts {
    n: usize,
    inputs: Vec<Vec<usize>>,
    outputs: Vec<Vec<usize>>,
    /// Inlinable: operators, functions and rank-0 constants (all our constants are float32).
    inlinable: Vec<bool>,
    /// The function node (the external root).
    root: usize,
    /// Strictly downstream nodes, by search.
    reach: Vec<BTreeSet<usize>>,
}

impl Facts {
    pub(crate) fn new(m: &Module, g: &DataflowGraph<'_>) -> Facts {
        let n = g.len();
        let inputs: Vec<Vec<usize>> = (0..n)
            .map(|i| g.inputs(i).iter().map(|x| x.index()).collect())
            .collect();
        let outputs: Vec<Vec<usize>> = (0..n)
            .map(|i| g.outputs(i).iter().map(|x| x.index()).collect())
            .collect();
        let mut inlinable = vec![false; n];
        let mut root = None;
        for (i, node) in g.graph.nodes.iter().enumerate() {
            inlinable[i] = match node.what {
                NodeRef::Op(_) => true,
                NodeRef::Func(_) => {
                    root = Some(i);
                    true
                }
                NodeRef::Expr(e) => match m.expr(e) {
                    Expr::Const(c) => c.ty().shape.is_empty(),
                    Expr::Func(_) | Expr::Op(_) => true,
                    _ => false,
                },
            };
        }
        let reach = (0..n)
            .map(|i| {
                let mut seen = BTreeSet::new();
                let mut stack = outputs[i].clone();
                while let Some(o) = stack.pop() {
                    if seen.insert(o) {
                        stack.extend(outputs[o].iter().copied());
                    }
                }
                seen
            })
            .collect();
        Facts {
            n,
            inputs,
            outputs,
            inlinable,
            root: root.expect("a function node"),
            reach,
        }
    }
}

/// A sub-graph as computed by brute force.
#[derive(Debug, PartialEq)]
struct Brute {
    entry: BTreeSet<usize>,
    exit: BTreeSet<usize>,
    input: BTreeSet<usize>,
    output: BTreeSet<usize>,
    depth: u32,
}

fn brute(f: &Facts, inside: &BTreeSet<usize>) -> Brute {
    let mut b = Brute {
        entry: BTreeSet::new(),
        exit: BTreeSet::new(),
        input: BTreeSet::new(),
        output: BTreeSet::new(),
        depth: 0,
    };
    for n in 0..f.n {
        if inside.contains(&n) {
            if f.inputs[n]
                .iter()
                .any(|i| !inside.contains(i) && !f.inlinable[*i])
            {
                b.entry.insert(n);
            }
            if f.outputs[n].iter().any(|o| !inside.contains(o)) || n == f.root {
                b.exit.insert(n);
            }
        } else {
            if f.inputs[n].iter().any(|i| inside.contains(i)) {
                b.output.insert(n);
            }
            if !f.inlinable[n] && f.outputs[n].iter().any(|o| inside.contains(o)) {
                b.input.insert(n);
            }
        }
    }
    // Every path from an entry through inside nodes; the longest that ends at an exit.
    fn walk(
        f: &Facts,
        inside: &BTreeSet<usize>,
        exit: &BTreeSet<usize>,
        n: usize,
        len: u32,
    ) -> u32 {
        let mut best = if exit.contains(&n) { len } else { 0 };
        for &o in &f.outputs[n] {
            if inside.contains(&o) {
                best = best.max(walk(f, inside, exit, o, len + 1));
            }
        }
        best
    }
    b.depth = b
        .entry
        .iter()
        .map(|&e| walk(f, inside, &b.exit, e, 1))
        .max()
        .unwrap_or(0);
    b
}

/// Some path leaves `inside` and comes back in.
fn has_cycle_through_outside(f: &Facts, inside: &BTreeSet<usize>) -> bool {
    inside.iter().any(|&a| {
        f.outputs[a]
            .iter()
            .filter(|o| !inside.contains(o))
            .any(|&o| f.reach[o].iter().any(|r| inside.contains(r)))
    })
}

fn brute_valid(f: &Facts, inside: &BTreeSet<usize>, b: &Brute, cfg: &SubGraphConfig) -> bool {
    let exits_ok = cfg.max_exits == 0 || b.exit.len() <= cfg.max_exits as usize;
    let depth_ok = cfg.max_depth.is_none_or(|d| b.depth <= d);
    // No `if` or nested functions are generated: every node is in the function's block except
    // the function node itself.
    let one_block = !inside.contains(&f.root) || inside.len() == 1;
    let taps_ok = cfg.allow_taps
        || !b
            .exit
            .iter()
            .any(|&x| f.outputs[x].iter().any(|o| inside.contains(o)));
    exits_ok && depth_ok && one_block && taps_ok && !has_cycle_through_outside(f, inside)
}

/// Touching: disjoint, some output of `up` is an entry of `down`, and neither flows into the
/// other.
fn brute_touches(f: &Facts, up: &BTreeSet<usize>, down: &BTreeSet<usize>) -> bool {
    let (bu, bd) = (brute(f, up), brute(f, down));
    let flows = |l: &Brute, r_inside: &BTreeSet<usize>, r: &Brute| {
        l.output
            .iter()
            .filter(|o| !r_inside.contains(o))
            .any(|&o| f.reach[o].iter().any(|x| r.entry.contains(x)))
    };
    up.is_disjoint(down)
        && bu.output.iter().any(|o| bd.entry.contains(o))
        && !flows(&bu, down, &bd)
        && !flows(&bd, up, &bu)
}

fn to_set(s: &IndexSet) -> BTreeSet<usize> {
    s.iter().collect()
}

pub(crate) fn index_set(g: &DataflowGraph<'_>, s: &BTreeSet<usize>) -> IndexSet {
    IndexSet::from_indices(g.len(), s.iter().copied())
}

fn assert_matches(g: &DataflowGraph<'_>, f: &Facts, sg: &SubGraph, text: &str) {
    let inside = to_set(&sg.inside);
    let b = brute(f, &inside);
    let actual = Brute {
        entry: to_set(&sg.entry),
        exit: to_set(&sg.exit),
        input: to_set(&sg.input),
        output: to_set(&sg.output),
        depth: sg.depth,
    };
    assert_eq!(actual, b, "sub-graph {:?} of\n{text}", inside);
    let kind = inside
        .iter()
        .map(|&i| g.kind[i])
        .fold(OpPattern::ElemWise, OpPattern::max);
    assert_eq!(sg.kind, kind, "kind of {inside:?}");
}

// ---------------------------------------------------------------------------------------------
// Random subsets

/// Whether a node computes something (a call, tuple, projection or constant) rather than being
/// a parameter, an operator or the function.
fn is_value(g: &DataflowGraph<'_>, m: &Module, i: usize) -> bool {
    g.expr(i).is_some_and(|e| {
        matches!(
            m.expr(e),
            Expr::Call { .. } | Expr::Tuple(_) | Expr::Proj { .. } | Expr::Const(_)
        )
    })
}

/// A subset from random bytes: mostly value nodes, rarely others (so that invalid mixtures with
/// the function node or parameters occur too), or a set grown along edges from one node (more
/// likely to be connected and convex).
pub(crate) fn subset(
    g: &DataflowGraph<'_>,
    m: &Module,
    f: &Facts,
    bytes: &[u8],
) -> BTreeSet<usize> {
    let values: Vec<usize> = (0..f.n).filter(|&i| is_value(g, m, i)).collect();
    let mut s = BTreeSet::new();
    if bytes[0].is_multiple_of(2) || values.is_empty() {
        for i in 0..f.n {
            let threshold = if is_value(g, m, i) { 100 } else { 12 };
            if bytes[1 + i % (bytes.len() - 1)] < threshold {
                s.insert(i);
            }
        }
    } else {
        s.insert(values[bytes[1] as usize % values.len()]);
        for k in 0..(bytes[2] % 7) as usize {
            let members: Vec<usize> = s.iter().copied().collect();
            let at = members[bytes[3 + 2 * k] as usize % members.len()];
            let neighbours: Vec<usize> = f.inputs[at]
                .iter()
                .chain(&f.outputs[at])
                .copied()
                .filter(|&x| is_value(g, m, x))
                .collect();
            if !neighbours.is_empty() {
                s.insert(neighbours[bytes[4 + 2 * k] as usize % neighbours.len()]);
            }
        }
    }
    s
}

fn configs() -> Vec<SubGraphConfig> {
    let mut out = Vec::new();
    for max_exits in 0..=3 {
        for allow_taps in [false, true] {
            for max_depth in [None, Some(1), Some(2), Some(3), Some(5)] {
                out.push(SubGraphConfig {
                    max_depth,
                    max_exits,
                    allow_taps,
                });
            }
        }
    }
    out
}

pub(crate) fn steps() -> impl Strategy<Value = Vec<Step>> {
    prop::collection::vec((0u8..9, any::<u16>(), any::<u16>(), any::<u8>()), 1..=12)
}

proptest! {
    #![proptest_config(config())]

    /// Entry/exit/input/output, depth, kind and validity agree with the brute-force definitions.
    #[test]
    fn sub_graphs_match_brute_force(
        params in 1u8..=3,
        steps in steps(),
        tuple_result in any::<bool>(),
        bytes in prop::collection::vec(any::<u8>(), 4 * 24),
    ) {
        let text = model_text(params, &steps, tuple_result);
        let m = load(&text);
        let g = DataflowGraph::new(&m, m.main().unwrap());
        let f = Facts::new(&m, &g);
        let configs = configs();
        for chunk in bytes.chunks(24) {
            let inside = subset(&g, &m, &f, chunk);
            let sg = SubGraph::new(&g, index_set(&g, &inside));
            assert_matches(&g, &f, &sg, &text);
            let cycle = has_cycle_through_outside(&f, &inside);
            prop_assert_eq!(sg.is_convex(&g), !cycle, "convexity of {:?} in\n{}", inside, text);
            let b = brute(&f, &inside);
            for cfg in &configs {
                prop_assert_eq!(
                    sg.is_valid(&g, cfg),
                    brute_valid(&f, &inside, &b, cfg),
                    "validity of {:?} under {:?} in\n{}",
                    inside,
                    cfg,
                    text
                );
            }
        }
    }

    /// `touches` and `disjoint_union` agree with the definitions of docs/collage.md.
    #[test]
    fn touching_and_union_match_brute_force(
        params in 1u8..=3,
        steps in steps(),
        tuple_result in any::<bool>(),
        bytes in prop::collection::vec(any::<u8>(), 6 * 24),
    ) {
        let text = model_text(params, &steps, tuple_result);
        let m = load(&text);
        let g = DataflowGraph::new(&m, m.main().unwrap());
        let f = Facts::new(&m, &g);
        let unlimited = SubGraphConfig { max_depth: None, max_exits: 0, allow_taps: true };
        let rank = partition::edges_go_forward(&g).then(|| partition::local_order(&g));
        let mut reach = partition::Reach::default();
        let sets: Vec<BTreeSet<usize>> = bytes.chunks(24).map(|c| subset(&g, &m, &f, c)).collect();
        for (k, a) in sets.iter().enumerate() {
            // Pair each set with the next one, and with the set itself minus its first half
            // (often disjoint and adjacent).
            let half: BTreeSet<usize> = a.iter().copied().skip(a.len() / 2).collect();
            let low: BTreeSet<usize> = a.difference(&half).copied().collect();
            let others = [sets[(k + 1) % sets.len()].clone(), half.clone()];
            for (up, down) in others
                .iter()
                .flat_map(|b| [(a, b), (b, a)])
                .chain([(&low, &half), (&half, &low)])
            {
                let (su, sd) = (SubGraph::new(&g, index_set(&g, up)), SubGraph::new(&g, index_set(&g, down)));
                let touches = su.touches(&g, &sd);
                prop_assert_eq!(
                    touches,
                    brute_touches(&f, up, down),
                    "touches({:?}, {:?}) in\n{}", up, down, text
                );
                // Greedy merging tests adjacency, then the flows back of `touches` (both ways)
                // and the union's convexity in one bounded search: the same answer.
                if up.is_disjoint(down) {
                    if let Some(rank) = &rank {
                        let union = SubGraph::new(&g, su.inside.union(&sd.inside));
                        let expected =
                            su.flows_into(&g, &sd) || sd.flows_into(&g, &su) || !union.is_convex(&g);
                        // Searched in full, cut short at once (the downstream sets answer), and
                        // cut short part of the way.
                        prop_assert_eq!(
                            partition::flows_back(&g, &su, &sd, &union, None, None, &mut reach),
                            expected,
                            "flows back between {:?} and {:?} without a rank in\n{}", up, down, text
                        );
                        for budget in [usize::MAX, 0, 3] {
                            prop_assert_eq!(
                                partition::flows_back(
                                    &g, &su, &sd, &union, Some(rank), Some(budget), &mut reach
                                ),
                                expected,
                                "flows back between {:?} and {:?} (budget {}) in\n{}",
                                up, down, budget, text
                            );
                        }
                    }
                }
                // Touching convex sub-graphs have a convex union (the property combining
                // relies on).
                if touches
                    && !has_cycle_through_outside(&f, up)
                    && !has_cycle_through_outside(&f, down)
                {
                    let union: BTreeSet<usize> = up.union(down).copied().collect();
                    prop_assert!(
                        !has_cycle_through_outside(&f, &union),
                        "union of touching {:?} and {:?} is not convex in\n{}", up, down, text
                    );
                }
                let u = su.disjoint_union(&g, &sd);
                if !up.is_disjoint(down) {
                    prop_assert!(u.is_none(), "overlapping union of {:?} and {:?}", up, down);
                    prop_assert!(su.clone().absorb(&g, &sd).is_err());
                    continue;
                }
                let u = u.expect("a disjoint union");
                let union: BTreeSet<usize> = up.union(down).copied().collect();
                prop_assert_eq!(to_set(&u.inside), union.clone());
                // The shallow union (greedy merging of large regions) derives the same boundary
                // from the parts', from either side; its depth is the size, an upper bound.
                for shallow in [su.plain_union_shallow(&g, &sd), sd.plain_union_shallow(&g, &su)] {
                    prop_assert_eq!(
                        (&shallow.inside, &shallow.entry, &shallow.exit, &shallow.input),
                        (&u.inside, &u.entry, &u.exit, &u.input),
                        "shallow union of {:?} and {:?} in\n{}", up, down, text
                    );
                    prop_assert_eq!((&shallow.output, shallow.kind), (&u.output, u.kind));
                    prop_assert_eq!(shallow.depth as usize, union.len());
                    prop_assert!(u.depth <= shallow.depth);
                }
                assert_matches(&g, &f, &u, &text);
                prop_assert_eq!(u.kind, su.kind.max(sd.kind));
                let label = match (su.label.is_empty(), sd.label.is_empty()) {
                    (true, _) => sd.label.clone(),
                    (_, true) => su.label.clone(),
                    _ => format!("{}+{}", su.label, sd.label),
                };
                prop_assert_eq!(&u.label, &label);
                let b = brute(&f, &union);
                prop_assert_eq!(u.is_valid(&g, &unlimited), brute_valid(&f, &union, &b, &unlimited));
                if up.is_empty() || down.is_empty() {
                    continue;
                }
                // Nesting: `Primitive` wrappers merge into one nested sub-graph over the
                // union; `Composite` wrappers never merge.
                let prim = vec![("Primitive".to_string(), AttrValue::int(1))];
                let pu = su
                    .with_attrs(&g, prim.clone())
                    .disjoint_union(&g, &sd.with_attrs(&g, prim.clone()))
                    .unwrap();
                // `absorb` is `disjoint_union` taking its left side, nested parts and all.
                let comp_x = vec![("Composite".to_string(), AttrValue::Str("x".into()))];
                for attrs in [None, Some(prim.clone()), Some(comp_x)] {
                    let wrap = |s: &SubGraph| match &attrs {
                        Some(a) => s.with_attrs(&g, a.clone()),
                        None => s.clone(),
                    };
                    let (l, r) = (wrap(&su), wrap(&sd));
                    let by_ref = l.disjoint_union(&g, &r).unwrap();
                    let owned = l.absorb(&g, &r).unwrap();
                    prop_assert_eq!(&owned, &by_ref);
                    prop_assert_eq!(
                        (&owned.entry, &owned.exit, &owned.input, &owned.output),
                        (&by_ref.entry, &by_ref.exit, &by_ref.input, &by_ref.output)
                    );
                    prop_assert_eq!(
                        (owned.depth, owned.kind, &owned.label),
                        (by_ref.depth, by_ref.kind, &by_ref.label)
                    );
                }
                prop_assert_eq!(pu.nested.len(), 1);
                prop_assert_eq!(to_set(&pu.nested[0].0.inside), union.clone());
                prop_assert_eq!(&pu.nested[0].1, &prim);
                let comp = |name: &str| vec![("Composite".to_string(), AttrValue::Str(name.into()))];
                let cu = su
                    .with_attrs(&g, comp("x"))
                    .disjoint_union(&g, &sd.with_attrs(&g, comp("x")))
                    .unwrap();
                prop_assert_eq!(cu.nested.len(), 2);
                let mut parts: Vec<BTreeSet<usize>> =
                    cu.nested.iter().map(|(n, _)| to_set(&n.inside)).collect();
                parts.sort();
                let mut expected = vec![up.clone(), down.clone()];
                expected.sort();
                prop_assert_eq!(parts, expected);
                // Nested sub-graphs are kept in sub-graph order.
                prop_assert!(cu.nested[0].0.order(&cu.nested[1].0).is_lt());
            }
        }
    }
}

proptest! {
    #![proptest_config(config())]

    /// `SubGraph::union_all` builds what absorbing the parts one after the other builds: the
    /// same nodes, boundary, depth, kind and label, and the same nested structure (`Primitive`
    /// wrappers merged level by level, composites side by side), for disjoint parts wrapped at
    /// random as BYOC candidates are.
    #[test]
    fn union_all_is_absorbing_in_order(
        params in 1u8..=3,
        steps in steps(),
        tuple_result in any::<bool>(),
        bytes in prop::collection::vec(any::<u8>(), 5 * 24),
        wraps in prop::collection::vec(0u8..4, 5),
    ) {
        let text = model_text(params, &steps, tuple_result);
        let m = load(&text);
        let g = DataflowGraph::new(&m, m.main().unwrap());
        let f = Facts::new(&m, &g);
        let prim = vec![("Primitive".to_string(), AttrValue::int(1))];
        let comp = |name: &str| vec![("Composite".to_string(), AttrValue::Str(name.into()))];
        let mut taken = BTreeSet::new();
        let mut parts = Vec::new();
        for (c, &w) in bytes.chunks(24).zip(&wraps) {
            let set: BTreeSet<usize> = subset(&g, &m, &f, c).difference(&taken).copied().collect();
            if set.is_empty() {
                continue;
            }
            taken.extend(set.iter().copied());
            let s = SubGraph::new(&g, index_set(&g, &set));
            parts.push(match w {
                0 => s,
                1 => s.with_attrs(&g, prim.clone()),
                2 => s.with_attrs(&g, comp("x")).with_attrs(&g, prim.clone()),
                _ => s.with_attrs(&g, comp("y")),
            });
        }
        prop_assume!(!parts.is_empty());
        let mut absorbed = parts[0].clone();
        for p in &parts[1..] {
            absorbed = absorbed.absorb(&g, p).expect("disjoint parts");
        }
        let all = SubGraph::union_all(&g, &parts.iter().collect::<Vec<_>>());
        prop_assert_eq!(format!("{all:?}"), format!("{absorbed:?}"), "in\n{}", text);
    }
}

/// The generator covers what it claims: on a fixed sample, every kind of node and a split with
/// its projections, a concatenate of a tuple, shared operands and tensor constants occur; and
/// the random subsets reach every outcome the properties distinguish (valid and invalid for
/// each reason, touching pairs, deep sub-graphs).
#[test]
fn generator_covers_the_node_kinds() {
    use proptest::strategy::ValueTree;
    let mut seen = BTreeSet::new();
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let strict = SubGraphConfig {
        max_depth: None,
        max_exits: 1,
        allow_taps: false,
    };
    for _ in 0..200 {
        let (params, steps, tuple_result, bytes) = (
            1u8..=3,
            steps(),
            any::<bool>(),
            prop::collection::vec(any::<u8>(), 4 * 24),
        )
            .new_tree(&mut runner)
            .unwrap()
            .current();
        let text = model_text(params, &steps, tuple_result);
        let m = load(&text);
        let g = DataflowGraph::new(&m, m.main().unwrap());
        for i in 0..g.len() {
            seen.insert(g.label[i].clone());
            if g.outputs(i).len() > 1 && g.kind[i] != OpPattern::Opaque {
                seen.insert("shared".to_string());
            }
        }
        let f = Facts::new(&m, &g);
        let sets: Vec<BTreeSet<usize>> = bytes.chunks(24).map(|c| subset(&g, &m, &f, c)).collect();
        for (k, inside) in sets.iter().enumerate() {
            let b = brute(&f, inside);
            if inside.len() > 1 && brute_valid(&f, inside, &b, &strict) {
                seen.insert("valid".into());
            }
            if has_cycle_through_outside(&f, inside) {
                seen.insert("not convex".into());
            }
            if b.exit.len() > 1 {
                seen.insert("several exits".into());
            }
            if b.exit
                .iter()
                .any(|&x| f.outputs[x].iter().any(|o| inside.contains(o)))
            {
                seen.insert("tap".into());
            }
            if b.depth >= 3 {
                seen.insert("deep".into());
            }
            let next = &sets[(k + 1) % sets.len()];
            if brute_touches(&f, inside, next) || brute_touches(&f, next, inside) {
                seen.insert("touching".into());
            }
        }
    }
    for label in [
        "nn.relu",
        "add",
        "transpose",
        "reshape",
        "nn.dense",
        "concatenate",
        "tuple",
        "split",
        "proj",
        "const",
        "scalar",
        "shared",
        "valid",
        "not convex",
        "several exits",
        "tap",
        "deep",
        "touching",
    ] {
        assert!(seen.contains(label), "no `{label}` generated");
    }
}
