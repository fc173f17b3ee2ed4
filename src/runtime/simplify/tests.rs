//! Each rewrite on small modules, the cases that must not fold, and the simplified module
//! computing what the original computes (on the reference interpreter, weights from a seed).

use super::*;
use crate::runtime::exec::executor::{compile, Options as ExecOptions};
use crate::runtime::exec::value::Value;
use proptest::prelude::*;

const SEED: u64 = 11;

fn load(body: &str) -> Module {
    crate::frontend::relay::load_text(&format!("#[version = \"0.0.5\"]\n{body}"))
}

fn run(m: &Module, seed: u64) -> Vec<Arc<Tensor>> {
    let w = Weights::new(seed);
    let mw = w.for_module(m);
    let opts = ExecOptions {
        threads: 1,
        ..ExecOptions::default()
    };
    let exe = compile(m, &mw, &opts).unwrap_or_else(|d| panic!("{d:?}"));
    let inputs: Vec<Arc<Tensor>> = exe
        .inputs
        .iter()
        .map(|i| Arc::new(mw.random_input(&i.name, &i.shape).unwrap()))
        .collect();
    let mut out = Vec::new();
    let mut stack = vec![exe.run(&inputs).unwrap().value];
    while let Some(v) = stack.pop() {
        match v {
            Value::Tensor(t) => out.push(t),
            Value::Tuple(f) => stack.extend(f.into_iter().rev()),
        }
    }
    out
}

fn assert_close(a: &[Arc<Tensor>], b: &[Arc<Tensor>]) {
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(b) {
        assert_eq!(x.shape(), y.shape());
        for i in 0..x.numel() {
            let (p, q) = (x.get_f64(i), y.get_f64(i));
            assert!(
                (p - q).abs() <= 1e-5 + 1e-4 * q.abs(),
                "element {i}: {p} against {q}"
            );
        }
    }
}

/// Simplifies `m`, checks that the result (and its printed form, read back) computes what `m`
/// computes, and returns it with the report.
fn check(m: &Module) -> (Module, Report) {
    let (s, r) = simplify(m, &Options { seed: SEED }).unwrap();
    let want = run(m, SEED);
    assert_close(&run(&s, SEED), &want);
    let printed = crate::frontend::relay::print::print_module(&s);
    let again = crate::frontend::relay::load_text(&printed);
    assert_close(&run(&again, SEED), &want);
    (s, r)
}

fn ops(m: &Module) -> Vec<&'static str> {
    let main = m.main().unwrap();
    let l = live(m, m.func(main).body);
    (0..m.exprs.len())
        .filter(|&i| l[i])
        .filter_map(|i| m.called_op(ExprId(i as u32)))
        .map(|op| crate::ops::op(op).name)
        .collect()
}

const CONV_BN: &str = r#"def @main(%x: Tensor[(1, 3, 8, 8), float32]) {
  %0 = nn.conv2d(%x, meta[relay.Constant][0] /* ty=Tensor[(4, 3, 3, 3), float32] */, padding=[1, 1, 1, 1], channels=4, kernel_size=[3, 3]);
  %1 = nn.bias_add(%0, meta[relay.Constant][1] /* ty=Tensor[(4), float32] */);
  %2 = nn.batch_norm(%1, meta[relay.Constant][2] /* ty=Tensor[(4), float32] */, meta[relay.Constant][3] /* ty=Tensor[(4), float32] */, meta[relay.Constant][4] /* ty=Tensor[(4), float32] */, meta[relay.Constant][5] /* ty=Tensor[(4), float32] */);
  %3 = %2.0;
  nn.relu(%3)
}"#;

#[test]
fn batch_norm_folds_into_conv_and_bias() {
    let (s, r) = check(&load(CONV_BN));
    assert_eq!(r.batch_norm_into_conv, 1, "{r:?}");
    assert_eq!(ops(&s), ["nn.conv2d", "nn.bias_add", "nn.relu"]);
    assert_eq!((r.ops_before, r.ops_after), (4, 3));
}

