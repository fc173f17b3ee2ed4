//! `collage fuse`: TVM's greedy FuseOps partitioner (docs/fuse.md).
//!
//! * The worked examples of docs/fuse.md (fixtures in `tests/fixtures/fuse/`), checked against
//!   the graph, post-dominator and group tables derived from them by hand, including the
//!   size-limit variants and the phase-by-phase behaviour of the tuple example.
//! * The consistency cases (docs/fuse.md, "TVM's own fusion tests"): graphs of TVM's own Relay
//!   fusion tests with their expected partitions, plus the long-chain and chained-diamond
//!   size-limit tests.
//! * Invariants on the 13 corpus models: every operator call is in exactly one group, groups are
//!   disjoint, connected and convex.
//! * Snapshots of the JSON and text output, and the command's exit codes.

use crate::support::{collage, load_ok, load_text, root};
use collage::analysis::fuse::graph::ForwardGraph;
use collage::analysis::fuse::partition::{Groups, Partitioner};
use collage::analysis::fuse::postdom::PostDomTree;
use collage::analysis::fuse::{fuse, FuseResult, DEFAULT_MAX_DEPTH};
use collage::driver::{fuse_json, fuse_node_desc, fuse_node_name, fuse_text};
use collage::ir::{Callee, Expr, ExprId, Module};
use collage::ops::OpPattern::{self, *};

fn fixture(name: &str) -> Module {
    load_ok(
        &root()
            .join("tests/fixtures/fuse")
            .join(format!("{name}.relay")),
    )
}

fn model(name: &str) -> Module {
    load_ok(&root().join("tests/models").join(format!("{name}.relay")))
}

fn text(name: &str, src: &str) -> Module {
    let (sources, _, result) = load_text(name, src);
    match result {
        Ok(m) => m,
        Err(d) => panic!("{name} failed to load:\n{}", d.render_plain(&sources)),
    }
}

fn run(m: &Module, max_depth: usize) -> FuseResult {
    fuse(m, m.main().expect("a main function"), max_depth)
}

fn is_op_call(m: &Module, e: ExprId) -> bool {
    matches!(
        m.expr(e),
        Expr::Call {
            callee: Callee::Op(_),
            ..
        }
    )
}

