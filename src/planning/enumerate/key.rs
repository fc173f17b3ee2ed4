//! Structural keys of candidates: two candidates with equal keys have the same structure
//! (operators, attributes, types, the dataflow among their nodes, exits and nested functions)
//! and the same target, so they cost the same (the cost cache asks once per key). Keys are exact
//! (no hashing), cheap to build (one interned signature per node) and independent of where the
//! candidate sits in the graph, so the identical layers of a transformer share their keys. The
//! finer [`Signatures::function_key`] says when two candidates extract into the same function,
//! so that finalize can outline one global for both.
//!
//! A [`fingerprint`] is the stable, printable form used by `table:` cost files: a 64-bit FNV-1a
//! hash over the signature *texts*, so it does not depend on the interning order.

use super::subgraph::FnAttrs;
use super::{Candidate, DataflowGraph, SubGraph};
use crate::ir::{Callee, Constant, Expr};
use std::collections::HashMap;

/// A candidate's structural key.
pub type Key = Vec<u32>;

/// Per-graph signatures of nodes, interned.
pub struct Signatures {
    /// The interned id of each node's signature.
    id: Vec<u32>,
    /// The interned id of each node's signature as an operand from outside a candidate.
    param: Vec<u32>,
    /// Interned attribute lists of nested functions.
    attrs: rustc_hash::FxHashMap<FnAttrs, u32>,
    /// Interned meta table keys (`relay.Constant`) of constants kept in extracted functions.
    meta_keys: Vec<String>,
}

const INSIDE: u32 = 1 << 31;

impl Signatures {
    /// Signatures of every node of the graph.
    pub fn new(g: &DataflowGraph<'_>) -> Signatures {
        let mut intern: HashMap<String, u32> = HashMap::new();
        let mut id = Vec::with_capacity(g.len());
        let mut param = Vec::with_capacity(g.len());
        for i in 0..g.len() {
            for (s, out) in [
                (node_signature(g, i), &mut id),
                (param_signature(g, i), &mut param),
            ] {
                let next = intern.len() as u32;
                out.push(*intern.entry(s).or_insert(next));
            }
        }
        let attrs = Default::default();
        Signatures {
            id,
            param,
            attrs,
            meta_keys: Vec::new(),
        }
    }

    /// The key of a candidate.
    pub fn key(&mut self, g: &DataflowGraph<'_>, c: &Candidate) -> Key {
        let mut out = vec![c.target as u32];
        self.sub_graph(g, &c.sub_graph, &mut out);
        out
    }

    /// The key of the function a candidate is extracted into: equal keys mean equal extracted
    /// functions (parameter for parameter, constants included), so one global can serve both
    /// call sites. Unlike [`Signatures::key`], the inside nodes and the parameters are numbered
    /// in the order of the extraction walk ([`super::extract::walk`]), which depends
    /// only on the structure: sub-graphs whose nodes sit in another order in the graph but that
    /// extract into the same function get the same key. The tensor constants inside the
    /// candidate (which extraction keeps in the function's body, as patterns matching `const`
    /// do), and the scalar ones it copies in from outside (inlinable operands, which the
    /// structure names by type only), are named by their meta table entry, in walk order: two
    /// call sites share a global only if their functions hold the same constants.
    pub fn function_key(&mut self, g: &DataflowGraph<'_>, c: &Candidate) -> Key {
        let mut out = vec![c.target as u32];
        self.function(g, &c.sub_graph, &mut out);
        for i in super::extract::walk(g, &c.sub_graph).members {
            let copied_in = operand_nodes(g, i)
                .into_iter()
                .filter(|&j| g.inlinable[j] && !c.sub_graph.inside.contains(j));
            for n in std::iter::once(i).chain(copied_in) {
                let Some(Expr::Const(Constant::Meta { key, index, .. })) =
                    g.expr(n).map(|e| g.module.expr(e))
                else {
                    continue;
                };
                let k = match self.meta_keys.iter().position(|x| x == key) {
                    Some(k) => k,
                    None => {
                        self.meta_keys.push(key.clone());
                        self.meta_keys.len() - 1
                    }
                };
                out.extend([u32::MAX - 1, k as u32, *index]);
            }
        }
        out
    }

