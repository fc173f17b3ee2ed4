//! Extraction and rewriting of sub-graphs (`collage::planning::enumerate::extract`; docs/collage.md,
//! "Extraction and rewriting").
//!
//! * TVM's sub-graph tests B1-B9 (docs/collage.md; `PartitionForTesting`): each scenario's
//!   sub-graph (with its composites, wrapped once more with `Compiler="foo"`) is rewritten in
//!   place when it is valid under the scenario's config, and the result is compared
//!   structurally (bound variables by position) with a hand-written expected program in
//!   `tests/fixtures/extract/`.
//!   Invalid runs leave the program unchanged, as in TVM; a cyclic sub-graph is an error.
//! * Property: on random DAGs (the generator of `enumerate_props`), for random valid
//!   sub-graphs, the rewritten program computes the same terms: symbolically evaluating it, with
//!   every call of an extracted function inlined, gives the same result term and the same
//!   multiset of operator calls (each with the same operand terms) as the original. The
//!   rewritten program type-checks and round-trips through the printer and parser.
//! * Real model: every candidate of every shipped target on mnist is extracted and rewritten;
//!   results type-check and round-trip.

use crate::enumerate::{composite, config, graph, library, model, set};
use crate::enumerate_props as props;
use crate::support::{load_ok, root, round_trip};
use collage::analysis::dataflow::IndexSet;
use collage::ir::equal::modules_equal;
use collage::ir::{AttrValue, Expr, Module};
use collage::ops::OpPattern;
use collage::planning::enumerate::extract::{extract, rewrite, rewrite_all, ExtractError};
use collage::planning::enumerate::{target_candidates, DataflowGraph, Limits, SubGraph};
use proptest::prelude::*;

fn expected(name: &str) -> Module {
    load_ok(&root().join(format!("tests/fixtures/extract/{name}.expected.relay")))
}

fn primitive() -> Vec<(String, AttrValue)> {
    vec![(
        "Primitive".to_string(),
        AttrValue::Int(1, collage::ir::DType::I32),
    )]
}

fn foo() -> Vec<(String, AttrValue)> {
    vec![("Compiler".to_string(), AttrValue::Str("foo".into()))]
}

/// `PartitionForTesting`: the sub-graph over `all` with the labelled composites, wrapped with
/// `Compiler="foo"`; rewritten if valid under the config, else the module unchanged.
fn partition_for_testing(
    m: &Module,
    all: &[usize],
    composites: &[(&[usize], &str)],
    max_exits: u32,
    allow_taps: bool,
) -> Module {
    let g = graph(m);
    let plain = SubGraph::new(&g, set(&g, all));
    let nested = composites
        .iter()
        .map(|(idx, label)| composite(&g, idx, label))
        .collect();
    let sg = SubGraph::with(&g, set(&g, all), plain.kind, plain.label.clone(), nested)
        .with_attrs(&g, foo());
    if !sg.is_valid(&g, &config(max_exits, allow_taps)) {
        return m.clone();
    }
    rewrite(&g, &sg).unwrap_or_else(|e| panic!("rewrite failed: {e}"))
}

fn assert_same(name: &str, actual: &Module, expected: &Module) {
    let printed = round_trip(name, actual);
    if let Err(e) = modules_equal(actual, expected) {
        panic!("{name}: {e}\n--- actual ---\n{printed}");
    }
}

#[test]
fn b1_single_op() {
    let m = model("b1-single-op");
    let out = partition_for_testing(&m, &[7], &[], 1, false);
    assert_same("b1", &out, &expected("b1-single-op"));
}

#[test]
fn b2_multi_output() {
    let m = model("b1-single-op");
    // Run 1: two exits exceed max_exits = 1: unchanged.
    let out = partition_for_testing(&m, &[6, 7], &[], 1, false);
    assert_same("b2 run 1", &out, &m);
    let out = partition_for_testing(&m, &[6, 7], &[], 2, false);
    assert_same("b2 run 2", &out, &expected("b2-multi-output"));
}

#[test]
fn b3_classic_conv2d_add_relu() {
    let m = model("b3-conv2d-add-relu");
    let out = partition_for_testing(&m, &[8, 9, 10], &[], 1, false);
    assert_same("b3", &out, &expected("b3-conv2d-add-relu"));
}

#[test]
fn b4_diamond_single_output() {
    let m = model("b4-diamond");
    let out = partition_for_testing(&m, &[5, 6, 7, 9, 10], &[], 1, false);
    assert_same("b4", &out, &expected("b4-diamond-single-output"));
}

#[test]
fn b5_diamond_multi_output() {
    let m = model("b4-diamond");
    let out = partition_for_testing(&m, &[5, 6, 7, 9], &[], 2, false);
    assert_same("b5", &out, &expected("b5-diamond-multi-output"));
}