/// The non-trivial groups (more than one node, or an operator call), each as
/// `"name:what name:what ..."` in post-DFS order, then the total number of groups.
fn describe(m: &Module, r: &FuseResult) -> (Vec<String>, usize) {
    let idx = r.index_of();
    let groups = r
        .groups
        .iter()
        .filter(|g| g.nodes.len() > 1 || g.nodes.iter().any(|&e| is_op_call(m, e)))
        .map(|g| {
            g.nodes
                .iter()
                .map(|&e| format!("{}:{}", fuse_node_name(m, e, idx[&e]), fuse_node_desc(m, e)))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    (groups, r.groups.len())
}

fn assert_groups(m: &Module, r: &FuseResult, expected: &[&str], total: usize) {
    let (groups, n) = describe(m, r);
    assert_eq!(groups, expected, "non-trivial groups");
    assert_eq!(n, total, "number of groups (singletons included)");
}

/// The group (pattern, anchor name) whose root has the given name.
fn group_of_root(m: &Module, r: &FuseResult, root: &str) -> (OpPattern, Option<String>) {
    let idx = r.index_of();
    let g = r
        .groups
        .iter()
        .find(|g| fuse_node_name(m, g.root, idx[&g.root]) == root)
        .unwrap_or_else(|| panic!("no group rooted at {root}"));
    (g.pattern, g.anchor.map(|a| fuse_node_name(m, a, idx[&a])))
}

type Row = (OpPattern, bool, Vec<(u32, OpPattern)>);

fn graph_rows(g: &ForwardGraph) -> Vec<Row> {
    g.nodes
        .iter()
        .map(|n| {
            (
                n.pattern,
                n.extern_ref,
                n.outputs.iter().map(|e| (e.node, e.pattern)).collect(),
            )
        })
        .collect()
}

fn tree_rows(t: &PostDomTree) -> Vec<(Option<u32>, u32, OpPattern)> {
    (0..t.len())
        .map(|i| (t.parent[i], t.depth[i], t.pattern[i]))
        .collect()
}

fn graph_and_tree(m: &Module) -> (ForwardGraph, PostDomTree) {
    let g = ForwardGraph::build(m, m.main().unwrap());
    let t = PostDomTree::build(&g);
    (g, t)
}

// ---------------------------------------------------------------------------------------------
// Example A (docs/fuse.md)

#[test]
fn example_a_graph_and_tree_match_the_reference_tables() {
    let m = fixture("example-a-conv-chain");
    let (g, t) = graph_and_tree(&m);
    let names: Vec<String> = g
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| {
            format!(
                "{}:{}",
                fuse_node_name(&m, n.expr, i),
                fuse_node_desc(&m, n.expr)
            )
        })
        .collect();
    assert_eq!(
        names,
        [
            "%x:var",
            "%w1:var",
            "%w2:var",
            "%0:nn.conv2d",
            "#4:const",
            "%1:add",
            "%2:nn.relu",
            "%3:nn.max_pool2d",
            "%4:reshape",
            "%5:nn.dense",
            "#10:const",
            "#11:add"
        ]
    );
    let oef = OutEWiseFusable;
    assert_eq!(
        graph_rows(&g),
        vec![
            (Opaque, true, vec![(3, oef)]),
            (Opaque, true, vec![(3, oef)]),
            (Opaque, true, vec![(9, oef)]),
            // conv2d -> add: add is broadcast, but the shapes are equal.
            (oef, false, vec![(5, ElemWise)]),
            (Opaque, false, vec![(5, Broadcast)]),
            (Broadcast, false, vec![(6, ElemWise)]),
            (ElemWise, false, vec![(7, oef)]),
            (oef, false, vec![(8, Injective)]),
            (Injective, false, vec![(9, oef)]),
            (oef, false, vec![(11, ElemWise)]),
            (Opaque, false, vec![(11, Broadcast)]),
            (Broadcast, true, vec![]),
        ]
    );
    assert_eq!(
        tree_rows(&t),
        vec![
            (None, 1, Opaque),
            (None, 1, Opaque),
            (None, 1, Opaque),
            (Some(5), 7, ElemWise),
            (Some(5), 7, Broadcast),
            (Some(6), 6, ElemWise),
            (Some(7), 5, oef),
            (Some(8), 4, Injective),
            (Some(9), 3, oef),
            (Some(11), 2, ElemWise),
            (Some(11), 2, Broadcast),
            (None, 1, Opaque),
        ]
    );
}

#[test]
fn example_a_groups() {
    let m = fixture("example-a-conv-chain");
    let (g, t) = graph_and_tree(&m);
    // After phase 0 the groups are final: conv2d + add + relu (root relu, n = 3) and
    // dense + add; phase 1 tries the reshape into the dense group and fails (OEF sink).
    let mut p = Partitioner::new(&g, &t, DEFAULT_MAX_DEPTH);
    p.run_phase(0);
    let after0 = roots(&mut p.groups, g.len());
    assert_eq!(after0, [0, 1, 2, 6, 4, 6, 6, 7, 8, 11, 10, 11]);
    assert_eq!(p.groups.elems[6].num_nodes, 3);
    assert_eq!(p.groups.elems[6].anchor, Some(3));
    assert_eq!(p.groups.elems[6].pattern, OutEWiseFusable);
    p.run_phase(1);
    p.run_phase(2);
    assert_eq!(roots(&mut p.groups, g.len()), after0);

    let r = run(&m, DEFAULT_MAX_DEPTH);
    assert_groups(
        &m,
        &r,
        &[
            "%0:nn.conv2d %1:add %2:nn.relu",
            "%3:nn.max_pool2d",
            "%4:reshape",
            "%5:nn.dense #11:add",
        ],
        9,
    );
    assert_eq!(
        group_of_root(&m, &r, "%2"),
        (OutEWiseFusable, Some("%0".into()))
    );
    assert_eq!(
        group_of_root(&m, &r, "%3"),
        (OutEWiseFusable, Some("%3".into()))
    );
    assert_eq!(group_of_root(&m, &r, "%4"), (Injective, None));
    assert_eq!(
        group_of_root(&m, &r, "#11"),
        (OutEWiseFusable, Some("%5".into()))
    );
}

fn roots(groups: &mut Groups, n: usize) -> Vec<u32> {
    (0..n as u32).map(|i| groups.find(i)).collect()
}

// ---------------------------------------------------------------------------------------------
// Example B (docs/fuse.md)

#[test]
fn example_b_diamond_is_one_group() {
    let m = fixture("example-b-diamond");
    let (g, t) = graph_and_tree(&m);
    assert_eq!(
        graph_rows(&g),
        vec![
            (Opaque, true, vec![(1, ElemWise)]),
            (ElemWise, false, vec![(2, ElemWise), (3, ElemWise)]),
            (ElemWise, false, vec![(4, ElemWise)]),
            (ElemWise, false, vec![(4, ElemWise)]),
            (Broadcast, true, vec![]),
        ]
    );
    assert_eq!(
        tree_rows(&t),
        vec![
            (None, 1, Opaque),
            (Some(4), 2, ElemWise),
            (Some(4), 2, ElemWise),
            (Some(4), 2, ElemWise),
            (None, 1, Opaque),
        ]
    );
    let r = run(&m, DEFAULT_MAX_DEPTH);
    assert_groups(&m, &r, &["%0:nn.relu %1:exp %2:sqrt #4:add"], 2);
    // The sink's kind, no anchor.
    assert_eq!(group_of_root(&m, &r, "#4"), (Broadcast, None));
}

#[test]
fn example_b_size_limit_variants() {
    let m = fixture("example-b-diamond");
    // Limit 3: relu is refused in phase 0 (1 + 3 = 4 > 3) and again in phase 1 because the
    // exp and sqrt already in the add's group are counted twice (3 + 3 = 6 > 3).
    let (g, t) = graph_and_tree(&m);
    let mut p = Partitioner::new(&g, &t, 3);
    assert_eq!(p.count_fused_nodes_with_new_child(1, 4), 4);
    p.run_phase(0);
    assert_eq!(roots(&mut p.groups, 5), [0, 1, 4, 4, 4]);
    assert_eq!(p.count_fused_nodes_with_new_child(1, 4), 6);
    let r = run(&m, 3);
    assert_groups(&m, &r, &["%0:nn.relu", "%1:exp %2:sqrt #4:add"], 3);
    // Limit 4: a group may reach exactly the limit.
    let r = run(&m, 4);
    assert_groups(&m, &r, &["%0:nn.relu %1:exp %2:sqrt #4:add"], 2);
}

#[test]
fn example_b_injective_branch_still_fuses() {
    let m = fixture("example-b-diamond-injective");
    let (_, t) = graph_and_tree(&m);
    assert_eq!(t.pattern[1], Injective);
    let r = run(&m, DEFAULT_MAX_DEPTH);
    assert_groups(&m, &r, &["%0:nn.relu %1:exp %2:squeeze #4:add"], 2);
}

#[test]
fn example_b_out_ewise_fusable_branch_blocks_the_source() {
    let m = fixture("example-b-diamond-softmax");
    let (_, t) = graph_and_tree(&m);
    assert_eq!(t.pattern[1], OutEWiseFusable);
    let r = run(&m, DEFAULT_MAX_DEPTH);
    assert_groups(&m, &r, &["%0:nn.relu", "%1:exp %2:nn.softmax #4:add"], 3);
    assert_eq!(
        group_of_root(&m, &r, "#4"),
        (OutEWiseFusable, Some("%2".into()))
    );
}

// ---------------------------------------------------------------------------------------------
// Example C (docs/fuse.md)

#[test]
fn example_c_tuple_phases() {
    let m = fixture("example-c-tuple-concat");
    let (g, t) = graph_and_tree(&m);
    assert_eq!(
        graph_rows(&g),
        vec![
            (Opaque, true, vec![(2, OutEWiseFusable)]),
            (Opaque, true, vec![(3, ElemWise)]),
            (OutEWiseFusable, false, vec![(4, Injective)]),
            (ElemWise, false, vec![(4, Injective)]),
            (Tuple, false, vec![(5, Injective)]),
            (Injective, false, vec![(7, ElemWise)]),
            (ElemWise, false, vec![(7, Broadcast)]),
            (Broadcast, true, vec![]),
        ]
    );
    assert_eq!(
        tree_rows(&t),
        vec![
            (None, 1, Opaque),
            (None, 1, Opaque),
            (Some(4), 4, Injective),
            (Some(4), 4, Injective),
            (Some(5), 3, Injective),
            (Some(7), 2, ElemWise),
            (Some(7), 2, Broadcast),
            (None, 1, Opaque),
        ]
    );
    let mut p = Partitioner::new(&g, &t, DEFAULT_MAX_DEPTH);
    p.run_phase(0);
    // Only the scalar constant joined the add.
    assert_eq!(roots(&mut p.groups, 8), [0, 1, 2, 3, 4, 5, 7, 7]);
    p.run_phase(1);
    // The tuple joined the concatenate (kind stays injective), which joined the add.
    assert_eq!(roots(&mut p.groups, 8), [0, 1, 2, 3, 7, 7, 7, 7]);
    assert_eq!(p.groups.elems[5].pattern, Injective);
    assert_eq!(p.groups.elems[7].num_nodes, 4);
    assert_eq!(p.groups.elems[7].pattern, Broadcast);
    p.run_phase(2);
    // The exp joins through the tuple; the max_pool2d (OEF > injective) does not.
    assert_eq!(roots(&mut p.groups, 8), [0, 1, 2, 7, 7, 7, 7, 7]);
    assert_eq!(p.groups.elems[7].num_nodes, 5);

    let r = run(&m, DEFAULT_MAX_DEPTH);
    assert_groups(
        &m,
        &r,
        &[
            "%0:nn.max_pool2d",
            "%1:exp %2:tuple %3:concatenate #6:const #7:add",
        ],
        4,
    );
    assert_eq!(group_of_root(&m, &r, "#7"), (Broadcast, None));
}

// ---------------------------------------------------------------------------------------------
// Consistency with TVM's own fusion tests (docs/fuse.md)

#[test]
fn tvm_conv2d_fuse_only_the_earlier_conv_joins_the_final_add() {
    let m = fixture("tvm-conv2d-fuse");
    let r = run(&m, DEFAULT_MAX_DEPTH);
    assert_groups(
        &m,
        &r,
        &[
            "#4:const %0:add",
            "%1:nn.conv2d #7:const %2:add %3:add",
            "%5:nn.conv2d",
            "%4:nn.conv2d #12:add",
        ],
        8,
    );
}

#[test]
fn tvm_concatenate_and_tuple_tests() {
    let m = fixture("tvm-concatenate");
    let r = run(&m, DEFAULT_MAX_DEPTH);
    assert_groups(
        &m,
        &r,
        &[
            "%0:nn.max_pool2d",
            "%1:nn.upsampling %2:tuple %3:concatenate #5:const #6:add",
        ],
        3,
    );

    // A tuple that is the function result stays its own group.
    let m = fixture("tvm-tuple-root");
    let r = run(&m, DEFAULT_MAX_DEPTH);
    assert_groups(&m, &r, &["%0:nn.max_pool2d", "%1:nn.upsampling"], 4);
    assert_eq!(group_of_root(&m, &r, "#3"), (Tuple, None));

    let m = fixture("tvm-tuple-get-elemwise");
    let r = run(&m, DEFAULT_MAX_DEPTH);
    assert_groups(
        &m,
        &r,
        &[
            "%0:nn.dense",
            "%1:split %2:.0 %3:sigmoid %4:.1 %5:tanh %6:.2 %7:exp %8:multiply #11:add",
        ],
        4,
    );

    let m = fixture("tvm-tuple-get-root");
    let r = run(&m, DEFAULT_MAX_DEPTH);
    assert_groups(&m, &r, &["%0:split %1:.0", "#4:nn.dense"], 4);

    let m = fixture("tvm-tuple-intermediate");
    let r = run(&m, DEFAULT_MAX_DEPTH);
    let (groups, n) = describe(&m, &r);
    assert_eq!((groups.len(), n), (1, 2), "{groups:?}");
    assert_eq!(r.groups[1].nodes.len(), 15);

    // Three intermediate tuples and the outer concatenate fuse into one group; the pooling op
    // takes the first add; the second add and the result tuple stay alone.
    let m = fixture("tvm-tuple-consecutive");
    let r = run(&m, DEFAULT_MAX_DEPTH);
    let (groups, n) = describe(&m, &r);
    assert_eq!(n, 5);
    assert_eq!(groups.len(), 3);
    assert!(groups[0].starts_with("#1:const %0:add "), "{}", groups[0]);
    assert!(
        groups[0].ends_with(" %18:tuple %19:concatenate"),
        "{}",
        groups[0]
    );
    assert_eq!(r.groups[1].nodes.len(), 32);
    assert_eq!(groups[1], "%20:nn.max_pool2d #34:const %21:add");
    assert_eq!(groups[2], "#36:const %22:add");
}

#[test]
fn tvm_inception_like() {
    let m = fixture("tvm-inception-like");
    let r = run(&m, DEFAULT_MAX_DEPTH);
    assert_groups(
        &m,
        &r,
        &[
            "%0:nn.conv2d %1:nn.relu",
            "%2:nn.conv2d %3:nn.relu",
            "%4:tuple %5:concatenate",
            "%6:nn.conv2d %7:nn.relu",
            "%8:nn.conv2d %9:nn.relu",
            "%10:tuple #16:concatenate",
        ],
        11,
    );
}

#[test]
fn tvm_parallel_injective_branches_and_softmax_cast() {
    let m = fixture("tvm-parallel-injective");
    let r = run(&m, DEFAULT_MAX_DEPTH);
    assert_groups(
        &m,
        &r,
        &["#1:const %0:add %1:squeeze %2:transpose #5:maximum"],
        2,
    );

    let m = fixture("tvm-softmax-cast");
    let r = run(&m, DEFAULT_MAX_DEPTH);
    assert_groups(&m, &r, &["%0:nn.softmax #2:cast"], 2);
    assert_eq!(
        group_of_root(&m, &r, "#2"),
        (OutEWiseFusable, Some("%0".into()))
    );
}

/// `def @main(%x) { exp(exp(...exp(%x))) }` with `n` calls, as graph bindings.
fn exp_chain(n: usize) -> String {
    let mut s =
        String::from("#[version = \"0.0.5\"]\ndef @main(%x: Tensor[(10, 20), float32]) {\n");
    let mut prev = "%x".to_string();
    for i in 0..n - 1 {
        s.push_str(&format!("  %{i} = exp({prev});\n"));
        prev = format!("%{i}");
    }
    s.push_str(&format!("  exp({prev})\n}}\n"));
    s
}

fn group_sizes(r: &FuseResult) -> Vec<usize> {
    r.groups.iter().map(|g| g.nodes.len()).collect()
}

#[test]
fn tvm_fuse_max_splits_long_chains() {
    let m = text("chain300.relay", &exp_chain(300));
    let r = run(&m, DEFAULT_MAX_DEPTH);
    assert_eq!(group_sizes(&r), [1, 256, 44]);
    let m = text("chain20.relay", &exp_chain(20));
    let r = run(&m, 10);
    assert_eq!(group_sizes(&r), [1, 10, 10]);
}

#[test]
fn tvm_fuse_max_diamond_one_group_per_diamond() {
    // Three chained diamonds, each two branches of 5 exps joined by an add; limit 11.
    let mut s =
        String::from("#[version = \"0.0.5\"]\ndef @main(%x: Tensor[(10, 20), float32]) {\n");
    let mut input = "%x".to_string();
    let mut k = 0;
    for d in 0..3 {
        let mut branch = Vec::new();
        for _ in 0..2 {
            let mut prev = input.clone();
            for _ in 0..5 {
                s.push_str(&format!("  %{k} = exp({prev});\n"));
                prev = format!("%{k}");
                k += 1;
            }
            branch.push(prev);
        }
        if d < 2 {
            s.push_str(&format!("  %{k} = add({}, {});\n", branch[0], branch[1]));
            input = format!("%{k}");
            k += 1;
        } else {
            s.push_str(&format!("  add({}, {})\n}}\n", branch[0], branch[1]));
        }
    }
    let m = text("diamonds.relay", &s);
    let r = run(&m, 11);
    assert_eq!(group_sizes(&r), [1, 11, 11, 11]);
    // With the default limit the whole chain is one group.
    let r = run(&m, DEFAULT_MAX_DEPTH);
    assert_eq!(group_sizes(&r), [1, 33]);
}

#[test]
fn deep_chains_do_not_overflow_the_stack() {
    // Deeper than a 96-layer GPT-2; runs on the default test-thread stack.
    let m = text("chain20000.relay", &exp_chain(20_000));
    let r = run(&m, DEFAULT_MAX_DEPTH);
    assert_eq!(r.order.len(), 20_001);
    assert_eq!(r.groups.len(), 1 + 20_000usize.div_ceil(256));
}

// ---------------------------------------------------------------------------------------------
// Builder rules: let, if, closures, Compiler functions

#[test]
fn let_if_and_closures_are_fusion_barriers() {
    let m = fixture("let-if-closure");
    let r = run(&m, DEFAULT_MAX_DEPTH);
    // exp feeds the closure body (extern), the closure call (opaque edge) and the else branch:
    // no ipdom. The closure body fuses inside itself. The if branch, the let values and the let
    // body are extern: each op only takes its scalar constant.
    assert_groups(
        &m,
        &r,
        &[
            "%0:exp",
            "%10:negative %11:sqrt #7:add",
            "#9:abs",
            "#11:nn.relu",
            "#13:const #14:add",
            "#15:const #16:multiply",
        ],
        15,
    );
    let (g, _) = graph_and_tree(&m);
    let ext: Vec<usize> = (0..g.len()).filter(|&i| g.nodes[i].extern_ref).collect();
    // %c, %x, %z (let variable), %y (closure parameter), the closure body add, the closure
    // call (then branch), abs (else branch), relu (let value), %w, the add (let value), the
    // multiply (let body), the inner let (body of the outer let), the outer let (the function
    // body). The if itself is relu's argument: not extern, but Opaque.
    assert_eq!(ext, [0, 1, 2, 3, 7, 8, 9, 11, 12, 14, 16, 17, 18]);
}

#[test]
fn compiler_functions_are_skipped() {
    let m = fixture("compiler-fn-skipped");
    let r = run(&m, DEFAULT_MAX_DEPTH);
    assert_eq!(r.order.len(), 4);
    assert_groups(&m, &r, &["%3:exp #3:nn.relu"], 3);
}

// ---------------------------------------------------------------------------------------------
// Corpus invariants

const MODELS: [&str; 13] = [
    "batch_norm_extract",
    "gpt2",
    "gpt2_16",
    "gpt2_16_for_cutlass_extract",
    "gpt2_extract",
    "gpt2_extract_16",
    "mnist",
    "mobilenet",
    "mobilenet_16",
    "resnet50",
    "resnet50_16",
    "resnext50_32x4d",
    "resnext50_32x4d_16",
];

#[test]
fn corpus_groups_partition_the_calls_and_are_connected_and_convex() {
    let mut found = 0;
    for entry in std::fs::read_dir(root().join("tests/models")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "relay") {
            let stem = path.file_stem().unwrap().to_string_lossy().to_string();
            assert!(MODELS.contains(&stem.as_str()), "unexpected model {stem}");
            found += 1;
        }
    }
    assert_eq!(found, MODELS.len());
    for name in MODELS {
        let m = model(name);
        let main = m.main().unwrap();
        let r = fuse(&m, main, DEFAULT_MAX_DEPTH);
        check_partition(&m, main, &r, name);
    }
}

