//! Device planning scenarios: every `tests/fixtures/devices/*.relay` holds an input module, the
//! line `// ==== expected ====` and the expected planned module in the minimal representation.
//! For each scenario (DP is `plan_devices`, DPL is `expand`):
//!
//! * `DP(parse(input)) == DPL(parse(expected))`: the planned module is structurally equal to the
//!   expected one (devices on binders and function results included), and the device of every
//!   corresponding expression agrees (the complete representations are equal);
//! * `parse(print(DP(input))) == parse(expected)`;
//! * function result devices are compared explicitly;
//! * DPL of the planned module is DP's own complete representation, and planning is idempotent;
//! * printed with `--tvm-compat` (devices in a metadata section, let-bound variables' devices on
//!   `on_device` calls), the input and the planned module use only TVM's syntax, read back, and
//!   plan to the same module as before; an error scenario's input keeps its error.
//!
//! A header line `// default-device: cuda` changes the default device (cpu otherwise); a header
//! line `// expect-error: E0701` makes the scenario one that must fail with that code, pointing
//! at two places.

use crate::support::{assert_tvm_device_syntax, load_text, load_text_ok, rel, root, round_trip};
use collage::analysis::devices::{expand, plan_devices, DevicePlan};
use collage::driver::parse_device_arg;
use collage::frontend::relay::print::{
    print_module, print_module_with, print_module_with_devices, PrintOptions,
};
use collage::ir::equal::{modules_correspondence, modules_equal};
use collage::ir::{Expr, ExprId, Module, VirtualDevice};
use std::path::{Path, PathBuf};

const SEPARATOR: &str = "// ==== expected ====";

fn scenarios() -> Vec<PathBuf> {
    let dir = root().join("tests/fixtures/devices");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("tests/fixtures/devices exists")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "relay"))
        .collect();
    files.sort();
    files
}

fn header<'t>(text: &'t str, key: &str) -> Option<&'t str> {
    text.lines()
        .take_while(|l| l.starts_with("//"))
        .find_map(|l| l.strip_prefix(key))
        .map(str::trim)
}

#[test]
fn device_scenarios_plan_to_their_expected_minimal_form() {
    let files = scenarios();
    assert!(files.len() >= 25, "only {} device scenarios", files.len());
    for path in &files {
        check_scenario(path);
    }
}

fn check_scenario(path: &Path) {
    let name = rel(path);
    let text = std::fs::read_to_string(path).unwrap();
    let default = header(&text, "// default-device:")
        .map(|d| parse_device_arg(d).unwrap_or_else(|| panic!("{name}: bad default device")))
        .unwrap_or(VirtualDevice::for_device(1, 0));
    if let Some(code) = header(&text, "// expect-error:") {
        check_error_scenario(&name, &text, code, &default);
        return;
    }
    let (input_text, expected_text) = text
        .split_once(SEPARATOR)
        .unwrap_or_else(|| panic!("{name}: no `{SEPARATOR}` line"));
    let input = load_text_ok(&name, input_text);
    let plan = plan_devices(&input, &default).unwrap_or_else(|d| {
        let (sources, _, _) = load_text(&name, input_text);
        panic!("{name}: planning failed:\n{}", d.render_plain(&sources))
    });
    let printed = print_module(&plan.module);
    let expected = load_text_ok(&format!("{name} (expected)"), expected_text);

    // DP(parse(input)) == DPL(parse(expected)).
    let pairs = modules_correspondence(&plan.module, &expected).unwrap_or_else(|e| {
        panic!("{name}: planned module differs: {e}\n--- planned ---\n{printed}")
    });
    let complete = expand(&expected).unwrap_or_else(|d| {
        let (sources, _, _) = load_text(&name, expected_text);
        panic!(
            "{name}: DPL fails on the expected module:\n{}",
            d.render_plain(&sources)
        )
    });
    for &(a, b) in &pairs {
        assert_eq!(
            plan.devices[a.index()],
            complete[b.index()],
            "{name}: devices differ at `{}`\n--- planned ---\n{printed}",
            describe(&plan.module, a)
        );
    }
    compare_result_devices(&name, &plan, &expected, &pairs);

    // parse(print(DP(input))) == parse(expected).
    let reparsed = load_text_ok(&format!("{name} (printed)"), &printed);
    if let Err(e) = modules_equal(&reparsed, &expected) {
        panic!(
            "{name}: printed plan differs from the expected one: {e}\n--- planned ---\n{printed}"
        );
    }

    // The complete form (devices in comments) reads back as the same module.
    let complete_text =
        print_module_with_devices(&plan.module, PrintOptions::default(), &plan.devices);
    let reparsed_complete = load_text_ok(&format!("{name} (complete)"), &complete_text);
    if let Err(e) = modules_equal(&reparsed_complete, &expected) {
        panic!("{name}: the complete form does not read back: {e}\n{complete_text}");
    }

    // DPL recovers DP's complete representation from DP's own output.
    let own = expand(&plan.module).unwrap_or_else(|_| panic!("{name}: DPL fails on DP's output"));
    for (i, d) in own.iter().enumerate() {
        let reachable = pairs.iter().any(|&(a, _)| a.index() == i);
        if reachable {
            assert_eq!(
                d, &plan.devices[i],
                "{name}: DPL(DP) differs at expression {i}"
            );
        }
    }

    // Planning is idempotent, and the printed form round-trips.
    let again = plan_devices(&reparsed, &default).expect("re-planning succeeds");
    if let Err(e) = modules_equal(&again.module, &expected) {
        panic!("{name}: planning is not idempotent: {e}");
    }
    round_trip(&name, &expected);
    round_trip(&name, &input);

    // The TVM-compatible form of the input and of the plan reads back and plans the same.
    for (what, module) in [("input", &input), ("planned", &plan.module)] {
        let text = print_module_with(module, TVM_COMPAT);
        let label = format!("{name} ({what}, --tvm-compat)");
        assert_tvm_device_syntax(&label, &text);
        let back = load_text_ok(&label, &text);
        let again = plan_devices(&back, &default)
            .unwrap_or_else(|_| panic!("{label}: planning fails\n{text}"));
        if let Err(e) = modules_equal(&again.module, &plan.module) {
            panic!("{label}: plans differently: {e}\n{text}");
        }
    }
}

