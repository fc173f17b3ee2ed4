//! Properties of device planning on random programs with random annotations (parameters,
//! let binders, function results, `on_device` in its three forms, `device_copy`, tuples, let-bound
//! and primitive functions):
//!
//! `if` expressions and higher-order calls are among the steps.
//!
//! * the input (with all its device syntax) round-trips through print and parse;
//! * planning either fails with spanned `E07xx` diagnostics, or its planned module round-trips,
//!   DPL expands it without errors to exactly DP's complete representation, printing and
//!   re-parsing gives the same module, and planning that module again changes nothing.

use crate::enumerate_props::config;
use crate::support::{load_text, round_trip};
use collage::analysis::devices::{expand, plan_devices};
use collage::frontend::relay::print::print_module;
use collage::ir::equal::modules_equal;
use collage::ir::VirtualDevice;
use proptest::prelude::*;

const T: &str = "Tensor[(4), float32]";

fn device(k: u8) -> Option<&'static str> {
    match k % 6 {
        0 => Some(r#"VirtualDevice(device="cpu", id=0)"#),
        1 => Some(r#"VirtualDevice(device="cuda", id=0)"#),
        2 => Some(r#"VirtualDevice(scope="global")"#),
        _ => None,
    }
}

fn binder(name: &str, k: u8) -> String {
    match device(k) {
        Some(d) => format!("%{name} {{virtual_device={d}}}: {T}"),
        None => format!("%{name}: {T}"),
    }
}

fn binder_bool(k: u8) -> String {
    match device(k / 7) {
        Some(d) => format!("%c {{virtual_device={d}}}: bool"),
        None => "%c: bool".to_string(),
    }
}

/// Builds a module from `(kind, a, b, device)` steps over values of type `T`.
fn program(params: u8, param_devices: &[u8], steps: &[(u8, u8, u8, u8)], result: u8) -> String {
    let mut lines = Vec::new();
    let mut vals: Vec<String> = Vec::new();
    let mut heads = Vec::new();
    for i in 0..params {
        let name = format!("p{i}");
        heads.push(binder(&name, param_devices[i as usize]));
        vals.push(format!("%{name}"));
    }
    let mut n = 0;
    let mut fresh = |lines: &mut Vec<String>, vals: &mut Vec<String>, text: String| {
        lines.push(format!("  %{n} = {text};"));
        vals.push(format!("%{n}"));
        n += 1;
    };
    for (s, &(kind, a, b, d)) in steps.iter().enumerate() {
        let x = vals[a as usize % vals.len()].clone();
        let y = vals[b as usize % vals.len()].clone();
        let dev = device(d);
        match (kind % 10, dev) {
            (0, _) => fresh(&mut lines, &mut vals, format!("add({x}, {y})")),
            (1, _) => fresh(&mut lines, &mut vals, format!("nn.relu({x})")),
            (2, Some(dv)) => {
                let flags = match b % 3 {
                    0 => "",
                    1 => ", constrain_result=True",
                    _ => ", constrain_body=False",
                };
                fresh(
                    &mut lines,
                    &mut vals,
                    format!("on_device({x}, virtual_device={dv}{flags})"),
                );
            }
            (3, Some(dv)) => {
                let src = device(b).unwrap_or(r#"VirtualDevice(device="cpu", id=0)"#);
                fresh(
                    &mut lines,
                    &mut vals,
                    format!("device_copy({x}, src_virtual_device={src}, dst_virtual_device={dv})"),
                );
            }
            (4, _) => {
                let name = format!("l{s}");
                let head = match dev {
                    Some(dv) => format!("%{name} {{virtual_device={dv}}}"),
                    None => format!("%{name}"),
                };
                lines.push(format!("  let {head} = multiply({x}, {y});"));
                vals.push(format!("%{name}"));
            }
            (5, _) => {
                fresh(&mut lines, &mut vals, format!("({x}, {y})"));
                let t = vals.pop().unwrap_or_default();
                fresh(&mut lines, &mut vals, format!("{t}.{}", b % 2));
            }
            (6, _) => {
                let name = format!("f{s}");
                let result = match device(b) {
                    Some(rv) => format!(", virtual_device={rv}"),
                    None => String::new(),
                };
                lines.push(format!(
                    "  let %{name} = fn ({}{result}) {{ negative(%q{s}) }};",
                    binder(&format!("q{s}"), d)
                ));
                fresh(&mut lines, &mut vals, format!("%{name}({x})"));
            }
            (7, _) => {
                fresh(
                    &mut lines,
                    &mut vals,
                    format!("fn (%r{s}: {T}, Primitive=1) {{ nn.relu(%r{s}) }}"),
                );
                let f = vals.pop().unwrap_or_default();
                fresh(&mut lines, &mut vals, format!("{f}({x})"));
            }
            (8, _) if b % 2 == 0 => {
                fresh(
                    &mut lines,
                    &mut vals,
                    format!("if (%c) {{ {x} }} else {{ {y} }}"),
                );
            }
            (8, _) => {
                let name = format!("h{s}");
                lines.push(format!(
                    "  let %{name} = fn (%g{s}: fn ({T}) -> {T}, %v{s}: {T}) {{ %g{s}(%v{s}) }};"
                ));
                let result = device(d).map_or(String::new(), |rv| format!(", virtual_device={rv}"));
                fresh(
                    &mut lines,
                    &mut vals,
                    format!("%{name}(fn (%w{s}: {T}{result}) {{ nn.relu(%w{s}) }}, {x})"),
                );
            }
            _ => fresh(&mut lines, &mut vals, format!("subtract({x}, {y})")),
        }
    }
    heads.push(binder_bool(result));
    if let Some(rv) = device(result) {
        heads.push(format!("virtual_device={rv}"));
    }
    let last = vals.last().cloned().unwrap_or_default();
    format!(
        "#[version = \"0.0.5\"]\ndef @main({}) {{\n{}\n  {last}\n}}\n",
        heads.join(", "),
        lines.join("\n")
    )
}

fn check(text: &str) -> Result<(), TestCaseError> {
    let (sources, _, loaded) = load_text("random.relay", text);
    let m = match loaded {
        Ok(m) => m,
        Err(d) => {
            return Err(TestCaseError::fail(format!(
                "generated program does not load:\n{}\n{text}",
                d.render_plain(&sources)
            )))
        }
    };
    round_trip("random.relay", &m);
    let cpu = VirtualDevice::for_device(1, 0);
    let plan = match plan_devices(&m, &cpu) {
        Ok(p) => p,
        Err(diags) => {
            for d in &diags {
                prop_assert!(
                    d.code.id.starts_with("E07"),
                    "{}",
                    diags.render_plain(&sources)
                );
                prop_assert!(!d.labels.is_empty());
            }
            return Ok(());
        }
    };
    let printed = print_module(&plan.module);
    round_trip("planned.relay", &plan.module);
    let complete = expand(&plan.module).map_err(|d| {
        TestCaseError::fail(format!(
            "DPL rejects the plan: {:?}\n{text}\n--- planned ---\n{printed}",
            d.iter().next().map(|d| &d.message)
        ))
    })?;
    for (i, (a, b)) in complete.iter().zip(&plan.devices).enumerate() {
        let reachable = plan.module.exprs.len() > i && !b.is_unconstrained();
        if reachable {
            prop_assert_eq!(a, b, "expression {} of\n{}", i, printed);
        }
    }
    let (_, _, again) = load_text("planned.relay", &printed);
    let again = again.map_err(|_| TestCaseError::fail("printed plan does not load"))?;
    let replanned = plan_devices(&again, &cpu)
        .map_err(|_| TestCaseError::fail(format!("re-planning fails\n{printed}")))?;
    if let Err(e) = modules_equal(&replanned.module, &plan.module) {
        return Err(TestCaseError::fail(format!(
            "planning is not idempotent: {e}\n{text}\n--- planned ---\n{printed}"
        )));
    }
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn random_annotated_programs_plan_consistently(
        params in 1u8..=3,
        param_devices in prop::collection::vec(any::<u8>(), 3),
        steps in prop::collection::vec((any::<u8>(), any::<u8>(), any::<u8>(), any::<u8>()), 1..=10),
        result in any::<u8>(),
    ) {
        check(&program(params, &param_devices, &steps, result))?;
    }
}