#[test]
fn batch_norm_folds_into_conv_without_bias() {
    let text = r#"def @main(%x: Tensor[(1, 3, 8, 8), float32]) {
  %0 = nn.conv2d(%x, meta[relay.Constant][0] /* ty=Tensor[(4, 3, 3, 3), float32] */, padding=[1, 1, 1, 1], channels=4, kernel_size=[3, 3]);
  %1 = nn.batch_norm(%0, meta[relay.Constant][2] /* ty=Tensor[(4), float32] */, meta[relay.Constant][3] /* ty=Tensor[(4), float32] */, meta[relay.Constant][4] /* ty=Tensor[(4), float32] */, meta[relay.Constant][5] /* ty=Tensor[(4), float32] */, epsilon=0.001f, center=False);
  %1.0
}"#;
    let (s, r) = check(&load(text));
    assert_eq!(r.batch_norm_into_conv, 1, "{r:?}");
    assert_eq!(ops(&s), ["nn.conv2d", "nn.bias_add"]);
}

#[test]
fn shared_conv_output_keeps_the_conv() {
    // The convolution's result has a second user: its weights cannot change.
    let text = r#"def @main(%x: Tensor[(1, 3, 8, 8), float32]) {
  %0 = nn.conv2d(%x, meta[relay.Constant][0] /* ty=Tensor[(4, 3, 3, 3), float32] */, padding=[1, 1, 1, 1], channels=4, kernel_size=[3, 3]);
  %1 = nn.batch_norm(%0, meta[relay.Constant][2] /* ty=Tensor[(4), float32] */, meta[relay.Constant][3] /* ty=Tensor[(4), float32] */, meta[relay.Constant][4] /* ty=Tensor[(4), float32] */, meta[relay.Constant][5] /* ty=Tensor[(4), float32] */);
  %2 = %1.0;
  add(%2, %0)
}"#;
    let (s, r) = check(&load(text));
    assert_eq!(r.batch_norm_into_conv, 0);
    assert_eq!(r.batch_norm_to_scale_shift, 1);
    assert_eq!(ops(&s), ["nn.conv2d", "multiply", "add", "add"]);
    // The weight is the original constant, still drawn from the seed.
    assert!(!s.meta.data.contains_key(&(CONSTANT_KEY.to_string(), 0)));
}

#[test]
fn non_constant_weights_do_not_fold() {
    let text = r#"def @main(%x: Tensor[(1, 3, 8, 8), float32], %w: Tensor[(4, 3, 3, 3), float32]) {
  %0 = nn.conv2d(%x, %w, padding=[1, 1, 1, 1], channels=4, kernel_size=[3, 3]);
  %1 = multiply(%0, meta[relay.Constant][0] /* ty=Tensor[(4, 1, 1), float32] */);
  %2 = nn.batch_norm(%1, meta[relay.Constant][2] /* ty=Tensor[(4), float32] */, meta[relay.Constant][3] /* ty=Tensor[(4), float32] */, meta[relay.Constant][4] /* ty=Tensor[(4), float32] */, meta[relay.Constant][5] /* ty=Tensor[(4), float32] */);
  %2.0
}"#;
    let (s, r) = check(&load(text));
    assert_eq!(r.batch_norm_into_conv + r.scales_into_weights, 0, "{r:?}");
    assert_eq!(ops(&s), ["nn.conv2d", "multiply", "multiply", "add"]);
}

#[test]
fn depthwise_oihw_folds_per_output_channel() {
    let text = r#"def @main(%x: Tensor[(1, 4, 6, 6), float32]) {
  %0 = nn.conv2d(%x, meta[relay.Constant][0] /* ty=Tensor[(8, 1, 3, 3), float32] */, padding=[1, 1, 1, 1], groups=4, channels=8, kernel_size=[3, 3]);
  %1 = nn.batch_norm(%0, meta[relay.Constant][2] /* ty=Tensor[(8), float32] */, meta[relay.Constant][3] /* ty=Tensor[(8), float32] */, meta[relay.Constant][4] /* ty=Tensor[(8), float32] */, meta[relay.Constant][5] /* ty=Tensor[(8), float32] */);
  %1.0
}"#;
    let (s, r) = check(&load(text));
    assert_eq!(r.batch_norm_into_conv, 1, "{r:?}");
    assert_eq!(ops(&s), ["nn.conv2d", "nn.bias_add"]);
}

#[test]
fn grouped_kernel_without_leading_o_does_not_fold() {
    // In `HWOI` a grouped kernel's `O` extent is not the output channels in general.
    let text = r#"def @main(%x: Tensor[(1, 6, 6, 4), float32]) {
  %0 = nn.conv2d(%x, meta[relay.Constant][0] /* ty=Tensor[(3, 3, 4, 1), float32] */, padding=[1, 1, 1, 1], groups=4, channels=4, kernel_size=[3, 3], data_layout="NHWC", kernel_layout="HWOI");
  multiply(%0, meta[relay.Constant][1] /* ty=Tensor[(4), float32] */)
}"#;
    let m = load(text);
    let (s, r) = simplify(&m, &Options { seed: SEED }).unwrap();
    assert_eq!(r.scales_into_weights, 0, "{r:?}");
    assert_eq!(ops(&s), ["nn.conv2d", "multiply"]);
}