    fn function(&mut self, g: &DataflowGraph<'_>, sg: &SubGraph, out: &mut Key) {
        let walk = super::extract::walk(g, sg);
        let number = |order: &[usize]| -> HashMap<usize, u32> {
            order
                .iter()
                .enumerate()
                .map(|(k, &i)| (i, k as u32))
                .collect()
        };
        let (members, params) = (number(&walk.members), number(&walk.params));
        out.push(walk.members.len() as u32);
        for &i in &walk.members {
            out.push(self.id[i]);
            let operands = operand_nodes(g, i);
            out.push(operands.len() as u32);
            for j in operands {
                match members.get(&j) {
                    Some(&p) => out.push(INSIDE | p),
                    None => {
                        // An operand that is no parameter is copied in: its signature says what.
                        out.push(params.get(&j).copied().unwrap_or(u32::MAX));
                        out.push(self.param[j]);
                    }
                }
            }
        }
        // The results, in the order of the result tuple.
        for i in sg.exit.iter() {
            if let Some(&p) = members.get(&i) {
                out.push(p);
            }
        }
        out.push(u32::MAX);
        // Nested functions, in the order of their first node in the walk.
        let mut nested: Vec<(Vec<u32>, usize)> = sg
            .nested
            .iter()
            .enumerate()
            .map(|(k, (sub, _))| {
                let mut at: Vec<u32> = sub
                    .inside
                    .iter()
                    .filter_map(|i| members.get(&i).copied())
                    .collect();
                at.sort_unstable();
                (at, k)
            })
            .collect();
        nested.sort();
        out.push(nested.len() as u32);
        for (at, k) in nested {
            let (sub, attrs) = &sg.nested[k];
            let a = self.attrs_id(attrs);
            out.push(a);
            out.extend(at);
            out.push(u32::MAX);
            self.function(g, sub, out);
        }
    }

    fn attrs_id(&mut self, attrs: &FnAttrs) -> u32 {
        match self.attrs.get(attrs) {
            Some(&a) => a,
            None => {
                let next = self.attrs.len() as u32;
                self.attrs.insert(attrs.clone(), next);
                next
            }
        }
    }

    fn sub_graph(&mut self, g: &DataflowGraph<'_>, sg: &SubGraph, out: &mut Key) {
        let members: Vec<usize> = sg.inside.iter().collect();
        let local = |i: usize| members.binary_search(&i).ok();
        let mut params: Vec<usize> = Vec::new();
        out.push(members.len() as u32);
        for &i in &members {
            out.push(self.id[i]);
            let operands = operand_nodes(g, i);
            out.push(operands.len() as u32);
            for j in operands {
                match local(j) {
                    Some(p) => out.push(INSIDE | p as u32),
                    None => {
                        let p = match params.iter().position(|&q| q == j) {
                            Some(p) => p,
                            None => {
                                params.push(j);
                                params.len() - 1
                            }
                        };
                        out.push(p as u32);
                        out.push(self.param[j]);
                    }
                }
            }
        }
        for i in sg.exit.iter() {
            if let Some(p) = local(i) {
                out.push(p as u32);
            }
        }
        out.push(u32::MAX);
        out.push(sg.nested.len() as u32);
        for (sub, attrs) in &sg.nested {
            let a = self.attrs_id(attrs);
            out.push(a);
            for i in sub.inside.iter() {
                if let Some(p) = local(i) {
                    out.push(p as u32);
                }
            }
            out.push(u32::MAX);
            self.sub_graph(g, sub, out);
        }
    }
}