const TVM_COMPAT: PrintOptions = PrintOptions {
    type_comments: true,
    tvm_compat: true,
};

/// The result device of every planned function (definitions and literals) agrees with the
/// planned device of its body, and with the expected result device where that is written. (The
/// structural equality above already compares the written result devices themselves.)
fn compare_result_devices(
    name: &str,
    plan: &DevicePlan,
    expected: &Module,
    pairs: &[(ExprId, ExprId)],
) {
    let planned = |f: &collage::ir::Function| f.attrs.is_empty();
    for &(g, f) in &plan.module.defs {
        let def_name = &plan.module.globals[g.index()].name;
        let func = plan.module.func(f);
        if !planned(func) {
            continue;
        }
        let other = expected.func(expected.def(def_name).expect("same definitions"));
        let body = &plan.devices[func.body.index()];
        assert_eq!(body, &func.result_device, "{name}: body of @{def_name}");
        if !other.result_device.is_unconstrained() {
            assert_eq!(body, &other.result_device, "{name}: result of @{def_name}");
        }
    }
    for &(a, b) in pairs {
        if let (Expr::Func(fa), Expr::Func(fb)) = (plan.module.expr(a), expected.expr(b)) {
            let (func, other) = (plan.module.func(*fa), expected.func(*fb));
            if !planned(func) {
                continue;
            }
            let body = &plan.devices[func.body.index()];
            assert_eq!(
                body, &func.result_device,
                "{name}: body of a function literal"
            );
            if !other.result_device.is_unconstrained() {
                assert_eq!(body, &other.result_device, "{name}: result of a literal");
            }
        }
    }
}

fn describe(m: &Module, e: ExprId) -> String {
    format!("{:?}", m.expr(e))
}

fn check_error_scenario(name: &str, text: &str, code: &str, default: &VirtualDevice) {
    let input_text = text.split(SEPARATOR).next().unwrap_or(text);
    let (sources, _, result) = load_text(name, input_text);
    let m =
        result.unwrap_or_else(|d| panic!("{name} does not load:\n{}", d.render_plain(&sources)));
    let diags = match plan_devices(&m, default) {
        Ok(_) => panic!("{name}: planning succeeded, expected {code}"),
        Err(d) => d,
    };
    let d = diags.iter().find(|d| d.code.id == code).unwrap_or_else(|| {
        panic!(
            "{name}: expected {code}, got:\n{}",
            diags.render_plain(&sources)
        )
    });
    // The TVM-compatible form means the same: planning it fails with the same code.
    let text = print_module_with(&m, TVM_COMPAT);
    assert_tvm_device_syntax(name, &text);
    let back = load_text_ok(&format!("{name} (--tvm-compat)"), &text);
    match plan_devices(&back, default) {
        Ok(_) => panic!("{name}: the TVM-compatible form plans\n{text}"),
        Err(again) => assert!(
            again.iter().any(|d| d.code.id == code),
            "{name}: the TVM-compatible form fails differently\n{text}"
        ),
    }
    assert!(
        d.labels.len() >= 2,
        "{name}: the conflict must point at both places:\n{}",
        diags.render_plain(&sources)
    );
    for l in &d.labels {
        assert!(l.span.end as usize <= input_text.len() && l.span.start < l.span.end);
    }
    let stem = name
        .rsplit('/')
        .next()
        .unwrap_or(name)
        .trim_end_matches(".relay");
    insta::with_settings!({snapshot_suffix => stem}, {
        insta::assert_snapshot!("conflict", diags.render_plain(&sources));
    });
}