#[test]
fn nhwc_conv_takes_a_scale_on_its_channel_axis() {
    let text = r#"def @main(%x: Tensor[(1, 6, 6, 3), float32]) {
  %0 = nn.conv2d(%x, meta[relay.Constant][0] /* ty=Tensor[(3, 3, 3, 4), float32] */, padding=[1, 1, 1, 1], channels=4, kernel_size=[3, 3], data_layout="NHWC", kernel_layout="HWIO");
  %1 = multiply(%0, meta[relay.Constant][1] /* ty=Tensor[(4), float32] */);
  add(%1, meta[relay.Constant][2] /* ty=Tensor[(1, 1, 1, 4), float32] */)
}"#;
    let (s, r) = check(&load(text));
    assert_eq!((r.scales_into_weights, r.shifts_into_bias), (1, 1), "{r:?}");
    assert_eq!(ops(&s), ["nn.conv2d", "nn.bias_add"]);
}

#[test]
fn dense_scales_fold_only_per_output_column() {
    let text = r#"def @main(%x: Tensor[(2, 8), float32]) {
  %0 = nn.dense(%x, meta[relay.Constant][0] /* ty=Tensor[(5, 8), float32] */, units=5);
  %1 = add(%0, meta[relay.Constant][1] /* ty=Tensor[(5), float32] */);
  %2 = multiply(%1, meta[relay.Constant][2] /* ty=Tensor[(1, 5), float32] */);
  %3 = nn.dense(%x, meta[relay.Constant][3] /* ty=Tensor[(5, 8), float32] */, units=5);
  %4 = multiply(%3, meta[relay.Constant][4] /* ty=Tensor[(2, 1), float32] */);
  %5 = nn.matmul(%x, meta[relay.Constant][5] /* ty=Tensor[(8, 5), float32] */);
  %6 = multiply(%5, meta[relay.Constant][6] /* ty=Tensor[(5), float32] */);
  (%2, %4, %6)
}"#;
    let (s, r) = check(&load(text));
    // Only the first: the second scales rows (the batch), the third's weight is `[K, N]`.
    assert_eq!(r.scales_into_weights, 1, "{r:?}");
    assert_eq!(
        ops(&s),
        [
            "nn.dense",
            "add",
            "nn.dense",
            "multiply",
            "nn.matmul",
            "multiply"
        ]
    );
}

#[test]
fn constant_transpose_folds_into_the_dense_weight() {
    let text = r#"def @main(%x: Tensor[(2, 8), float32]) {
  %0 = transpose(meta[relay.Constant][0] /* ty=Tensor[(8, 5), float32] */, axes=[1, 0]);
  nn.dense(%x, %0, units=5)
}"#;
    let (s, r) = check(&load(text));
    assert_eq!(r.constants_folded, 1, "{r:?}");
    assert_eq!(ops(&s), ["nn.dense"]);
}

#[test]
fn large_results_stay_lazy() {
    // A scalar broadcast to 16 MiB is not made a constant; a small one is.
    let text = r#"def @main(%x: Tensor[(2048, 2048), float32], %y: Tensor[(4, 4), float32]) {
  %0 = broadcast_to(2f, shape=[2048, 2048]);
  %1 = add(%x, %0);
  %2 = broadcast_to(2f, shape=[4, 4]);
  %3 = add(%y, %2);
  (%1, %3)
}"#;
    let m = load(text);
    let (s, r) = simplify(&m, &Options { seed: SEED }).unwrap();
    assert_eq!(r.constants_folded, 1, "{r:?}");
    assert_eq!(ops(&s), ["broadcast_to", "add", "add"]);
}

