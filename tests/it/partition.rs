//! The search, the cost cache and `partition` on the corpus.
//!
//! * Property: on random node sets with random candidates and costs (some invalid or unknown),
//!   the search's cover equals the brute-force optimum, with A* and with Dijkstra.
//! * TVM's cost-estimation tests D1-D5 (docs/collage.md), against our cache: D1 the mock
//!   formula, D2 a repeated candidate is estimated once, D3 an invalid cost is never chosen, D4
//!   structurally identical candidates share one estimate, D5 a candidate whose input is a tuple.
//! * The corpus: every model partitions with the shipped rules and analytic costs, the output
//!   round-trips and equals the input once the partition functions are inlined, and for every
//!   BYOC target T used alone the cost is at most T's greedy placement (the RFC's success
//!   metric 3) and at most native TVM alone; T with the native targets is never worse than its
//!   greedy placement, and no partition exceeds its target's limits (also a property over
//!   random models and random depth limits).

use crate::support::{collage, collage_in, corpus, load_ok, root, round_trip};
use collage::analysis::dataflow::IndexSet;
use collage::ir::{AttrValue, Module};
use collage::planning::cost::cache::estimate_all;
use collage::planning::cost::mock::Mock;
use collage::planning::cost::{Cost, Estimate, Estimator, Request};
use collage::planning::enumerate::{Candidate, DataflowGraph, SubGraph};
use collage::planning::partition::{self, PartitionError};
use collage::planning::search::{search, Item, Options, SearchError};
use collage::rules::ruletree::Program;
use collage::rules::sema;
use proptest::prelude::*;
use std::sync::atomic::{AtomicUsize, Ordering};

// ---------------------------------------------------------------------------------------------
// Search optimality against brute force

/// A cost as an exact integer number of 2^-80 seconds (the costs here are at most 2^20 and have
/// no bits below 2^-80, so the conversion and every sum are exact).
fn exact(c: f64) -> i128 {
    let scaled = c * 2f64.powi(80);
    assert_eq!(scaled.fract(), 0.0, "{c} has bits below 2^-80");
    scaled as i128
}

/// The cheapest exact cover by brute force over all subsets of usable items, summed exactly and
/// rounded once to the nearest f64.
fn brute_force(n: usize, items: &[Item]) -> Option<f64> {
    let usable: Vec<usize> = (0..items.len())
        .filter(|&k| items[k].cost.is_finite() && !items[k].nodes.is_empty())
        .collect();
    let mut best: Option<i128> = None;
    for mask in 0u32..(1 << usable.len()) {
        let mut covered = vec![false; n];
        let mut ok = true;
        let mut cost = 0i128;
        for (b, &k) in usable.iter().enumerate() {
            if mask >> b & 1 == 0 {
                continue;
            }
            for &i in &items[k].nodes {
                if covered[i] {
                    ok = false;
                }
                covered[i] = true;
            }
            cost += exact(items[k].cost);
        }
        if ok && covered.iter().all(|&c| c) && best.is_none_or(|b| cost < b) {
            best = Some(cost);
        }
    }
    best.map(|b| b as f64 * 2f64.powi(-80))
}

/// Random items over `n` nodes; costs from `cost` or invalid or unknown.
fn random_items(cost: BoxedStrategy<f64>) -> impl Strategy<Value = (usize, Vec<Item>)> {
    (1usize..9).prop_flat_map(move |n| {
        let item = (
            proptest::collection::btree_set(0..n, 1..=n.min(4)),
            prop_oneof![
                8 => cost.clone(),
                1 => Just(f64::INFINITY),
                1 => Just(f64::NAN),
            ],
        )
            .prop_map(|(nodes, cost)| Item {
                nodes: nodes.into_iter().collect(),
                cost,
            });
        (Just(n), proptest::collection::vec(item, 0..14))
    })
}