#[test]
fn b6_with_tap() {
    let m = model("b6-tap");
    let out = partition_for_testing(&m, &[5, 6], &[], 2, false);
    assert_same("b6 run 1", &out, &m);
    let out = partition_for_testing(&m, &[5, 6], &[], 2, true);
    assert_same("b6 run 2", &out, &expected("b6-with-tap"));
}

#[test]
fn b7_no_cycles() {
    let m = model("b7-no-cycles");
    let out = partition_for_testing(&m, &[3, 5], &[], 2, false);
    assert_same("b7 run 1", &out, &m);
    // Rewriting the cyclic sub-graph anyway is an error, not a panic or a wrong program.
    let g = graph(&m);
    let sg = SubGraph::new(&g, set(&g, &[3, 5])).with_attrs(&g, foo());
    assert!(matches!(rewrite(&g, &sg), Err(ExtractError::Cycle { .. })));
    let out = partition_for_testing(&m, &[3, 4, 5], &[], 2, false);
    assert_same("b7 run 2", &out, &expected("b7-no-cycles"));
}

#[test]
fn b8_labels_direct_connection() {
    let m = model("b8-labels-direct-connection");
    let all: Vec<usize> = (3..=11).collect();
    let comps: &[(&[usize], &str)] = &[(&[4, 5, 6, 7], "a"), (&[8, 9, 10], "b")];
    let out = partition_for_testing(&m, &all, comps, 1, false);
    assert_same("b8", &out, &expected("b8-labels-direct-connection"));
}

#[test]
fn b9_labels_nested_tap() {
    let m = model("b9-labels-nested-tap");
    let all: Vec<usize> = (4..=10).collect();
    let comps: &[(&[usize], &str)] = &[(&[4, 5, 6, 7], "a"), (&[8, 9, 10], "b")];
    let out = partition_for_testing(&m, &all, comps, 2, true);
    assert_same("b9", &out, &expected("b9-labels-nested-tap"));
}

#[test]
fn rewrite_without_nested_sub_graphs_is_the_identity() {
    let m = model("b3-conv2d-add-relu");
    let g = graph(&m);
    let out = rewrite(&g, &SubGraph::new(&g, set(&g, &[8, 9, 10]))).unwrap();
    assert_same("identity", &out, &m);
}

#[test]
fn extract_gives_a_standalone_function() {
    // B3's sub-graph as TVM's ExtractAsFunction: a function without attributes.
    let m = model("b3-conv2d-add-relu");
    let g = graph(&m);
    let out = extract(&g, &SubGraph::new(&g, set(&g, &[8, 9, 10])), Vec::new()).unwrap();
    let printed = round_trip("extract b3", &out);
    let a = "Tensor[(5, 3, 32, 32), float32]";
    let b = "Tensor[(2, 3, 5, 5), float32]";
    let c = "Tensor[(5, 2, 28, 28), float32]";
    let text = format!(
        "#[version = \"0.0.5\"]\ndef @main(%x: {a}, %y: {b}, %z: {c}) {{\n  \
         nn.relu(add(nn.conv2d(%x, %y, padding=[0, 0, 0, 0]), %z))\n}}\n"
    );
    let (sources, _, want) = crate::support::load_text("want.relay", &text);
    let want = want.unwrap_or_else(|d| panic!("{}", d.render_plain(&sources)));
    if let Err(e) = modules_equal(&out, &want) {
        panic!("{e}\n{printed}");
    }
    // B8 with its nesting: the function calls the Compiler function, which calls composites.
    let m = model("b8-labels-direct-connection");
    let g = graph(&m);
    let all: Vec<usize> = (3..=11).collect();
    let nested = vec![
        composite(&g, &[4, 5, 6, 7], "a"),
        composite(&g, &[8, 9, 10], "b"),
    ];
    let sg = SubGraph::with(&g, set(&g, &all), OpPattern::Opaque, String::new(), nested)
        .with_attrs(&g, foo());
    let out = extract(&g, &sg, Vec::new()).unwrap();
    let printed = round_trip("extract b8", &out);
    assert!(printed.contains("Compiler=\"foo\""), "{printed}");
    assert_eq!(printed.matches("Composite=").count(), 2, "{printed}");
}