#[test]
fn identities_and_dead_code_go() {
    // The interpreter has no `nn.dropout`: once it is gone, the module runs.
    let text = r#"def @main(%x: Tensor[(2, 3), float32]) {
  %0 = nn.dropout(%x, rate=0.1f);
  %1 = %0.0;
  nn.relu(%1)
}"#;
    let (s, r) = simplify(&load(text), &Options { seed: SEED }).unwrap();
    assert_eq!(r.identities_removed, 1, "{r:?}");
    assert_eq!(ops(&s), ["nn.relu"]);
    run(&s, SEED);
    let text = r#"def @main(%x: Tensor[(2, 3), float32]) {
  %1 = nn.relu(%x);
  %2 = copy(%1);
  %3 = reshape(%2, newshape=[2, 3]);
  %4 = multiply(%3, 1f);
  %5 = add(0f, %4);
  %6 = reshape(%5, newshape=[3, 2]);
  %7 = nn.relu(%x);
  %8 = multiply(%6, 2f);
  %8
}"#;
    let (s, r) = check(&load(text));
    assert_eq!(r.identities_removed, 4, "{r:?}");
    assert_eq!(r.dead_removed, 1, "{r:?}");
    assert_eq!(ops(&s), ["nn.relu", "reshape", "multiply"]);
    // Not identities: a reshape to another shape, a multiply by 2, an add that broadcasts.
    let text = r#"def @main(%x: Tensor[(3), float32]) {
  %0 = add(%x, meta[relay.Constant][0] /* ty=Tensor[(2, 3), float32] */);
  multiply(%0, 2f)
}"#;
    let (_, r) = check(&load(text));
    assert!(!r.changed(), "{r:?}");
}

#[test]
fn lone_batch_norm_becomes_scale_and_shift_and_roles_are_kept() {
    // The variance is also added to the result elsewhere: once the batch norm is gone its role
    // would change (and with it its drawn values), so it is bound to the original's values.
    let text = r#"def @main(%x: Tensor[(1, 4, 3, 3), float32]) {
  %0 = nn.relu(%x);
  %1 = nn.batch_norm(%0, meta[relay.Constant][2] /* ty=Tensor[(4), float32] */, meta[relay.Constant][3] /* ty=Tensor[(4), float32] */, meta[relay.Constant][4] /* ty=Tensor[(4), float32] */, meta[relay.Constant][5] /* ty=Tensor[(4), float32] */);
  %2 = %1.0;
  %3 = expand_dims(meta[relay.Constant][5] /* ty=Tensor[(4), float32] */, axis=1, num_newaxis=2);
  %4 = add(%x, %3);
  (%2, %4)
}"#;
    let (s, r) = check(&load(text));
    assert_eq!(r.batch_norm_to_scale_shift, 1, "{r:?}");
    assert_eq!(r.constants_folded, 1, "{r:?}");
    assert!(!ops(&s).contains(&"nn.batch_norm"));
    // The expand_dims of the variance folded: the constant holds the original's values.
    let m = load(text);
    let w = Weights::new(SEED);
    let var = w
        .for_module(&m)
        .constant(&m, {
            let i = m
                .exprs
                .iter()
                .position(|e| matches!(e, Expr::Const(Constant::Meta { index: 5, .. })))
                .unwrap();
            ExprId(i as u32)
        })
        .unwrap();
    assert!(var.as_slice::<f32>().iter().all(|v| (0.5..1.5).contains(v)));
}

#[test]
fn modules_with_other_functions_are_left_alone() {
    let text = r#"def @f(%a: Tensor[(2), float32]) { copy(%a) }
def @main(%x: Tensor[(2), float32]) { @f(%x) }"#;
    let m = load(text);
    let (_, r) = simplify(&m, &Options { seed: SEED }).unwrap();
    assert!(r.skipped.is_some());
    assert!(!r.changed());
}