#[test]
fn minimal_form_without_critical_devices_is_rejected_by_dpl() {
    let text = r#"#[version = "0.0.5"]
def @main(%x: Tensor[(4), float32], virtual_device=VirtualDevice(device="cpu", id=0)) {
  let %y = add(%x, %x);
  %y
}
"#;
    let (sources, _, m) = load_text("missing.relay", text);
    let m = m.unwrap();
    let diags = expand(&m).expect_err("critical devices are missing");
    let rendered = diags.render_plain(&sources);
    assert_eq!(diags.len(), 2, "{rendered}");
    assert!(diags.iter().all(|d| d.code.id == "E0703"), "{rendered}");
    assert!(
        rendered.contains("parameter `%x` has no virtual device"),
        "{rendered}"
    );
    assert!(
        rendered.contains("let-bound variable `%y` has no virtual device"),
        "{rendered}"
    );
}

#[test]
fn value_used_on_another_device_without_copy_is_rejected_by_dpl() {
    let text = r#"#[version = "0.0.5"]
def @main(%x {virtual_device=VirtualDevice(device="cuda", id=0)}: Tensor[(4), float32], virtual_device=VirtualDevice(device="cpu", id=0)) {
  add(%x, %x)
}
"#;
    let (_, _, m) = load_text("mismatch.relay", text);
    let diags = expand(&m.unwrap()).expect_err("the use needs a copy");
    assert!(diags.iter().all(|d| d.code.id == "E0704"));
}

#[test]
fn plan_gives_every_main_expression_a_device_for_the_partitioner() {
    let text = r#"#[version = "0.0.5"]
def @main(%x: Tensor[(4), float32]) {
  %0 = on_device(nn.relu(%x), virtual_device=VirtualDevice(device="cuda", id=0));
  add(%0, %0)
}
"#;
    let (_, _, m) = load_text("api.relay", text);
    let m = m.unwrap();
    let cuda = VirtualDevice::for_device(2, 0);
    let plan = plan_devices(&m, &VirtualDevice::unconstrained()).unwrap();
    let relu_op = collage::ops::registry().lookup("nn.relu").unwrap();
    let relu = (0..m.exprs.len())
        .map(|i| ExprId(i as u32))
        .find(|&e| {
            matches!(m.expr(e), Expr::Call { callee: collage::ir::Callee::Op(op), .. } if *op == relu_op)
        })
        .unwrap();
    assert_eq!(plan.device_of(relu), &cuda);
    assert!(plan.allows(relu, &cuda));
    assert!(!plan.allows(relu, &VirtualDevice::for_device(1, 0)));
    // What no annotation constrains stays open with an unconstrained default: any target fits.
    let add = m.func(m.main().unwrap()).body;
    assert!(plan.device_of(add).is_unconstrained());
    assert!(plan.allows(add, &VirtualDevice::for_device(1, 0)));
}

#[test]
fn long_chains_plan_without_deep_recursion() {
    // 20 000 lets alternating between two devices, and as many graph bindings: planning,
    // expanding and printing run in a thread with a small stack.
    let gpu = r#"VirtualDevice(device="cuda", id=0)"#;
    let cpu = r#"VirtualDevice(device="cpu", id=0)"#;
    let mut text = String::from("#[version = \"0.0.5\"]\ndef @main(%x: Tensor[(4), float32]) {\n");
    text.push_str("  %0 = nn.relu(%x);\n");
    for i in 1..20_000 {
        text.push_str(&format!("  %{i} = negative(%{});\n", i - 1));
    }
    text.push_str("  let %l0 = %19999;\n");
    for i in 1..20_000 {
        let device = if i % 2 == 0 { gpu } else { cpu };
        let value = format!("on_device(negative(%l{}), virtual_device={device})", i - 1);
        text.push_str(&format!("  let %l{i} = {value};\n"));
    }
    text.push_str("  %l19999\n}\n");
    let worker = std::thread::Builder::new()
        .stack_size(512 << 10)
        .spawn(move || {
            let (_, _, m) = load_text("chain.relay", &text);
            let m = m.expect("the chain loads");
            let plan = plan_devices(&m, &VirtualDevice::for_device(1, 0)).expect("plans");
            let complete = expand(&plan.module).expect("expands");
            let printed = print_module(&plan.module);
            (complete.len(), printed.matches("device_copy").count())
        })
        .unwrap();
    let (n, copies) = worker.join().expect("no stack overflow");
    assert!(n > 60_000);
    // Every let after the first reads the previous one from the other device.
    assert_eq!(copies, 19_998);
}