/// The graph nodes of an expression node's operands, in operand order (with repetitions).
fn operand_nodes(g: &DataflowGraph<'_>, i: usize) -> Vec<usize> {
    let Some(e) = g.expr(i) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    if let Expr::Call {
        callee: Callee::Op(_),
        args,
        ..
    } = g.module.expr(e)
    {
        out.extend(args.iter().filter_map(|&a| g.node(a)));
    } else {
        g.module.for_each_operand(e, |o| {
            if let Some(n) = g.node(o) {
                out.push(n);
            }
        });
    }
    out
}

/// What a node is, independent of its position: operator, attributes, type, scalar value.
fn node_signature(g: &DataflowGraph<'_>, i: usize) -> String {
    let m = g.module;
    let Some(e) = g.expr(i) else {
        return format!("node {}", g.label[i]);
    };
    let ty = m.ty(e).map_or_else(|| "?".to_string(), |t| t.to_string());
    match m.expr(e) {
        Expr::Call {
            callee: Callee::Op(op),
            attrs,
            ..
        } => format!("{}{:?}:{ty}", crate::ops::registry().get(*op).name, attrs),
        Expr::Call { .. } => format!("call:{ty}"),
        Expr::Const(Constant::Scalar { value, dtype }) => format!("const {value:?}{dtype}:{ty}"),
        Expr::Const(Constant::Meta { .. }) => format!("const:{ty}"),
        Expr::Tuple(_) => format!("tuple:{ty}"),
        Expr::Proj { index, .. } => format!("proj.{index}:{ty}"),
        Expr::Var(_) => format!("var:{ty}"),
        Expr::Global(gl) => format!("global @{}", m.globals[gl.index()].name),
        Expr::Op(op) => format!("op {}", crate::ops::registry().get(*op).name),
        // Function literals, lets and ifs are distinct per occurrence.
        Expr::Func(_) | Expr::Let { .. } | Expr::If { .. } => format!("unique #{i}:{ty}"),
    }
}

/// What an operand from outside a candidate is to the candidate: a parameter of its type, unless
/// extraction keeps it in the function (constants, operators, globals, function literals). Who
/// produces the value does not matter, so `nn.relu(%x)` and `nn.relu(abs(%x))` have the same
/// structure.
fn param_signature(g: &DataflowGraph<'_>, i: usize) -> String {
    let m = g.module;
    match g.expr(i).map(|e| (e, m.expr(e))) {
        Some((e, Expr::Call { .. } | Expr::Tuple(_) | Expr::Proj { .. } | Expr::Var(_))) => {
            let ty = m.ty(e).map_or_else(|| "?".to_string(), |t| t.to_string());
            format!("param:{ty}")
        }
        _ => node_signature(g, i),
    }
}

/// The stable fingerprint of a candidate: 16 hex digits, equal for structurally equal
/// candidates of the same target in any model.
pub fn fingerprint(g: &DataflowGraph<'_>, c: &Candidate, target: &str) -> String {
    let mut h = Fnv::new();
    h.write(target.as_bytes());
    fingerprint_sub_graph(g, &c.sub_graph, &mut h);
    format!("{:016x}", h.0)
}

/// The stable structural key of a candidate for persistent caches: the [`fingerprint`]'s walk
/// hashed to 128 bits (32 hex digits), equal for structurally equal candidates of the same
/// target in any model and any process.
pub fn stable_key(g: &DataflowGraph<'_>, c: &Candidate, target: &str) -> String {
    let mut h = Fnv128::new();
    h.write(target.as_bytes());
    fingerprint_sub_graph(g, &c.sub_graph, &mut h);
    format!("{:032x}", h.0)
}

/// What the fingerprint walk feeds its texts and numbers to.
trait Sink {
    fn write(&mut self, bytes: &[u8]);
    fn write_u64(&mut self, v: u64) {
        self.write(&v.to_le_bytes());
    }
}