/// The search's result against brute force: the same optimum, an exact cover of usable items
/// whose exact sum is that optimum.
fn check_against_brute_force(n: usize, items: &[Item]) -> Result<(), TestCaseError> {
    let expected = brute_force(n, items);
    for lower_bound in [true, false] {
        let got = search(n, items, Options { lower_bound });
        match (expected, got) {
            (None, Err(_)) => {}
            (Some(best), Ok(sol)) => {
                prop_assert_eq!(sol.total, best);
                let mut covered = vec![0; n];
                let mut sum = 0i128;
                for &k in &sol.chosen {
                    prop_assert!(items[k].cost.is_finite());
                    sum += exact(items[k].cost);
                    for &i in &items[k].nodes {
                        covered[i] += 1;
                    }
                }
                prop_assert!(covered.iter().all(|&c| c == 1), "not an exact cover");
                prop_assert_eq!(sum as f64 * 2f64.powi(-80), sol.total);
            }
            (e, g) => prop_assert!(false, "brute force {:?}, search {:?}", e, g),
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn search_finds_the_brute_force_optimum((n, items) in random_items(
        (0u32..20).prop_map(f64::from).boxed()
    )) {
        check_against_brute_force(n, &items)?;
    }

    /// Costs with fractions, where floating-point sums depend on their order (0.1 + 0.2 +
    /// 0.3 differs from 0.3 + 0.2 + 0.1): the search adds exactly, so its optimum is the exact
    /// one, and equal covers tie.
    #[test]
    fn search_is_exact_with_fractional_costs((n, items) in random_items(
        prop_oneof![
            (0u32..200).prop_map(|k| f64::from(k) / 10.0),
            (1u32..1000).prop_map(|k| 1.0 / f64::from(k)),
        ]
        .boxed()
    )) {
        check_against_brute_force(n, &items)?;
    }
}

#[test]
fn uncovered_nodes_are_reported_before_searching() {
    let items = vec![
        Item {
            nodes: vec![0],
            cost: 1.0,
        },
        Item {
            nodes: vec![1],
            cost: f64::INFINITY,
        },
    ];
    assert_eq!(
        search(2, &items, Options::default()),
        Err(SearchError::Uncovered { node: 1 })
    );
}

// ---------------------------------------------------------------------------------------------
// Section D: cost estimation

fn model_text(text: &str) -> Module {
    let (sources, _, m) = crate::support::load_text("d.relay", text);
    match m {
        Ok(m) => m,
        Err(d) => panic!("{}", d.render_plain(&sources)),
    }
}

fn program(text: &str) -> Program {
    let (sources, checked) = sema::check_text("d.rules", text);
    match checked.program {
        Some(p) if !checked.diags.has_errors() => p,
        _ => panic!("{}", checked.diags.render_plain(&sources)),
    }
}

/// One BYOC target `llvm` (as the spec of TVM's cost-estimation tests) and a host.
const LLVM_RULES: &str = r#"
target llvm {
    compiler = "llvm";
    device = cpu;
    rule = primitive(pattern(abs(_)));
}
target host { host = true; device = cpu; }
"#;

/// A candidate over `nodes`, nested once with `Primitive=1, Compiler="llvm"` (the
/// `MakeCandidate` of TVM's cost-estimation tests).
fn candidate(g: &DataflowGraph<'_>, nodes: &[usize]) -> Candidate {
    let sg = SubGraph::new(g, IndexSet::from_indices(g.len(), nodes.iter().copied()));
    let sg = sg.with_attrs(
        g,
        vec![
            ("Primitive".into(), AttrValue::int(1)),
            ("Compiler".into(), AttrValue::Str("llvm".into())),
        ],
    );
    Candidate {
        target: 0,
        sub_graph: sg,
        rule_name: String::new(),
    }
}

/// Counts calls of the wrapped estimator.
struct Counting<E>(E, AtomicUsize);

impl<E: Estimator> Estimator for Counting<E> {
    fn name(&self) -> String {
        self.0.name()
    }
    fn estimate(&self, req: &Request<'_, '_>) -> Estimate {
        self.1.fetch_add(1, Ordering::Relaxed);
        self.0.estimate(req)
    }
}

fn mock(cost: f64) -> Counting<Mock> {
    Counting(
        Mock {
            costs: vec![("llvm".into(), cost)],
        },
        AtomicUsize::new(0),
    )
}

const STANDARD: &str = "#[version = \"0.0.5\"]
def @main(%x: Tensor[(10, 10), float32]) {
  %0 = abs(%x);
  %1 = nn.relu(%0);
  nn.relu(%1)
}";

#[test]
fn d1_simple_estimate_is_the_mock_formula() {
    let m = model_text(STANDARD);
    let g = DataflowGraph::new(&m, m.main().unwrap());
    let p = program(LLVM_RULES);
    let est = mock(3.0);
    let e = estimate_all(&g, &p, &[candidate(&g, &[3, 4])], &est, &|_, _| {});
    assert_eq!(e.costs, vec![Cost::value(5.7)]);
    assert_eq!(e.calls, 1);
}

#[test]
fn d2_a_repeated_candidate_is_estimated_once() {
    let m = model_text(STANDARD);
    let g = DataflowGraph::new(&m, m.main().unwrap());
    let p = program(LLVM_RULES);
    let est = mock(3.0);
    let c = candidate(&g, &[3, 4]);
    let e = estimate_all(&g, &p, &[c.clone(), c.clone(), c], &est, &|_, _| {});
    assert_eq!(e.costs, vec![Cost::value(5.7); 3]);
    assert_eq!(est.1.load(Ordering::Relaxed), 1);
}

/// An estimator that rejects everything.
struct AlwaysInvalid;

impl Estimator for AlwaysInvalid {
    fn name(&self) -> String {
        "invalid".into()
    }
    fn estimate(&self, _: &Request<'_, '_>) -> Estimate {
        Estimate::because(Cost::INVALID, "it rejects everything")
    }
}

#[test]
fn d3_invalid_costs_are_never_chosen() {
    let m = model_text(STANDARD);
    let g = DataflowGraph::new(&m, m.main().unwrap());
    let p = program(LLVM_RULES);
    let e = estimate_all(
        &g,
        &p,
        &[candidate(&g, &[3, 4])],
        &AlwaysInvalid,
        &|_, _| {},
    );
    assert!(e.costs[0].is_invalid());
    // Partitioning: the only candidate for `abs` is invalid, so `abs` is uncovered (and the
    // report names the unusable candidate) instead of a cover with an infinite cost.
    let r = partition::partition(
        &g,
        &p,
        &AlwaysInvalid,
        &partition::Options::default(),
        &partition::Silent,
    );
    match r {
        Err(PartitionError::Uncovered { node, unusable }) => {
            assert_eq!(node, 3);
            assert_eq!(unusable.len(), 1);
            assert!(unusable[0].1.is_invalid());
        }
        Err(e) => panic!("unexpected error {e:?}"),
        Ok(plan) => panic!("a plan with total {}", plan.total),
    }
}

#[test]
fn d4_structurally_identical_candidates_share_one_estimate() {
    let m = model_text(
        "#[version = \"0.0.5\"]
def @main(%x: Tensor[(10, 10), float32]) {
  %0 = abs(%x);
  %1 = nn.relu(%0);
  %2 = abs(%1);
  %3 = nn.relu(%2);
  add(%1, %3)
}",
    );
    let g = DataflowGraph::new(&m, m.main().unwrap());
    let p = program(LLVM_RULES);
    let est = mock(3.0);
    let (a, b) = (candidate(&g, &[4, 5]), candidate(&g, &[6, 7]));
    let e = estimate_all(&g, &p, &[a.clone(), b], &est, &|_, _| {});
    assert_eq!(e.costs, vec![Cost::value(5.7); 2]);
    assert_eq!(e.calls, 1);
    // A different structure (abs alone) is estimated separately.
    let c = candidate(&g, &[4]);
    let e = estimate_all(&g, &p, &[a, c], &est, &|_, _| {});
    assert_eq!(e.costs, vec![Cost::value(5.7), Cost::value(3.0)]);
    assert_eq!(e.calls, 2);
}

#[test]
fn d5_a_tuple_input_is_fine() {
    let m = model_text(
        "#[version = \"0.0.5\"]
def @main(%x: Tensor[(10, 10), float32]) {
  %0 = abs(%x);
  %1 = nn.relu(%0);
  %2 = (%0, %1);
  concatenate(%2)
}",
    );
    let g = DataflowGraph::new(&m, m.main().unwrap());
    let p = program(LLVM_RULES);
    let c = candidate(&g, &[7]);
    let e = estimate_all(&g, &p, std::slice::from_ref(&c), &mock(3.0), &|_, _| {});
    assert_eq!(e.costs, vec![Cost::value(3.0)]);
    // What an external measurer would receive: a function with a tuple parameter.
    let x = collage::planning::enumerate::extract::extract(&g, &c.sub_graph, Vec::new()).unwrap();
    let text = collage::frontend::relay::print::print_module(&x);
    assert!(
        text.contains("FunctionVar_0: (Tensor[(10, 10), float32], Tensor[(10, 10), float32])"),
        "{text}"
    );
}

// ---------------------------------------------------------------------------------------------
// The corpus

fn library_with(keep: &dyn Fn(&collage::rules::ruletree::Target) -> bool) -> Program {
    let p = crate::enumerate::library();
    let mut out = p.clone();
    out.targets = p.targets.iter().filter(|t| keep(t)).cloned().collect();
    for t in &mut out.targets {
        t.refines = None;
    }
    out
}

#[test]
fn corpus_partitions_round_trip_with_every_target() {
    let program = crate::enumerate::library();
    let est = collage::planning::cost::analytic::Analytic;
    let opts = partition::Options {
        baselines: false,
        ..Default::default()
    };
    for (name, m) in corpus() {
        let g = DataflowGraph::new(&m, m.main().unwrap());
        let plan = partition::partition(&g, &program, &est, &opts, &partition::Silent)
            .unwrap_or_else(|e| panic!("{name}: {e:?}"));
        // Every operator call is in exactly one partition.
        let mut seen = vec![0; g.len()];
        for p in &plan.partitions {
            for i in p.sub_graph.inside.iter() {
                seen[i] += 1;
            }
        }
        assert!(
            seen.iter().all(|&s| s == 1),
            "{name}: partitions do not cover exactly"
        );
        let out =
            partition::rewrite(&g, &program, &plan).unwrap_or_else(|e| panic!("{name}: {e:?}"));
        partition::finalize::check_round_trip(&m, &out).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}

/// A chain of inverted-residual layers as MobileNetV2 has them (convolution, bias, clip; a
/// depthwise convolution, bias, clip; a projection without clip), longer than `dnnl`'s depth
/// limit: its greedy regions are one, as TVM's `partition_for_dnnl` makes it. Unions of
/// composites taken largest first used to end at a bias and leave its clip to native code,
/// which split the region at every such clip.
#[test]
fn greedy_regions_take_whole_composites_before_unions() {
    let mut body = String::new();
    let mut params = String::from("%x: Tensor[(1, 8, 8, 8), float32]");
    let mut prev = "%x".to_string();
    for l in 0..4 {
        params.push_str(&format!(
            ", %we{l}: Tensor[(16, 8, 1, 1), float32], %be{l}: Tensor[(16), float32],              %wd{l}: Tensor[(16, 1, 3, 3), float32], %bd{l}: Tensor[(16), float32],              %wp{l}: Tensor[(8, 16, 1, 1), float32], %bp{l}: Tensor[(8), float32]"
        ));
        let (e, d, p) = (3 * l, 3 * l + 1, 3 * l + 2);
        body.push_str(&format!(
            "  %{e} = clip(nn.bias_add(nn.conv2d({prev}, %we{l}, channels=16, \
             kernel_size=[1, 1]), %be{l}), a_min=0f, a_max=6f);\n  \
             %{d} = clip(nn.bias_add(nn.conv2d(%{e}, %wd{l}, padding=[1, 1], groups=16, \
             channels=16, kernel_size=[3, 3]), %bd{l}), a_min=0f, a_max=6f);\n  \
             %{p} = nn.bias_add(nn.conv2d(%{d}, %wp{l}, channels=8, kernel_size=[1, 1]), \
             %bp{l});\n"
        ));
        prev = format!("%{p}");
    }
    let m = model_text(&format!(
        "#[version = \"0.0.5\"]\ndef @main({params}) {{\n{body}  {prev}\n}}\n"
    ));
    let g = DataflowGraph::new(&m, m.main().unwrap());
    let program = library_with(&|t| t.name == "dnnl");
    let limits = partition::Options::default().limits;
    let candidates = collage::planning::enumerate::enumerate(&g, &program, &limits)
        .expect("within the limits")
        .candidates;
    let own: Vec<usize> = (0..candidates.len()).collect();
    let config = collage::planning::enumerate::region_limits(&program.targets[0], &limits);
    let regions = partition::greedy::regions(&g, &candidates, &own, &config);
    let calls = (0..g.len()).filter(|&i| g.is_op_call(i)).count();
    // 4 layers of 8 operator calls, deeper than the depth limit of `dnnl`'s candidates.
    assert_eq!(calls, 32);
    assert!(candidates
        .iter()
        .all(|c| c.sub_graph.inside.count() < calls));
    assert_eq!(regions.len(), 1, "{} greedy regions", regions.len());
    match &regions[0] {
        partition::greedy::Region::Union(u) => assert_eq!(u.inside.count(), calls),
        partition::greedy::Region::Candidate(k) => panic!("one candidate {k} taken alone"),
    }
}

#[test]
fn never_worse_than_greedy_for_each_byoc_target() {
    let lib = crate::enumerate::library();
    let est = collage::planning::cost::analytic::Analytic;
    let byoc: Vec<String> = lib
        .targets
        .iter()
        .filter(|t| t.compiler.is_some())
        .map(|t| t.name.clone())
        .collect();
    assert!(byoc.len() >= 5);
    let mut checked = 0;
    for (name, m) in corpus() {
        let g = DataflowGraph::new(&m, m.main().unwrap());
        for t in &byoc {
            let program = library_with(&|x| x.compiler.is_none() || x.name == *t);
            let plan = partition::partition(
                &g,
                &program,
                &est,
                &partition::Options::default(),
                &partition::Silent,
            )
            .unwrap_or_else(|e| panic!("{name} with {t}: {e:?}"));
            let baseline = |n: &str| {
                plan.baselines
                    .iter()
                    .find(|b| b.name == n)
                    .and_then(|b| b.cost)
            };
            let greedy =
                baseline(&format!("greedy:{t}")).unwrap_or_else(|| panic!("{name}: no greedy:{t}"));
            let native = baseline("tvm").unwrap_or_else(|| panic!("{name}: no native baseline"));
            let restricted = baseline(t).unwrap_or_else(|| panic!("{name}: no {t} baseline"));
            // The search adds costs exactly, so these hold without slack.
            assert!(
                restricted <= greedy,
                "{name}: {t} {restricted} > greedy:{t} {greedy}"
            );
            assert_within_limits(&g, &program, &plan, &partition::Options::default().limits);
            assert!(
                plan.total <= greedy,
                "{name} with {t}: {} > greedy {greedy}",
                plan.total
            );
            assert!(
                plan.total <= native,
                "{name} with {t}: {} > native {native}",
                plan.total
            );
            checked += 1;
        }
    }
    assert!(checked >= 5 * 13);
}

/// Structurally identical layers are estimated once: a 12-layer GPT-2 needs at most 1.5× the
/// estimator calls of a 1-layer one (docs/performance.md, "Partitioning").
#[test]
fn identical_layers_share_their_estimates() {
    let program = crate::enumerate::library();
    let opts = partition::Options {
        baselines: false,
        ..Default::default()
    };
    let calls = |layers: usize| {
        let text = collage::frontend::gen::gpt2(layers);
        let (sources, _, m) = crate::support::load_text("gpt2.relay", &text);
        let m = m.unwrap_or_else(|d| panic!("{}", d.render_plain(&sources)));
        let g = DataflowGraph::new(&m, m.main().unwrap());
        let est = Counting(
            collage::planning::cost::analytic::Analytic,
            AtomicUsize::new(0),
        );
        let plan = partition::partition(&g, &program, &est, &opts, &partition::Silent).unwrap();
        assert_eq!(plan.stats.estimates, est.1.load(Ordering::Relaxed));
        plan.stats.estimates
    };
    let (one, twelve) = (calls(1), calls(12));
    assert!(
        twelve as f64 <= 1.5 * one as f64,
        "{twelve} estimates for 12 layers, {one} for 1"
    );
}

/// Outlined partitions: structurally identical BYOC partitions share one global function (their
/// parameters are numbered in TVM's first-use order), and no two globals are structurally equal.
/// The count per corpus model is pinned, for the reference configuration (mock costs `tvm` 1,
/// `example` 0.9, as `docs/performance.md` measures it) and for mock costs as TVM's integer
/// `MockCostEstimator` takes them with the BYOC target cheaper (`tvm` 3, `example` 2), where TVM
/// itself outlines 17 functions for resnet50 and 11 for resnext50. With `tvm` 1 and `example`
/// 0.9 many covers tie in decimal (a two-operator native group, 1 + 0.9, against one operator
/// on each target, 0.9 + 1) but not in binary: the group's cost is one rounded sum, the other
/// cover the exact sum of two rounded costs, 1.1e-16 dearer, and the search compares exactly.
#[test]
fn identical_partitions_share_one_global_function() {
    let program = crate::support::reference_rules();
    let opts = partition::Options {
        baselines: false,
        ..Default::default()
    };
    let mut report = String::new();
    for (tvm, byoc) in [(1.0, 0.9), (3.0, 2.0)] {
        let est = Mock {
            costs: vec![("tvm".into(), tvm), ("example".into(), byoc)],
        };
        report.push_str(&format!("mock costs: tvm {tvm}, example {byoc}\n"));
        for (name, m) in corpus() {
            let g = DataflowGraph::new(&m, m.main().unwrap());
            let plan = partition::partition(&g, &program, &est, &opts, &partition::Silent)
                .unwrap_or_else(|e| panic!("{name}: {e:?}"));
            let out =
                partition::rewrite(&g, &program, &plan).unwrap_or_else(|e| panic!("{name}: {e:?}"));
            partition::finalize::check_round_trip(&m, &out)
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            // Printed (return types of the outlined functions included), it reads back the same.
            round_trip(&name, &out);
            // The outlined globals, compared without their own names.
            let mut stripped = out.clone();
            for f in &mut stripped.funcs {
                f.attrs.retain(|(k, _)| k != "global_symbol");
            }
            let globals: Vec<_> = out
                .defs
                .iter()
                .filter(|(_, f)| out.func(*f).attr("Compiler").is_some())
                .map(|&(gl, f)| (out.globals[gl.index()].name.clone(), f))
                .collect();
            for (i, (na, fa)) in globals.iter().enumerate() {
                for (nb, fb) in &globals[i + 1..] {
                    assert!(
                        collage::ir::equal::functions_equal(&stripped, *fa, &stripped, *fb)
                            .is_err(),
                        "{name}: @{na} and @{nb} are the same function"
                    );
                }
            }
            let byoc_partitions = plan
                .partitions
                .iter()
                .filter(|p| program.targets[p.target].compiler.is_some())
                .count();
            report.push_str(&format!(
                "  {name}: {} global functions for {byoc_partitions} BYOC partitions\n",
                globals.len()
            ));
        }
    }
    insta::assert_snapshot!(report);
}

/// `--prune` is a heuristic: never better than the exact search, and on the corpus it still
/// finds a cover.
#[test]
fn pruning_is_never_better_than_the_exact_search() {
    let program = crate::enumerate::library();
    let est = collage::planning::cost::analytic::Analytic;
    for (name, m) in corpus().into_iter().filter(|(n, _)| !n.starts_with("gpt2")) {
        let g = DataflowGraph::new(&m, m.main().unwrap());
        let run = |prune: bool| {
            let opts = partition::Options {
                baselines: false,
                prune,
                ..Default::default()
            };
            partition::partition(&g, &program, &est, &opts, &partition::Silent)
                .unwrap_or_else(|e| panic!("{name} (prune {prune}): {e:?}"))
        };
        let (exact, pruned) = (run(false), run(true));
        assert!(
            pruned.total >= exact.total,
            "{name}: pruned {} < exact {}",
            pruned.total,
            exact.total
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Devices

/// Transitions on a planned two-device model: the CPU tail `multiply(%3, %c)` + `tanh` pays
/// its target's crossing (latency plus bytes) only for the value that arrives through the
/// `device_copy` from the GPU, not for `%c` (planned on the CPU) nor for its result (the
/// function's result, on the CPU); the same tail without the multiply's GPU operand would pay
/// nothing.
#[test]
fn transitions_are_charged_only_across_planned_devices() {
    let path = root().join("tests/fixtures/partition-devices/two-devices.relay");
    let m = load_ok(&path);
    let plan =
        collage::analysis::devices::plan_devices(&m, &collage::ir::VirtualDevice::unconstrained())
            .unwrap_or_else(|_| panic!("plans"));
    let mut planned = plan.module.clone();
    collage::analysis::typeck::check(&mut planned).unwrap_or_else(|_| panic!("type-checks"));
    let g = DataflowGraph::new(&planned, planned.main().unwrap());
    let program = crate::enumerate::library();
    let candidates: Vec<Candidate> = collage::planning::enumerate::enumerate(
        &g,
        &program,
        &collage::planning::enumerate::Limits::default(),
    )
    .expect("within the default bounds")
    .candidates
    .into_iter()
    .filter(|c| partition::device_allows(&g, &program, &plan.devices, c))
    .collect();
    let crossings = partition::Crossings::new(&g, &program, &candidates, Some(&plan.devices));
    let tvm_cpu = program
        .targets
        .iter()
        .position(|t| t.name == "tvm_cpu")
        .unwrap();
    let op = |name: &str| (0..g.len()).find(|&i| g.label[i] == name).unwrap();
    let (mul, tanh) = (op("multiply"), op("tanh"));
    let penalty_of = |nodes: &[usize]| {
        let c = candidates
            .iter()
            .find(|c| {
                c.target == tvm_cpu
                    && c.sub_graph
                        .inside
                        .iter()
                        .filter(|&i| g.is_op_call(i))
                        .collect::<Vec<_>>()
                        == nodes
            })
            .unwrap_or_else(|| panic!("no tvm_cpu candidate of {nodes:?}"));
        partition::transition_penalty(&g, &program, &crossings, c)
    };
    let tr = &program.targets[tvm_cpu].transition;
    let (latency, bandwidth) = (tr.latency.unwrap(), tr.bandwidth.unwrap());
    // The [64, 1024] float32 activation copied from the GPU: 262144 bytes.
    assert_eq!(penalty_of(&[mul, tanh]), latency + 262144.0 / bandwidth);
    // tanh alone reads the multiply, on the CPU, and hands its result to the host: free.
    assert_eq!(penalty_of(&[tanh]), 0.0);
}

/// A model annotated with `on_device` on two devices partitions with targets on both, every
/// partition's target device refines the planned device of each node it covers, and the output
/// keeps the copy and the parameter devices.
#[test]
fn two_device_model_partitions_on_both_devices() {
    let path = root().join("tests/fixtures/partition-devices/two-devices.relay");
    let m = load_ok(&path);
    let plan =
        collage::analysis::devices::plan_devices(&m, &collage::ir::VirtualDevice::unconstrained())
            .unwrap_or_else(|_| panic!("plans"));
    assert!(collage::analysis::devices::has_annotations(&m));
    let mut planned = plan.module.clone();
    collage::analysis::typeck::check(&mut planned).unwrap_or_else(|_| panic!("type-checks"));
    let g = DataflowGraph::new(&planned, planned.main().unwrap());
    let program = crate::enumerate::library();
    let result = partition::partition_on_devices(
        &g,
        &program,
        &collage::planning::cost::analytic::Analytic,
        &partition::Options::default(),
        &partition::Silent,
        Some(&plan.devices),
    )
    .unwrap_or_else(|e| panic!("{e:?}"));
    let mut device_types = std::collections::BTreeSet::new();
    for p in &result.partitions {
        let t = &program.targets[p.target];
        if t.is_host {
            continue;
        }
        for i in p.sub_graph.inside.iter() {
            let e = g.expr(i).unwrap();
            assert!(
                t.device.refines(&plan.devices[e.index()]),
                "{} on {} covers node {i} planned on {}",
                p.name,
                t.device,
                plan.devices[e.index()]
            );
        }
        device_types.insert(t.device.device_type);
    }
    assert_eq!(
        device_types.len(),
        2,
        "targets on both devices: {device_types:?}"
    );
    let out = partition::rewrite(&g, &program, &result).unwrap();
    let text = partition::finalize::check_round_trip(&planned, &out).unwrap();
    assert!(text.contains("device_copy("), "{text}");
    assert!(
        text.contains("%c {virtual_device=VirtualDevice(device=\"cpu\", id=0)}"),
        "{text}"
    );
    // Without the plan, the tail would go to the (cheaper) GPU.
    let free = partition::partition(
        &g,
        &program,
        &collage::planning::cost::analytic::Analytic,
        &partition::Options::default(),
        &partition::Silent,
    )
    .unwrap();
    assert!(free.total < result.total);
}

/// Conflicting annotations stop `collage partition` with the planner's diagnostic (both spans),
/// exit code 1 and no panic.
#[test]
fn conflicting_devices_are_a_diagnostic() {
    let path = root().join("tests/fixtures/devices/conflict-param-and-on-device.relay");
    let out = collage(["partition", path.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("E0701"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(out.stdout.is_empty());
}

/// Models that once broke `collage partition` (tests/fixtures/partition-regressions/README.md).
#[test]
fn former_failures_partition_cleanly() {
    let dir = root().join("tests/fixtures/partition-regressions");
    for (model, rules) in [
        ("sub", "sub"),
        ("chain3", "byocnone"),
        ("if", "byoc"),
        ("fn", "byoc"),
        ("m2", "byoc"),
        ("m3", "byoc"),
        ("rec", "byoc"),
        ("deep", "byoc"),
    ] {
        let out = collage_in(
            &dir,
            [
                "partition",
                &format!("{model}.relay"),
                "--rules",
                &format!("{rules}.rules"),
                "--costs",
                "mock:mock.json",
                "--format",
                "json",
            ],
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{model}: {stderr}");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert!(
            v["functions"][0]["total_cost"].as_f64().is_some(),
            "{model}"
        );
    }
}

/// `table:` costs are found by the fingerprints `collage candidates --json` prints, and a
/// chain falls back to the next estimator for candidates the table lacks.
#[test]
fn table_costs_by_fingerprint_with_fallback() {
    let m = load_ok(&root().join("tests/models/mnist.relay"));
    let out = collage([
        "candidates",
        "tests/models/mnist.relay",
        "--target",
        "tvm",
        "--json",
    ]);
    let listed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut table = serde_json::Map::new();
    for t in listed["targets"].as_array().unwrap() {
        for c in t["candidates"].as_array().unwrap() {
            table.insert(c["fingerprint"].as_str().unwrap().to_string(), 1e-6.into());
        }
    }
    assert!(!table.is_empty());
    let table =
        collage::planning::cost::table::Table::from_json(&serde_json::json!({ "costs": table }))
            .unwrap();
    let chain = collage::planning::cost::Chain(vec![
        Box::new(table),
        Box::new(collage::planning::cost::analytic::Analytic),
    ]);
    let program = crate::enumerate::library();
    let g = DataflowGraph::new(&m, m.main().unwrap());
    let cands = collage::planning::enumerate::enumerate(&g, &program, &Default::default())
        .expect("within the limits")
        .candidates;
    let e = estimate_all(&g, &program, &cands, &chain, &|_, _| {});
    let tvm = program
        .targets
        .iter()
        .position(|t| t.name == "tvm")
        .unwrap();
    for (c, cost) in cands.iter().zip(&e.costs) {
        if c.target == tvm {
            assert_eq!(*cost, Cost::value(1e-6), "{}", c.rule_name);
        } else if !program.targets[c.target].is_host {
            assert_ne!(*cost, Cost::value(1e-6), "{}", c.rule_name);
        }
    }
}

/// `--dot` writes one cluster per partition, its label starting with the partition's name and
/// target, and dataflow edges; without a terminal nothing but diagnostics goes to stderr (no
/// progress bar). Colours and the cost in each label are not checked.
#[test]
fn dot_picture_has_a_cluster_per_partition() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let dot = dir.join("mnist.dot");
    let json = collage([
        "partition".as_ref(),
        "tests/models/mnist.relay".as_ref(),
        "--format".as_ref(),
        "json".as_ref(),
        "--dot".as_ref(),
        dot.as_os_str(),
    ]);
    assert_eq!(json.status.code(), Some(0));
    assert!(
        json.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&json.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    let parts = report["functions"][0]["partitions"].as_array().unwrap();
    let text = std::fs::read_to_string(&dot).unwrap();
    assert!(text.starts_with("digraph partitioning {"), "{text}");
    assert_eq!(
        text.matches("subgraph cluster_").count(),
        parts.len(),
        "{text}"
    );
    for p in parts {
        let label = format!(
            "label=\"{} [{}]",
            p["name"].as_str().unwrap(),
            p["target"].as_str().unwrap()
        );
        assert!(text.contains(&label), "{label} missing:\n{text}");
    }
    assert!(text.contains(" -> "), "{text}");
}

#[test]
fn timings_name_every_phase_once_on_stderr() {
    let out = collage([
        "partition",
        "tests/models/mnist.relay",
        "--format",
        "json",
        "--timings",
    ]);
    assert_eq!(out.status.code(), Some(0));
    // The report on stdout is unchanged JSON.
    let _: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    let phases: Vec<&str> = err
        .lines()
        .map(|l| {
            let rest = l.strip_prefix("timing: ").unwrap_or_else(|| panic!("{l}"));
            let (name, ms) = rest.trim_end().rsplit_once(' ').unwrap();
            assert_eq!(ms, "ms", "{l}");
            let value = name.trim_end().rsplit_once(' ').unwrap().1;
            assert!(value.parse::<f64>().unwrap() >= 0.0, "{l}");
            name.trim_end().rsplit_once(' ').unwrap().0.trim_end()
        })
        .collect();
    assert_eq!(
        phases,
        [
            "loading",
            "enumerating candidates",
            "greedy regions",
            "estimating costs",
            "searching",
            "baselines",
            "coalescing",
            "rewriting",
            "writing"
        ]
    );
    // Without the flag, nothing is printed on stderr.
    let quiet = collage(["partition", "tests/models/mnist.relay", "--format", "json"]);
    assert!(quiet.stderr.is_empty());
}

// ---------------------------------------------------------------------------------------------
// The cycle test of the acyclicity constraint and of region merging, against brute force

/// Whether, in the graph whose units are the parts (each one unit) and every other node (each
/// its own unit), some path leaves part `from` and comes back into it: a search over that unit
/// graph, built edge by edge.
fn brute_returns_to(
    g: &DataflowGraph<'_>,
    parts: &[std::collections::BTreeSet<usize>],
    from: usize,
) -> bool {
    let unit = |v: usize| {
        parts
            .iter()
            .position(|p| p.contains(&v))
            .unwrap_or(parts.len() + v)
    };
    let mut succ: std::collections::BTreeMap<usize, std::collections::BTreeSet<usize>> =
        Default::default();
    for v in 0..g.len() {
        for o in g.outputs(v) {
            let (a, b) = (unit(v), unit(o.index()));
            if a != b {
                succ.entry(a).or_default().insert(b);
            }
        }
    }
    let mut stack: Vec<usize> = succ.get(&from).into_iter().flatten().copied().collect();
    let mut seen = std::collections::BTreeSet::new();
    while let Some(u) = stack.pop() {
        if u == from {
            return true;
        }
        if seen.insert(u) {
            stack.extend(succ.get(&u).into_iter().flatten().copied());
        }
    }
    false
}

proptest! {
    #![proptest_config(crate::enumerate_props::config())]

    /// `returns_to_among` (unbounded, and bounded where no part straddles the
    /// bound) agrees with the search over the unit graph, for random parts of random models,
    /// with the tested unit made of one part or of two.
    #[test]
    fn cycle_tests_match_brute_force(
        params in 1u8..=3,
        steps in crate::enumerate_props::steps(),
        tuple_result in any::<bool>(),
        bytes in prop::collection::vec(any::<u8>(), 40),
        two in any::<bool>(),
    ) {
        let text = crate::enumerate_props::model_text(params, &steps, tuple_result);
        let m = crate::enumerate_props::load(&text);
        let g = DataflowGraph::new(&m, m.main().unwrap());
        // Node v: on its own, or in one of four slots.
        let mut owner = vec![usize::MAX; g.len()];
        let mut slots: Vec<std::collections::BTreeSet<usize>> = vec![Default::default(); 4];
        for (v, o) in owner.iter_mut().enumerate() {
            let b = bytes[v % bytes.len()].wrapping_add((v / bytes.len()) as u8);
            if b % 5 < 4 {
                *o = (b % 5) as usize;
                slots[*o].insert(v);
            }
        }
        let from_slots: Vec<usize> = if two { vec![0, 1] } else { vec![0] };
        let from_nodes: std::collections::BTreeSet<usize> =
            from_slots.iter().flat_map(|&k| slots[k].iter().copied()).collect();
        prop_assume!(!from_nodes.is_empty());
        // The parts as the brute force sees them: the tested unit first.
        let mut parts = vec![from_nodes.clone()];
        parts.extend((0..4).filter(|k| !from_slots.contains(k)).map(|k| slots[k].clone()));
        let expected = brute_returns_to(&g, &parts, 0);
        let sets: Vec<IndexSet> = parts
            .iter()
            .map(|p| IndexSet::from_indices(g.len(), p.iter().copied()))
            .collect();
        let forward = partition::edges_go_forward(&g);
        let slot_sets: Vec<IndexSet> = slots
            .iter()
            .map(|p| IndexSet::from_indices(g.len(), p.iter().copied()))
            .collect();
        let part = |k: usize| Some(&slot_sets[k]);
        let mut reach = partition::Reach::default();
        let among = |limit: Option<(&[usize], usize)>, reach: &mut partition::Reach| {
            partition::returns_to_among(
                &g, &owner, 4, &part, &sets[0], &from_slots, limit, reach,
            )
        };
        prop_assert_eq!(among(None, &mut reach), expected, "{}", text);
        if forward {
            // Bounded in two topological orders: node indices, and the local order.
            let identity: Vec<usize> = (0..g.len()).collect();
            // The local order: by the longest path reaching a node, then by index.
            let mut level = vec![0usize; g.len()];
            for v in 0..g.len() {
                for o in g.outputs(v) {
                    level[o.index()] = level[o.index()].max(level[v] + 1);
                }
            }
            let mut by_level: Vec<usize> = (0..g.len()).collect();
            by_level.sort_by_key(|&v| (level[v], v));
            let local = partition::local_order(&g);
            for (r, &v) in by_level.iter().enumerate() {
                prop_assert_eq!(local[v], r, "{}", text);
            }
            for rank in [identity, local] {
                for v in 0..g.len() {
                    for o in g.outputs(v) {
                        prop_assert!(rank[v] < rank[o.index()]);
                    }
                }
                // The first rank at or after the tested unit's that no other part straddles.
                let span = |p: &std::collections::BTreeSet<usize>| {
                    let ranks = p.iter().map(|&v| rank[v]);
                    (ranks.clone().min(), ranks.max())
                };
                let mut bound = span(&from_nodes).1.unwrap();
                while let Some(b) = parts[1..]
                    .iter()
                    .map(span)
                    .filter(|&(a, b)| a.is_some_and(|a| a <= bound) && b > Some(bound))
                    .filter_map(|(_, b)| b)
                    .max()
                {
                    bound = b;
                }
                prop_assert_eq!(among(Some((&rank, bound)), &mut reach), expected, "{}", text);
            }
        }
    }
}

#[test]
fn the_command_reports_planned_devices_and_explains_device_conflicts() {
    let model = "tests/fixtures/partition-devices/two-devices.relay";
    let dir = tempfile::tempdir().unwrap();
    let program = dir.path().join("out.relay");
    let program = program.to_str().unwrap();
    let out = collage(["partition", model, "--format", "json", "-o", program]);
    assert_eq!(out.status.code(), Some(0));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let devices: Vec<(String, String)> = report["functions"][0]["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let field = |k: &str| p[k].as_str().unwrap().to_string();
            (field("target"), field("device"))
        })
        .collect();
    let cuda = r#"VirtualDevice(device="cuda", id=0)"#.to_string();
    let cpu = r#"VirtualDevice(device="cpu", id=0)"#.to_string();
    assert_eq!(
        devices,
        [
            ("cutlass".to_string(), cuda),
            ("tvm_cpu".to_string(), cpu.clone()),
            ("host".to_string(), cpu)
        ]
    );
    let table = collage(["partition", model, "-o", program]);
    let text = String::from_utf8_lossy(&table.stdout);
    let row = |target: &str| {
        text.lines()
            .find(|l| l.split_whitespace().nth(1) == Some(target))
            .unwrap_or_else(|| panic!("no {target} row in\n{text}"))
            .to_string()
    };
    assert!(row("cutlass").contains("cuda:0"), "{text}");
    assert!(row("tvm_cpu").contains("cpu:0"), "{text}");
    // Without a target on the CPU, the CPU-pinned tail has nowhere to run: E2101 names the
    // planned device.
    let stuck = collage([
        "partition",
        model,
        "--target",
        "tvm",
        "--target",
        "cutlass",
        "-o",
        program,
    ]);
    assert_eq!(stuck.status.code(), Some(1));
    let err = String::from_utf8_lossy(&stuck.stderr);
    assert!(err.contains("error[E2101]"), "{err}");
    assert!(
        err.contains(r#"its planned device is VirtualDevice(device="cpu", id=0)"#),
        "{err}"
    );
}

// ---------------------------------------------------------------------------------------------
// Plans keep their targets' limits; restricted baselines are never worse than greedy ones

/// Every partition of the plan that is not the host's is within its target's limits (depth,
/// exits, taps, convexity), as its rules could have produced it.
fn assert_within_limits(
    g: &DataflowGraph<'_>,
    program: &Program,
    plan: &partition::Plan,
    limits: &collage::planning::enumerate::Limits,
) {
    for p in &plan.partitions {
        let t = &program.targets[p.target];
        if t.is_host {
            continue;
        }
        let config = collage::planning::enumerate::target_limits(t, limits);
        assert!(
            p.sub_graph.is_valid(g, &config),
            "{} ({}): depth {}, {} exits: outside {config:?}",
            p.name,
            t.name,
            p.sub_graph.depth,
            p.sub_graph.exit.count()
        );
    }
}

/// The rules of the property below: the scenarios' native target and host, and a BYOC target
/// for the unary and binary elementwise operators the random models use.
fn limits_rules(fusion: &str) -> String {
    format!(
        r#"
target tvm {{
    device = cuda(0);
    rule = only_valid(combine(op_call_by_kind, by_kind(A -> B, B -> R, I -> I) + tuple_arg
        + tuple_proj), max_exits = 1, taps = false);
}}
target host {{
    host = true;
    device = cpu;
}}
target byoc {{
    compiler = "byoc";
    device = cuda(0);
    fusion = {fusion};
    patterns = [
        "byoc.relu" = nn.relu(_),
        "byoc.abs" = abs(_),
        "byoc.tanh" = tanh(_),
        "byoc.add" = add(_, _),
        "byoc.multiply" = multiply(_, _),
        "byoc.transpose" = transpose(_),
    ];
}}
"#
    )
}

proptest! {
    #![proptest_config(crate::enumerate_props::config())]

    /// On random models with a native and a BYOC target, random depth limits (1 to 3) and
    /// random mock costs: no partition of the plan exceeds its target's limits, the BYOC
    /// target with the native ones is never worse than its greedy placement, and the plan is
    /// never worse than any baseline.
    #[test]
    fn plans_keep_limits_and_restricted_baselines_beat_greedy(
        params in 1u8..=3,
        steps in crate::enumerate_props::steps(),
        tuple_result in any::<bool>(),
        byoc_depth in 1u32..=3,
        tvm_depth in 1u32..=3,
        fusion in 0usize..3,
        byoc_cost in 0usize..4,
    ) {
        let text = crate::enumerate_props::model_text(params, &steps, tuple_result);
        let m = crate::enumerate_props::load(&text);
        let g = DataflowGraph::new(&m, m.main().unwrap());
        let program = program(&limits_rules(["none", "tvm", "arbitrary"][fusion]));
        let est = Mock {
            costs: vec![
                ("tvm".into(), 1.0),
                ("byoc".into(), [0.3, 0.6, 0.95, 1.5][byoc_cost]),
            ],
        };
        let opts = partition::Options {
            limits: collage::planning::enumerate::Limits {
                tvm_max_depth: tvm_depth,
                byoc_max_depth: byoc_depth,
                ..Default::default()
            },
            ..Default::default()
        };
        let plan = match partition::partition(&g, &program, &est, &opts, &partition::Silent) {
            Ok(p) => p,
            // Operators neither target runs (`nn.dense` is native, but the others are not all).
            Err(PartitionError::Uncovered { .. }) => return Ok(()),
            Err(e) => panic!("{e:?}\n{text}"),
        };
        assert_within_limits(&g, &program, &plan, &opts.limits);
        let baseline = |n: &str| plan.baselines.iter().find(|b| b.name == n).and_then(|b| b.cost);
        for b in &plan.baselines {
            if let Some(c) = b.cost {
                prop_assert!(plan.total <= c, "total {} above {} {c}\n{text}", plan.total, b.name);
            }
        }
        if let Some(greedy) = baseline("greedy:byoc") {
            let restricted = baseline("byoc");
            prop_assert!(
                restricted.is_some_and(|r| r <= greedy),
                "byoc {restricted:?} above greedy:byoc {greedy}\n{text}"
            );
        }
    }
}

/// `benches/reference.rules`, the reference configuration, models TVM's test hook target
/// (`example_target_hook`) with the fusion style TVM's Collage gives it: arbitrary fusion, as
/// for every compiler other than cutlass, cublas, cudnn and tensorrt (docs/collage.md, "Default
/// rule trees, depth limits and fusion styles").
#[test]
fn the_reference_configuration_fuses_the_hook_target_as_tvm_does() {
    let prelude = collage::rules::library::LIBRARY
        .iter()
        .find(|(n, _)| *n == "rules/prelude.rules")
        .map(|(_, t)| *t)
        .expect("the prelude");
    let text = std::fs::read_to_string(root().join("benches/reference.rules")).unwrap();
    let table = [
        ("rules/prelude.rules", prelude),
        ("rules/reference.rules", text.as_str()),
    ];
    let mut sources = collage::source::SourceMap::new();
    let checked = sema::check(
        &mut sources,
        &sema::Provider::Embedded(&table),
        &[std::path::PathBuf::from("rules/reference.rules")],
    );
    assert!(!checked.diags.has_errors());
    let program = checked.program.expect("the reference rules check");
    let hook = program.target("example").expect("the hook target");
    assert_eq!(hook.compiler.as_deref(), Some("example_target_hook"));
    assert_eq!(
        hook.fusion,
        Some(collage::rules::ruletree::FusionStyle::Arbitrary)
    );
}

/// A function literal has an input (the value it captures) yet is inlinable, so data can leave
/// a union through it and come back without reaching an entry of the union (the union stays
/// convex): greedy merging's bounded search must still find the flow back that touching rules
/// out, as the downstream sets do.
#[test]
fn flows_back_through_a_function_literal() {
    let text = r#"#[version = "0.0.5"]
def @main(%x: Tensor[(4), float32]) -> Tensor[(4), float32] {
  %0 = exp(%x);
  %1 = fn (%y: Tensor[(4), float32]) -> Tensor[(4), float32] { add(%y, %0) };
  %2 = %1(%0);
  negative(%2)
}
"#;
    let m = crate::support::load_text_ok("closure.relay", text);
    let g = DataflowGraph::new(&m, m.main().unwrap());
    let find = |label: &str| (0..g.len()).find(|&i| g.label[i] == label).expect(label);
    let (exp, fun) = (find("exp"), find("fn"));
    let call = (0..g.len())
        .find(|&i| g.inputs(i).iter().any(|j| j.index() == fun))
        .expect("the closure's call");
    let a = SubGraph::new(&g, IndexSet::from_indices(g.len(), [exp]));
    let b = SubGraph::new(&g, IndexSet::from_indices(g.len(), [call]));
    let u = SubGraph::new(&g, a.inside.union(&b.inside));
    // Adjacent and convex, yet not touching: `exp` flows into the call through the literal.
    assert!(a.output.intersects(&b.entry));
    assert!(u.is_convex(&g));
    assert!(!a.touches(&g, &b) && !b.touches(&g, &a));
    assert!(a.flows_into(&g, &b));
    assert!(partition::edges_go_forward(&g));
    let rank = partition::local_order(&g);
    let mut reach = partition::Reach::default();
    assert!(partition::flows_back(
        &g,
        &a,
        &b,
        &u,
        Some(&rank),
        None,
        &mut reach
    ));
    assert!(partition::flows_back(
        &g,
        &b,
        &a,
        &u,
        Some(&rank),
        None,
        &mut reach
    ));
}

// ---------------------------------------------------------------------------------------------
// Library regions that keep their own layout inside: the search against brute force

/// Prices candidates like a library that keeps its own data layout inside a partition (oneDNN's
/// blocked layouts across a chain of convolutions): on the BYOC target each composite costs
/// `composite` and each value entering or leaving the partition a reorder of `reorder`, so a
/// candidate spanning several composites costs less than its composites apart (the reorders
/// between them are saved); a native or host candidate costs 1 per operator call. All costs
/// are multiples of 1/4, so every sum is exact.
struct Layouts {
    composite: f64,
    reorder: f64,
}

impl Estimator for Layouts {
    fn name(&self) -> String {
        "layouts".into()
    }

    fn estimate(&self, req: &Request<'_, '_>) -> Estimate {
        let sg = &req.candidate.sub_graph;
        let calls = collage::planning::cost::mock::op_calls(req) as f64;
        let c = if req.target().name == "byoc" {
            // The composites: inside the partition's own function, one function each.
            let composites: usize = sg.nested.iter().map(|(f, _)| f.nested.len().max(1)).sum();
            composites.max(1) as f64 * self.composite
                + self.reorder * (sg.input.count() + sg.output.count()) as f64
        } else {
            calls
        };
        Cost::value(c).into()
    }
}

/// The cheapest exact, acyclic cover of the graph's nodes by the usable items, by brute force
/// over all their subsets (the partition's own constraint: no path may leave a chosen partition
/// and come back into it).
fn brute_force_acyclic(g: &DataflowGraph<'_>, items: &[Item]) -> Option<f64> {
    let n = g.len();
    let usable: Vec<usize> = (0..items.len())
        .filter(|&k| items[k].cost.is_finite() && !items[k].nodes.is_empty())
        .collect();
    let mut best: Option<i128> = None;
    for mask in 0u32..(1 << usable.len()) {
        let chosen: Vec<usize> = (0..usable.len())
            .filter(|b| mask >> b & 1 == 1)
            .map(|b| usable[b])
            .collect();
        let mut covered = vec![false; n];
        let mut ok = true;
        for &k in &chosen {
            for &i in &items[k].nodes {
                ok &= !covered[i];
                covered[i] = true;
            }
        }
        if !ok || !covered.iter().all(|&c| c) {
            continue;
        }
        let cost: i128 = chosen.iter().map(|&k| exact(items[k].cost)).sum();
        if best.is_some_and(|b| cost >= b) {
            continue;
        }
        let parts: Vec<std::collections::BTreeSet<usize>> = chosen
            .iter()
            .map(|&k| items[k].nodes.iter().copied().collect())
            .collect();
        if (0..parts.len()).all(|p| !brute_returns_to(g, &parts, p)) {
            best = Some(cost);
        }
    }
    best.map(|b| b as f64 * 2f64.powi(-80))
}

proptest! {
    #![proptest_config(crate::enumerate_props::config())]

    /// With candidates spanning several library composites priced below their parts (the
    /// layout a library keeps inside a partition), the plan's total is the brute-force optimum
    /// over every enumerated candidate: the search stays exact when the benefit of keeping a
    /// layout enters as candidates measured whole.
    #[test]
    fn multi_composite_candidates_keep_the_search_exact(
        params in 1u8..=3,
        steps in crate::enumerate_props::steps(),
        tuple_result in any::<bool>(),
        byoc_depth in 2u32..=4,
        composite in 1u8..3,
        reorder in 2u8..4,
    ) {
        // With a composite at 1/4 and reorders at 1/2, one composite alone (1.25) loses to
        // native code (1) and a chain of two (1.5) wins over it (2).
        let est = Layouts {
            composite: f64::from(composite) / 4.0,
            reorder: f64::from(reorder) / 4.0,
        };
        let text = crate::enumerate_props::model_text(params, &steps, tuple_result);
        let m = crate::enumerate_props::load(&text);
        let g = DataflowGraph::new(&m, m.main().unwrap());
        let program = program(&limits_rules("arbitrary"));
        let opts = partition::Options {
            limits: collage::planning::enumerate::Limits {
                byoc_max_depth: byoc_depth,
                ..Default::default()
            },
            ..Default::default()
        };
        let plan = match partition::partition(&g, &program, &est, &opts, &partition::Silent) {
            Ok(p) => p,
            Err(PartitionError::Uncovered { .. }) => return Ok(()),
            Err(e) => panic!("{e:?}\n{text}"),
        };
        let items = plan.items();
        let usable = items.iter().filter(|i| i.cost.is_finite() && !i.nodes.is_empty()).count();
        prop_assume!(usable <= 16);
        prop_assert_eq!(Some(plan.total), brute_force_acyclic(&g, &items), "{}", text);
    }
}