fn check_partition(m: &Module, main: collage::ir::FuncId, r: &FuseResult, name: &str) {
    let g = ForwardGraph::build(m, main);
    let n = g.len();
    assert_eq!(r.order.len(), n);
    // Disjoint and covering.
    let mut group_of = vec![usize::MAX; n];
    for (gi, grp) in r.groups.iter().enumerate() {
        let mut prev = None;
        for &e in &grp.nodes {
            let i = g.index(e).expect("member has a node");
            assert_eq!(group_of[i], usize::MAX, "{name}: node {i} in two groups");
            group_of[i] = gi;
            assert!(prev < Some(i), "{name}: members out of post-DFS order");
            prev = Some(i);
        }
        assert_eq!(
            grp.nodes.last(),
            Some(&grp.root),
            "{name}: root is not last"
        );
        if let Some(a) = grp.anchor {
            assert!(grp.nodes.contains(&a));
            assert_eq!(grp.pattern, OutEWiseFusable);
        }
    }
    assert!(
        group_of.iter().all(|&x| x != usize::MAX),
        "{name}: node without group"
    );
    // Every operator call of @main (as the dataflow graph sees it) is in exactly one group.
    let df = collage::analysis::dataflow::Graph::build(m, main);
    let mut calls = 0;
    for node in &df.nodes {
        if let collage::analysis::dataflow::NodeRef::Expr(e) = node.what {
            if is_op_call(m, e) {
                let i = g
                    .index(e)
                    .unwrap_or_else(|| panic!("{name}: call without node"));
                assert_ne!(group_of[i], usize::MAX);
                calls += 1;
            }
        }
    }
    assert!(calls > 0);
    // Each group: at most one anchor, connected, convex.
    let mut stamp = vec![usize::MAX; n];
    for (gi, grp) in r.groups.iter().enumerate() {
        if grp.nodes.len() < 2 {
            continue;
        }
        let anchors = grp
            .nodes
            .iter()
            .filter(|&&e| g.nodes[g.index(e).unwrap()].pattern == OutEWiseFusable)
            .count();
        assert!(anchors <= 1, "{name}: group {gi} has {anchors} complex ops");
        let members: Vec<usize> = grp.nodes.iter().map(|&e| g.index(e).unwrap()).collect();
        let hi = *members.last().unwrap();
        // Connected: undirected search over edges inside the group.
        let mut seen = vec![members[0]];
        stamp[members[0]] = gi;
        let mut stack = vec![members[0]];
        let mut preds: Vec<Vec<usize>> = vec![Vec::new(); members.len()];
        for (k, &i) in members.iter().enumerate() {
            for &j in &members {
                if g.nodes[j].outputs.iter().any(|e| e.node as usize == i) {
                    preds[k].push(j);
                }
            }
        }
        while let Some(i) = stack.pop() {
            let k = members.binary_search(&i).unwrap();
            let next = g.nodes[i]
                .outputs
                .iter()
                .map(|e| e.node as usize)
                .chain(preds[k].iter().copied());
            for j in next {
                if group_of[j] == gi && stamp[j] != gi {
                    stamp[j] = gi;
                    seen.push(j);
                    stack.push(j);
                }
            }
        }
        assert_eq!(
            seen.len(),
            members.len(),
            "{name}: group {gi} not connected"
        );
        // Convex: no path leaves the group and comes back. Re-entry must reach a member, whose
        // index is at most `hi`, so the search stays below `hi`.
        let mut outside = vec![false; hi + 1];
        let mut stack: Vec<usize> = Vec::new();
        for &i in &members {
            for e in &g.nodes[i].outputs {
                let j = e.node as usize;
                if group_of[j] != gi && j < hi && !outside[j] {
                    outside[j] = true;
                    stack.push(j);
                }
            }
        }
        while let Some(i) = stack.pop() {
            for e in &g.nodes[i].outputs {
                let j = e.node as usize;
                assert!(
                    group_of[j] != gi,
                    "{name}: group {gi} is not convex (re-entered at node {j})"
                );
                if j < hi && !outside[j] {
                    outside[j] = true;
                    stack.push(j);
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Snapshots

/// mnist, checked by hand against the rules (node numbers are FuseOps post-DFS indices):
///
/// * `0f` (#1, a rank-0 float32 constant, ElemWise) has the pad %0 as ipdom with dom pattern
///   Injective (the edge carries pad's kind): phase 0 fuses it into the pad (C_ew allows any sink
///   ≤ OutEWiseFusable). The group's kind stays the pad's, injective.
/// * The conv %1 → add %2 edge is ElemWise (equal shapes), so phase 0 fuses conv + add (root add,
///   now OutEWiseFusable with anchor %1), then add → relu %3 (dom ElemWise, sink ElemWise).
/// * relu → max_pool2d %4 has dom pattern OutEWiseFusable: no fusion; the pool's own edge to the
///   next pad is Injective, not ElemWise: the pool stays alone.
/// * Phase 1: the pad (injective) cannot join the conv group (C_inj rejects an
///   OutEWiseFusable sink); likewise the reshape %10 before the dense.
/// * The second block repeats the pattern. dense %11 → add (equal shapes, ElemWise edge) fuses;
///   the final add is extern (the body) but may be a sink.
/// * Meta constants are Opaque singletons, as is %x.
#[test]
fn snapshot_mnist_json() {
    let m = model("mnist");
    let main = m.main().unwrap();
    let r = fuse(&m, main, DEFAULT_MAX_DEPTH);
    let (groups, n) = describe(&m, &r);
    assert_eq!(
        groups,
        [
            "#1:const %0:nn.pad",
            "%1:nn.conv2d %2:add %3:nn.relu",
            "%4:nn.max_pool2d",
            "#9:const %5:nn.pad",
            "%6:nn.conv2d %7:add %8:nn.relu",
            "%9:nn.max_pool2d",
            "%10:reshape",
            "%11:nn.dense #21:add",
        ]
    );
    assert_eq!(n, 15);
    let json = fuse_json(&m, main, DEFAULT_MAX_DEPTH, &r);
    insta::assert_snapshot!(serde_json::to_string_pretty(&json).unwrap());
}

#[test]
fn snapshot_gpt2_extract_text() {
    let m = model("gpt2_extract");
    let main = m.main().unwrap();
    let r = fuse(&m, main, DEFAULT_MAX_DEPTH);
    insta::assert_snapshot!(fuse_text(&m, main, DEFAULT_MAX_DEPTH, &r));
}

#[test]
fn snapshot_resnet50_text() {
    let m = model("resnet50");
    let main = m.main().unwrap();
    let r = fuse(&m, main, DEFAULT_MAX_DEPTH);
    insta::assert_snapshot!(fuse_text(&m, main, DEFAULT_MAX_DEPTH, &r));
}

#[test]
fn output_is_deterministic() {
    let m = model("gpt2");
    let main = m.main().unwrap();
    let a = fuse_text(
        &m,
        main,
        DEFAULT_MAX_DEPTH,
        &fuse(&m, main, DEFAULT_MAX_DEPTH),
    );
    let m2 = model("gpt2");
    let b = fuse_text(
        &m2,
        main,
        DEFAULT_MAX_DEPTH,
        &fuse(&m2, main, DEFAULT_MAX_DEPTH),
    );
    assert_eq!(a, b);
}

// ---------------------------------------------------------------------------------------------
// The command line

#[test]
fn cli_fuse_exit_codes() {
    let out = collage(["fuse", "tests/models/mnist.relay"]);
    assert_eq!(out.status.code(), Some(0));
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        stdout.contains("group 4 [A] anchor %1: %1 %2 %3 (nn.conv2d, add, nn.relu)\n"),
        "{stdout}"
    );
    assert!(stdout.ends_with(
        "@main: nodes 22, groups 15, operator calls 13, kernels 8, fused kernels 3, max depth 256\n"
    ));

    let out = collage([
        "fuse",
        "--json",
        "--max-depth",
        "2",
        "tests/models/mnist.relay",
    ]);
    assert_eq!(out.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["function"], "main");
    assert_eq!(v["max_depth"], 2);
    let groups = v["groups"].as_array().unwrap();
    assert!(groups
        .iter()
        .all(|g| g["nodes"].as_array().unwrap().len() <= 2));

    // Errors in the model: 1, with the diagnostic on stderr and nothing on stdout.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let bad = dir.join("bad.relay");
    std::fs::write(
        &bad,
        "#[version = \"0.0.5\"]\ndef @main(%x: float32) { nn.relu(%y) }\n",
    )
    .unwrap();
    let out = collage(["fuse", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8(out.stderr).unwrap().contains("E0301"));
    assert!(out.stdout.is_empty());
    // No @main: 1.
    let nomain = dir.join("nomain.relay");
    std::fs::write(
        &nomain,
        "#[version = \"0.0.5\"]\ndef @f(%x: float32) { %x }\ndef @g(%x: float32) { %x }\n",
    )
    .unwrap();
    let out = collage(["fuse", nomain.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    // Missing file: 2. Usage errors: 2.
    let out = collage(["fuse", "no/such/file.relay"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8(out.stderr).unwrap().contains("E0901"));
    assert_eq!(collage(["fuse"]).status.code(), Some(2));
    let out = collage(["fuse", "--max-depth", "many", "tests/models/mnist.relay"]);
    assert_eq!(out.status.code(), Some(2));
}