fn fingerprint_sub_graph(g: &DataflowGraph<'_>, sg: &SubGraph, h: &mut dyn Sink) {
    let members: Vec<usize> = sg.inside.iter().collect();
    let local = |i: usize| members.binary_search(&i).ok();
    let mut params: Vec<usize> = Vec::new();
    h.write_u64(members.len() as u64);
    for &i in &members {
        h.write(node_signature(g, i).as_bytes());
        for j in operand_nodes(g, i) {
            match local(j) {
                Some(p) => h.write_u64(p as u64),
                None => {
                    let p = params.iter().position(|&q| q == j).unwrap_or_else(|| {
                        params.push(j);
                        params.len() - 1
                    });
                    h.write_u64(1 << 40 | p as u64);
                    h.write(param_signature(g, j).as_bytes());
                }
            }
        }
        h.write_u64(u64::MAX);
    }
    for i in sg.exit.iter() {
        if let Some(p) = local(i) {
            h.write_u64(p as u64);
        }
    }
    for (sub, attrs) in &sg.nested {
        h.write(format!("{attrs:?}").as_bytes());
        for i in sub.inside.iter() {
            if let Some(p) = local(i) {
                h.write_u64(p as u64);
            }
        }
        fingerprint_sub_graph(g, sub, h);
    }
}

/// 64-bit FNV-1a.
struct Fnv(u64);

impl Fnv {
    fn new() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl Sink for Fnv {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
        // A separator, so that ("ab", "c") and ("a", "bc") differ.
        self.0 ^= 0xff;
        self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
    }
}

/// 128-bit FNV-1a.
struct Fnv128(u128);

impl Fnv128 {
    fn new() -> Fnv128 {
        Fnv128(0x6c62_272e_07bb_0142_62b8_2175_6295_c58d)
    }
}