/// A random chain over a `(1, C, 5, 5)` tensor: convolutions (plain, grouped, with and without
/// bias), batch norms, per-channel and uniform scales and shifts, identities; some results
/// used twice.
fn chain(steps: &[(u8, u8)]) -> String {
    let c = 4;
    let mut lines = Vec::new();
    let mut cur = "%x".to_string();
    let mut k = 0;
    let mut konst = |ty: &str| {
        k += 1;
        format!("meta[relay.Constant][{k}] /* ty=Tensor[{ty}, float32] */")
    };
    let mut n = 0;
    let mut done: Vec<String> = Vec::new();
    for (i, &(kind, arg)) in steps.iter().enumerate() {
        let vec = format!("({c})");
        let rhs = match kind % 8 {
            0 => format!(
                "nn.conv2d({cur}, {}, padding=[1, 1, 1, 1], channels={c}, kernel_size=[3, 3])",
                konst(&format!("({c}, {c}, 3, 3)"))
            ),
            1 => format!(
                "nn.conv2d({cur}, {}, padding=[0, 0, 0, 0], groups={c}, channels={c}, kernel_size=[1, 1])",
                konst(&format!("({c}, 1, 1, 1)"))
            ),
            2 => format!("nn.bias_add({cur}, {})", konst(&vec)),
            3 => {
                let bn = format!(
                    "nn.batch_norm({cur}, {}, {}, {}, {})",
                    konst(&vec),
                    konst(&vec),
                    konst(&vec),
                    konst(&vec)
                );
                lines.push(format!("  %{n} = {bn};"));
                n += 1;
                format!("%{}.0", n - 1)
            }
            4 => match arg % 3 {
                0 => format!("multiply({cur}, {})", konst(&format!("({c}, 1, 1)"))),
                1 => format!("multiply({cur}, 0.5f)"),
                _ => format!("multiply({cur}, 1f)"),
            },
            5 => match arg % 3 {
                0 => format!("add({}, {cur})", konst(&format!("({c}, 1, 1)"))),
                1 => format!("subtract({cur}, {})", konst(&format!("(1, {c}, 1, 1)"))),
                _ => format!("add({cur}, 0f)"),
            },
            6 => "nn.relu(CUR)".replace("CUR", &cur),
            _ => {
                // A second user of an earlier value.
                let j = arg as usize % (i + 1);
                let other = done.get(j).cloned().unwrap_or_else(|| "%x".to_string());
                format!("add({cur}, {other})")
            }
        };
        let v = format!("%{n}");
        n += 1;
        lines.push(format!("  {v} = {rhs};"));
        done.push(v.clone());
        cur = v;
    }
    format!(
        "def @main(%x: Tensor[(1, {c}, 5, 5), float32]) {{\n{}\n  {cur}\n}}",
        lines.join("\n")
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// The simplified module computes what the original computes (printed and read back too),
    /// and has no batch norm left.
    #[test]
    fn simplified_chains_compute_the_same(steps in prop::collection::vec((0u8..8, 0u8..6), 1..9)) {
        let m = load(&chain(&steps));
        let (s, r) = check(&m);
        prop_assert_eq!(ops(&s).len(), r.ops_after);
        prop_assert!(!ops(&s).contains(&"nn.batch_norm"));
    }
}

#[test]
fn layer_norm_is_expanded_on_any_axis() {
    // Over the last axis: gamma and beta broadcast as they are.
    let last = r#"def @main(%x: Tensor[(1, 5, 8), float32]) {
  nn.layer_norm(%x, meta[relay.Constant][0] /* ty=Tensor[(8), float32] */, meta[relay.Constant][1] /* ty=Tensor[(8), float32] */, epsilon=1e-12f)
}"#;
    let (s, r) = check(&load(last));
    assert_eq!(r.layer_norms_expanded, 1, "{r:?}");
    assert_eq!(
        ops(&s),
        ["mean", "subtract", "power", "mean", "add", "sqrt", "divide", "multiply", "add"]
    );
    // Over a middle axis: gamma and beta go onto the axis (gamma, a constant, folded; beta,
    // an input, through `expand_dims`).
    let middle = r#"def @main(%x: Tensor[(2, 3, 4), float32], %b: Tensor[(3), float32]) {
  nn.layer_norm(%x, meta[relay.Constant][0] /* ty=Tensor[(3), float32] */, %b, axis=1)
}"#;
    let (s, r) = check(&load(middle));
    assert_eq!(r.layer_norms_expanded, 1, "{r:?}");
    assert_eq!(
        ops(&s),
        [
            "mean",
            "subtract",
            "power",
            "mean",
            "add",
            "sqrt",
            "divide",
            "multiply",
            "expand_dims",
            "add"
        ]
    );
    // Without gamma and beta.
    let bare = r#"def @main(%x: Tensor[(2, 3, 4), float32]) {
  nn.layer_norm(%x, meta[relay.Constant][0] /* ty=Tensor[(4), float32] */, meta[relay.Constant][1] /* ty=Tensor[(4), float32] */, center=False, scale=False)
}"#;
    let (s, r) = check(&load(bare));
    assert_eq!(r.layer_norms_expanded, 1, "{r:?}");
    assert_eq!(ops(&s).last(), Some(&"divide"), "{:?}", ops(&s));
    // Not float32: left alone.
    let half = r#"def @main(%x: Tensor[(2, 8), float16], %g: Tensor[(8), float16], %b: Tensor[(8), float16]) {
  nn.layer_norm(%x, %g, %b)
}"#;
    let (s, r) = simplify(&load(half), &Options { seed: SEED }).unwrap();
    assert_eq!(r.layer_norms_expanded, 0);
    assert_eq!(ops(&s), ["nn.layer_norm"]);
}