#[test]
fn errors_instead_of_panics() {
    let m = model("b8-labels-direct-connection");
    let g = graph(&m);
    // Overlapping sub-graphs at one level.
    let a = SubGraph::new(&g, set(&g, &[4, 5])).with_attrs(&g, foo());
    let b = SubGraph::new(&g, set(&g, &[5, 6])).with_attrs(&g, foo());
    assert!(matches!(
        rewrite_all(&g, &[a, b]),
        Err(ExtractError::Overlap { node: 5 })
    ));
    // A parameter inside.
    let p = SubGraph::new(&g, set(&g, &[0, 3])).with_attrs(&g, foo());
    assert!(matches!(
        rewrite(&g, &p),
        Err(ExtractError::Unsupported { node: 0, .. })
    ));
    // The function node inside.
    let f = SubGraph::new(&g, set(&g, &[11, 12])).with_attrs(&g, foo());
    assert!(rewrite(&g, &f).is_err());
    // Only an operator node: no exit that is an expression.
    let op = SubGraph::new(&g, set(&g, &[1])).with_attrs(&g, foo());
    assert_eq!(rewrite(&g, &op).unwrap_err(), ExtractError::NoExit);
    // An index set of another graph.
    let other = SubGraph {
        inside: IndexSet::from_indices(3, [1]),
        ..SubGraph::new(&g, set(&g, &[3]))
    };
    assert_eq!(
        extract(&g, &other, Vec::new()).unwrap_err(),
        ExtractError::WrongGraph
    );
}

#[test]
fn parallel_rewrite_of_disjoint_sub_graphs() {
    let m = model("b8-labels-direct-connection");
    let g = graph(&m);
    let parts: Vec<SubGraph> = [&[3, 4][..], &[5, 6, 7], &[9], &[10, 11]]
        .iter()
        .map(|s| SubGraph::new(&g, set(&g, s)).with_attrs(&g, foo()))
        .collect();
    let out = rewrite_all(&g, &parts).unwrap();
    let printed = round_trip("parallel", &out);
    assert_eq!(printed.matches("Compiler=\"foo\"").count(), 4, "{printed}");
    assert_eq!(term_check(&m, &out), Ok(()), "{printed}");
}

// ---------------------------------------------------------------------------------------------
// Symbolic evaluation with inlining

/// Same result term and the same multiset of operator calls (by term) in both modules' main,
/// every call of an extracted function inlined (`collage::planning::partition::inline`).
fn term_check(original: &Module, rewritten: &Module) -> Result<(), String> {
    collage::planning::partition::inline::equal_after_inlining(original, rewritten)
}

/// Whether every inside node is a call, tuple, projection or constant (what extraction moves).
fn movable(g: &DataflowGraph<'_>, m: &Module, inside: &IndexSet) -> bool {
    inside.iter().all(|i| {
        g.expr(i).is_some_and(|e| {
            matches!(
                m.expr(e),
                Expr::Call { .. } | Expr::Tuple(_) | Expr::Proj { .. } | Expr::Const(_)
            )
        })
    })
}