impl Sink for Fnv128 {
    fn write(&mut self, bytes: &[u8]) {
        const PRIME: u128 = 0x0000_0000_0100_0000_0000_0000_0000_013b;
        for &b in bytes {
            self.0 ^= u128::from(b);
            self.0 = self.0.wrapping_mul(PRIME);
        }
        self.0 ^= 0xff;
        self.0 = self.0.wrapping_mul(PRIME);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::dataflow::IndexSet;
    use crate::source::SourceMap;

    #[test]
    fn producers_outside_do_not_change_the_structure() {
        let text = "#[version = \"0.0.5\"]\n\
            def @main(%x: Tensor[(2, 2), float32]) {\n  \
            %0 = nn.relu(%x);\n  %1 = abs(%0);\n  %2 = nn.relu(%1);\n  \
            %3 = nn.relu(meta[relay.Constant][0] /* ty=Tensor[(2, 2), float32] */);\n  \
            (%2, %3)\n}\n";
        let mut sources = SourceMap::new();
        let file = sources.add("t.relay", text);
        let m = match crate::frontend::relay::load(&sources, file) {
            Ok(m) => m,
            Err(d) => panic!("{}", d.render_plain(&sources)),
        };
        let g = DataflowGraph::new(&m, m.main().unwrap());
        let relus: Vec<usize> = (0..g.len()).filter(|&i| g.label[i] == "nn.relu").collect();
        assert_eq!(relus.len(), 3);
        let single = |i: usize| Candidate {
            target: 0,
            sub_graph: SubGraph::new(&g, IndexSet::from_indices(g.len(), [i])),
            rule_name: String::new(),
        };
        let mut sigs = Signatures::new(&g);
        let keys: Vec<Key> = relus.iter().map(|&i| sigs.key(&g, &single(i))).collect();
        let prints: Vec<String> = relus
            .iter()
            .map(|&i| fingerprint(&g, &single(i), "t"))
            .collect();
        // relu(%x) and relu(abs(..)): one structure. relu(constant): the constant is kept in
        // the extracted function, so another one.
        assert_eq!(keys[0], keys[1]);
        assert_eq!(prints[0], prints[1]);
        assert_ne!(keys[0], keys[2]);
        assert_ne!(prints[0], prints[2]);
        let stable: Vec<String> = relus
            .iter()
            .map(|&i| stable_key(&g, &single(i), "t"))
            .collect();
        assert_eq!(stable[0], stable[1]);
        assert_ne!(stable[0], stable[2]);
        assert_eq!(stable[0].len(), 32);
        assert_ne!(stable[0], stable_key(&g, &single(relus[0]), "u"));
    }

    #[test]
    fn constants_inside_a_function_name_it() {
        let text = "#[version = \"0.0.5\"]\n\
            def @main(%x: Tensor[(2, 2), float32]) {\n  \
            %0 = multiply(%x, meta[relay.Constant][0] /* ty=Tensor[(2), float32] */);\n  \
            %1 = multiply(%0, meta[relay.Constant][1] /* ty=Tensor[(2), float32] */);\n  \
            (%0, %1)\n}\n";
        let m = crate::frontend::relay::load_text(text);
        let g = DataflowGraph::new(&m, m.main().unwrap());
        let muls: Vec<usize> = (0..g.len()).filter(|&i| g.label[i] == "multiply").collect();
        assert_eq!(muls.len(), 2);
        // Each multiply with its constant inside, as a pattern matching `const` makes it.
        let with_constant = |i: usize| {
            let c = g
                .inputs(i)
                .iter()
                .map(|n| n.index())
                .find(|&j| g.label[j] == "const")
                .unwrap();
            Candidate {
                target: 0,
                sub_graph: SubGraph::new(&g, IndexSet::from_indices(g.len(), [c, i])),
                rule_name: String::new(),
            }
        };
        let mut sigs = Signatures::new(&g);
        let (a, b) = (with_constant(muls[0]), with_constant(muls[1]));
        // One structure, so one cost; but not one function: the constants differ.
        assert_eq!(sigs.key(&g, &a), sigs.key(&g, &b));
        assert_ne!(sigs.function_key(&g, &a), sigs.function_key(&g, &b));
        assert_eq!(sigs.function_key(&g, &a), sigs.function_key(&g, &a.clone()));
    }

    /// Scalar meta constants are copied into the extracted function rather than passed (they are
    /// inlinable), so they too tell functions apart; constant literals and the same constant do
    /// not.
    #[test]
    fn scalar_constants_copied_in_name_it() {
        let text = "#[version = \"0.0.5\"]\n\
            def @main(%x: Tensor[(2), float32]) {\n  \
            %0 = multiply(%x, meta[relay.Constant][0] /* ty=float32 */);\n  \
            %1 = multiply(%0, meta[relay.Constant][1] /* ty=float32 */);\n  \
            %2 = multiply(%1, meta[relay.Constant][0] /* ty=float32 */);\n  \
            %3 = multiply(%2, 2f);\n  \
            %4 = multiply(%3, 2f);\n  \
            (%0, %1, %2, %3, %4)\n}\n";
        let m = crate::frontend::relay::load_text(text);
        let g = DataflowGraph::new(&m, m.main().unwrap());
        let muls: Vec<usize> = (0..g.len()).filter(|&i| g.label[i] == "multiply").collect();
        assert_eq!(muls.len(), 5);
        let single = |i: usize| Candidate {
            target: 0,
            sub_graph: SubGraph::new(&g, IndexSet::from_indices(g.len(), [i])),
            rule_name: String::new(),
        };
        let mut sigs = Signatures::new(&g);
        let keys: Vec<Key> = muls.iter().map(|&i| sigs.key(&g, &single(i))).collect();
        let functions: Vec<Key> = muls
            .iter()
            .map(|&i| sigs.function_key(&g, &single(i)))
            .collect();
        // By post-DFS index: %0 (constant 0), %1 (constant 1), %2 (constant 0), %3, %4 (2f).
        assert_eq!(keys[0], keys[1]);
        assert_ne!(functions[0], functions[1]);
        assert_eq!(functions[0], functions[2]);
        assert_eq!(functions[3], functions[4]);
    }
}
