//! The RelayScript fixture suite: `tests/fixtures/relay/ok` must load and round-trip;
//! `tests/fixtures/relay/err` must fail with the code named in the fixture's first line
//! (`// expect: E0301`), and the rendered diagnostics are snapshotted. The printed form of a
//! partitioned model pins the return types of outlined functions. Every ok fixture printed in
//! the TVM-compatible form uses TVM's device syntax and reads back to the same module (to the
//! same planned module where a let-bound variable carries a device); one such form is pinned.

use crate::support::{
    assert_tvm_device_syntax, load_ok, load_text, load_text_ok, reference_rules, rel, root,
    round_trip,
};
use collage::frontend::relay::print::{print_module_with, PrintOptions};
use collage::ir::equal::modules_equal;
use collage::ir::{Expr, Module, VirtualDevice};

const TVM_COMPAT: PrintOptions = PrintOptions {
    type_comments: true,
    tvm_compat: true,
};

#[test]
fn ok_fixtures_load_and_round_trip() {
    insta::glob!("../fixtures/relay", "ok/*.relay", |path| {
        let m = load_ok(path);
        let printed = round_trip(&rel(path), &m);
        insta::assert_snapshot!(printed);
    });
}

#[test]
fn err_fixtures_report_their_code() {
    insta::glob!("../fixtures/relay", "err/*.relay", |path| {
        let text = std::fs::read_to_string(path).unwrap();
        let expected = text
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("// expect: "))
            .unwrap_or_else(|| panic!("{}: first line must be `// expect: EXXXX`", rel(path)))
            .trim()
            .to_string();
        let (sources, _, result) = load_text(&rel(path), &text);
        let diags = match result {
            Ok(_) => panic!("{} loaded without errors", rel(path)),
            Err(d) => d,
        };
        let codes: Vec<_> = diags.iter().map(|d| d.code.id).collect();
        assert!(
            codes.contains(&expected.as_str()),
            "{}: expected {expected}, got {codes:?}\n{}",
            rel(path),
            diags.render_plain(&sources)
        );
        for d in &diags {
            let span = d
                .primary_span()
                .expect("every diagnostic has a primary span");
            assert!(
                span.end as usize <= text.len(),
                "span past the end of the file"
            );
        }
        insta::assert_snapshot!(diags.render_plain(&sources));
    });
}

/// Every outlined global function is printed with its return type (`-> T` after the
/// parameters, as TVM's printer writes it), and reads back to the same module.
#[test]
fn outlined_functions_print_their_return_types() {
    use collage::planning::enumerate::DataflowGraph;
    use collage::planning::partition;
    let m = load_ok(&root().join("tests/models/mnist.relay"));
    let program = reference_rules();
    let est = collage::planning::cost::mock::Mock {
        costs: vec![("tvm".into(), 3.0), ("example".into(), 2.0)],
    };
    let opts = partition::Options {
        baselines: false,
        ..Default::default()
    };
    let g = DataflowGraph::new(&m, m.main().unwrap());
    let plan = partition::partition(&g, &program, &est, &opts, &partition::Silent).unwrap();
    let out = partition::rewrite(&g, &program, &plan).unwrap();
    let printed = round_trip("partitioned mnist", &out);
    let heads: Vec<&str> = printed.lines().filter(|l| l.starts_with("def @")).collect();
    assert!(heads.len() >= 3, "{printed}");
    for h in &heads {
        assert!(h.contains(") -> Tensor["), "no return type: {h}");
    }
    insta::assert_snapshot!(printed);
}

/// Whether some let-bound variable carries a device (TVM writes those as `on_device` calls).
fn has_let_devices(m: &Module) -> bool {
    m.exprs.iter().any(|e| match e {
        Expr::Let { var, .. } => !m.var(*var).device.is_unconstrained(),
        _ => false,
    })
}

#[test]
fn ok_fixtures_read_back_from_the_tvm_compatible_form() {
    let mut with_devices = 0;
    let mut with_let_devices = 0;
    insta::glob!("../fixtures/relay", "ok/*.relay", |path| {
        let name = rel(path);
        let m = load_ok(path);
        let text = print_module_with(&m, TVM_COMPAT);
        assert_tvm_device_syntax(&name, &text);
        let back = load_text_ok(&format!("{name} (--tvm-compat)"), &text);
        with_devices += usize::from(text.contains("#[metadata]"));
        if !has_let_devices(&m) {
            if let Err(e) = modules_equal(&back, &m) {
                panic!("{name}: the TVM-compatible form reads back differently: {e}\n{text}");
            }
            return;
        }
        with_let_devices += 1;
        let plan = |x: &Module| {
            collage::analysis::devices::plan_devices(x, &VirtualDevice::for_device(1, 0))
        };
        let (a, b) = (plan(&m).unwrap(), plan(&back).unwrap());
        if let Err(e) = modules_equal(&a.module, &b.module) {
            panic!("{name}: the TVM-compatible form plans differently: {e}\n{text}");
        }
    });
    assert!(
        with_devices >= 5 && with_let_devices >= 1,
        "{with_devices} {with_let_devices}"
    );
}

/// The TVM-compatible form of a planned module: devices as `meta[VirtualDevice][i]` into a
/// metadata section in TVM's JSON encoding, a let-bound variable's device as a fixed `on_device`
/// around its value.
#[test]
fn tvm_compatible_device_form() {
    let text = r#"#[version = "0.0.5"]
def @main(%a: Tensor[(5, 7), float32], %b {virtual_device=VirtualDevice(device="cpu", id=0, target="llvm")}: Tensor[(5, 7), float32]) {
  let %x = on_device(nn.relu(%a), virtual_device=VirtualDevice(device="cuda", id=0, target="cuda -host=llvm", scope="global"));
  let %f = fn (%p: Tensor[(5, 7), float32]) { negative(%p) };
  let %y {virtual_device=VirtualDevice(device="cpu", id=0, target="llvm")} = add(%x, %b);
  %f(%y)
}
"#;
    let m = load_text_ok("compat.relay", text);
    let plan =
        collage::analysis::devices::plan_devices(&m, &VirtualDevice::for_device(1, 0)).unwrap();
    let printed = print_module_with(&plan.module, TVM_COMPAT);
    assert_tvm_device_syntax("compat.relay", &printed);
    let back = load_text_ok("compat.relay (printed)", &printed);
    let again =
        collage::analysis::devices::plan_devices(&back, &VirtualDevice::for_device(1, 0)).unwrap();
    modules_equal(&again.module, &plan.module).unwrap();
    insta::assert_snapshot!(printed);
}