proptest! {
    #![proptest_config(props::config())]

    /// Extraction followed by rewriting preserves the function, for valid sub-graphs alone and
    /// for disjoint pairs rewritten together; anything else is an error, never a panic.
    #[test]
    fn rewrite_preserves_the_function(
        params in 1u8..=3,
        steps in props::steps(),
        tuple_result in any::<bool>(),
        bytes in prop::collection::vec(any::<u8>(), 4 * 24),
    ) {
        let text = props::model_text(params, &steps, tuple_result);
        let m = props::load(&text);
        let g = DataflowGraph::new(&m, m.main().unwrap());
        let f = props::Facts::new(&m, &g);
        let cfg = config(0, true);
        let mut valid: Vec<SubGraph> = Vec::new();
        for chunk in bytes.chunks(24) {
            let inside = props::index_set(&g, &props::subset(&g, &m, &f, chunk));
            let sg = SubGraph::new(&g, inside.clone());
            let wrapped = sg.with_attrs(&g, foo());
            let result = rewrite(&g, &wrapped);
            let ok = sg.is_valid(&g, &cfg) && movable(&g, &m, &inside) && !inside.is_empty();
            if !ok {
                continue;
            }
            let out = result.map_err(|e| TestCaseError::fail(format!("{e} on {inside:?}\n{text}")))?;
            let printed = round_trip("random", &out);
            prop_assert_eq!(term_check(&m, &out), Ok(()), "{:?}\n{}\n{}", inside, text, printed);
            let standalone = extract(&g, &sg, Vec::new())
                .map_err(|e| TestCaseError::fail(format!("{e}")))?;
            let fid = standalone.main().unwrap();
            prop_assert_eq!(standalone.func(fid).params.len(), sg.input.count());
            round_trip("random extract", &standalone);
            if valid.iter().all(|v| v.inside.is_disjoint(&sg.inside)) {
                valid.push(wrapped);
            }
        }
        // Disjoint valid sub-graphs together: either a cycle between them, or the same function.
        match rewrite_all(&g, &valid) {
            Ok(out) => {
                round_trip("random all", &out);
                prop_assert_eq!(term_check(&m, &out), Ok(()), "{}", text);
            }
            Err(e) => prop_assert!(matches!(e, ExtractError::Cycle { .. }), "{e}\n{text}"),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Real model

/// Every candidate of every shipped target on mnist: candidates made of calls, tuples,
/// projections and constants extract and rewrite, type-check, round-trip and keep the function;
/// the others (host candidates over parameters, operators and the function) are errors.
#[test]
fn mnist_candidates_rewrite() {
    let m = load_ok(&root().join("tests/models/mnist.relay"));
    let g = graph(&m);
    let program = library();
    let mut rewritten = 0;
    for t in 0..program.targets.len() {
        for c in target_candidates(&g, &program, t, &Limits::default()).expect("within the limits")
        {
            let sg = &c.sub_graph;
            let ok = movable(&g, &m, &sg.inside);
            let extracted = extract(&g, sg, Vec::new());
            let wrapped = sg.with_attrs(&g, foo());
            let result = rewrite(&g, &wrapped);
            if !ok {
                assert!(result.is_err() && extracted.is_err(), "{}", c.rule_name);
                continue;
            }
            let out = result.unwrap_or_else(|e| panic!("{}: {e}", c.rule_name));
            round_trip(&c.rule_name, &out);
            assert_eq!(term_check(&m, &out), Ok(()), "{}", c.rule_name);
            // The candidate as the partitioner will rewrite it (nested structure only).
            let own = rewrite(&g, sg).unwrap_or_else(|e| panic!("{}: {e}", c.rule_name));
            round_trip(&c.rule_name, &own);
            assert_eq!(term_check(&m, &own), Ok(()), "{}", c.rule_name);
            round_trip(&c.rule_name, &extracted.unwrap());
            rewritten += 1;
        }
    }
    assert!(rewritten > 40, "only {rewritten} candidates rewritten");
}

/// The partitioner's use: on real models, for each shipped target, a greedy set of disjoint
/// candidates (largest first) is rewritten at once with [`rewrite_all`]. Where two chosen
/// candidates form a cycle through each other, the one holding the reported node is dropped and
/// the rest rewritten again. The result type-checks, round-trips and keeps the function.
#[test]
fn corpus_parallel_rewrite() {
    let program = library();
    for name in [
        "mnist",
        "mobilenet",
        "resnet50",
        "gpt2_extract",
        "batch_norm_extract",
    ] {
        let m = load_ok(&root().join(format!("tests/models/{name}.relay")));
        let g = graph(&m);
        for t in 0..program.targets.len() {
            let mut cands: Vec<SubGraph> = target_candidates(&g, &program, t, &Limits::default())
                .expect("within the limits")
                .into_iter()
                .map(|c| c.sub_graph)
                .filter(|s| movable(&g, &m, &s.inside))
                // Native candidates have no nesting: wrap them as primitive functions.
                .map(|s| match s.nested.is_empty() {
                    true => s.with_attrs(&g, primitive()),
                    false => s,
                })
                .collect();
            cands.sort_by_key(|s| std::cmp::Reverse(s.inside.count()));
            let mut chosen: Vec<SubGraph> = Vec::new();
            let mut covered = IndexSet::new(g.len());
            for c in cands {
                if c.inside.is_disjoint(&covered) {
                    covered.union_with(&c.inside);
                    chosen.push(c);
                }
            }
            let tname = &program.targets[t].name;
            let out = loop {
                match rewrite_all(&g, &chosen) {
                    Ok(out) => break out,
                    Err(ExtractError::Cycle { node }) => {
                        let before = chosen.len();
                        chosen.retain(|s| !s.inside.contains(node));
                        assert!(chosen.len() < before, "{name}/{tname}: cycle at {node}");
                    }
                    Err(e) => panic!("{name}/{tname}: {e}"),
                }
            };
            let label = format!("{name}/{tname}");
            round_trip(&label, &out);
            assert_eq!(term_check(&m, &out), Ok(()), "{label}");
            if name == "mnist" && !chosen.is_empty() {
                let printed = collage::frontend::relay::print::print_module(&out);
                let calls = chosen.iter().map(|s| s.nested.len()).sum::<usize>();
                assert!(
                    printed.matches("fn (").count() >= calls,
                    "{label}\n{printed}"
                );
                if tname == "dnnl" {
                    // Reviewed by hand: three Compiler="dnnl" functions (the dense+add
                    // calling one Composite function, and two conv2d+add+relu blocks each
                    // followed by its max_pool2d, calling a `dnnl.conv2d_bias_relu` and a
                    // `dnnl.max_pool2d` Composite function), called in place in main with the
                    // pads and the reshape left unchanged.
                    insta::assert_snapshot!("mnist_dnnl_parallel_rewrite", printed);
                }
            }
        }
    }
}
