//! Targets: fields, devices, cost parameters, refinement, the standard BYOC rule tree, and
//! custom operator declarations.

use super::names::{Checker, DefKind};
use crate::diag::*;
use crate::ir::device::device_type_code;
use crate::ir::{AttrValue, DType, VirtualDevice};
use crate::ops::registry;
use crate::rules::dsl::ast::{self, TargetEntry, ValueKind};
use crate::rules::ruletree::*;
use crate::source::Span;

/// Converts a literal value of a `.rules` file into an attribute value, if it is one.
pub(crate) fn attr_value_of(v: &ast::Value) -> Option<AttrValue> {
    Some(match &v.kind {
        ValueKind::Int(i) => AttrValue::int(*i),
        ValueKind::Float(f) => AttrValue::Float(*f, DType::F64),
        ValueKind::Str(s) => AttrValue::Str(s.clone()),
        ValueKind::Bool(b) => AttrValue::Bool(*b),
        ValueKind::List(items) => AttrValue::Array(
            items
                .iter()
                .map(attr_value_of)
                .collect::<Option<Vec<_>>>()?,
        ),
        ValueKind::Name(n) if n == "None" => AttrValue::None,
        _ => return None,
    })
}

const TARGET_FIELDS: &[&str] = &[
    "compiler",
    "device",
    "fusion",
    "max_depth",
    "region_depth",
    "host",
    "refines",
    "patterns",
    "rule",
    "cost",
    "transition",
];

impl Checker<'_> {
    /// `operator name(args) : kind;`
    pub fn declare_operator(&mut self, name: &ast::Name, args: &[ast::Name], kind: &ast::Name) {
        let Some(k) = self.kind_name(kind) else {
            return;
        };
        let arg_names: Vec<String> = args.iter().map(|a| a.text.clone()).collect();
        for (i, a) in args.iter().enumerate() {
            if let Some(prev) = args[..i].iter().find(|b| b.text == a.text) {
                let d =
                    Diagnostic::error(E1202, format!("argument `{}` is declared twice", a.text))
                        .with_primary(a.span, "declared again here")
                        .with_secondary(prev.span, "first declared here");
                self.report(d);
                return;
            }
        }
        match crate::ops::register_custom(&name.text, &arg_names, k) {
            Ok(_) => self.program.custom_ops.push(CustomOp {
                name: name.text.clone(),
                args: arg_names,
                kind: k,
            }),
            Err(why) => {
                let d = Diagnostic::error(
                    E1801,
                    format!("cannot declare operator `{}`: {why}", name.text),
                )
                .with_primary(name.span, "conflicting declaration");
                self.report(d);
            }
        }
    }

    /// `target name { ... }`
    pub fn target(&mut self, name: &ast::Name, entries: &[TargetEntry], span: Span) {
        let mut seen: Vec<(String, Span)> = Vec::new();
        let mut t = Target {
            name: name.text.clone(),
            compiler: None,
            is_host: false,
            device: VirtualDevice::unconstrained(),
            fusion: None,
            max_depth: None,
            region_depth: None,
            refines: None,
            cost: CostParams {
                peak_flops: None,
                bandwidth: None,
                launch: None,
                efficiency: Vec::new(),
                default_efficiency: None,
            },
            transition: Transition::default(),
            rule: Rule::Host,
            span: name.span,
        };
        let mut device_span = None;
        let mut compiler_given = false;
        let mut patterns: Option<(&[(ast::Str, ast::Pat)], Span)> = None;
        let mut rule: Option<(&ast::RuleExpr, Span)> = None;
        let mut refines: Option<&ast::Name> = None;
        let mut ok = true;
        for e in entries {
            let (key, key_span) = match e {
                TargetEntry::Field(f) => (f.key.text.clone(), f.key.span),
                TargetEntry::Patterns(_, s) => ("patterns".to_string(), *s),
                TargetEntry::Rule(_, s) => ("rule".to_string(), *s),
                TargetEntry::Cost { span, .. } => ("cost".to_string(), *span),
                TargetEntry::Transition(_, s) => ("transition".to_string(), *s),
            };
            if let Some((_, prev)) = seen.iter().find(|(k, _)| *k == key) {
                let d = Diagnostic::error(E1707, format!("field `{key}` is given twice"))
                    .with_primary(key_span, "given again here")
                    .with_secondary(*prev, "first given here");
                self.report(d);
                ok = false;
                continue;
            }
            seen.push((key.clone(), key_span));
            match e {
                TargetEntry::Patterns(list, s) => patterns = Some((list, *s)),
                TargetEntry::Rule(r, s) => rule = Some((r, *s)),
                TargetEntry::Cost {
                    fields, efficiency, ..
                } => ok &= self.cost(&mut t.cost, fields, efficiency),
                TargetEntry::Transition(fields, _) => {
                    ok &= self.transition(&mut t.transition, fields)
                }
                TargetEntry::Field(f) => match f.key.text.as_str() {
                    "compiler" => {
                        compiler_given = true;
                        match &f.value.kind {
                            ValueKind::Str(s) if !s.is_empty() => t.compiler = Some(s.clone()),
                            _ => ok &= self.bad_field(f, "a non-empty string such as \"cutlass\""),
                        }
                    }
                    "device" => {
                        // Given, even if invalid: do not also report it as missing.
                        device_span = Some(f.value.span);
                        match self.device(&f.value) {
                            Some(d) => t.device = d,
                            None => ok = false,
                        }
                    }
                    "fusion" => match &f.value.kind {
                        ValueKind::Name(n) if n == "none" => t.fusion = Some(FusionStyle::None),
                        ValueKind::Name(n) if n == "tvm" => t.fusion = Some(FusionStyle::Tvm),
                        ValueKind::Name(n) if n == "arbitrary" => {
                            t.fusion = Some(FusionStyle::Arbitrary)
                        }
                        _ => ok &= self.bad_field(f, "`none`, `tvm` or `arbitrary`"),
                    },
                    "max_depth" => match &f.value.kind {
                        ValueKind::Int(v) if *v >= 1 && *v <= u32::MAX as i64 => {
                            t.max_depth = Some(*v as u32)
                        }
                        _ => ok &= self.bad_field(f, "a positive integer"),
                    },
                    "region_depth" => match &f.value.kind {
                        ValueKind::Int(v) if *v >= 1 && *v <= u32::MAX as i64 => {
                            t.region_depth = Some(*v as u32)
                        }
                        ValueKind::Name(n) if n == "unlimited" => t.region_depth = Some(u32::MAX),
                        _ => ok &= self.bad_field(f, "a positive integer or `unlimited`"),
                    },
                    "host" => match &f.value.kind {
                        ValueKind::Bool(b) => t.is_host = *b,
                        _ => ok &= self.bad_field(f, "`true` or `false`"),
                    },
                    "refines" => match &f.value.kind {
                        ValueKind::Name(_) => refines = Some(&f.key),
                        _ => ok &= self.bad_field(f, "the name of another target"),
                    },
                    other => {
                        let mut d =
                            Diagnostic::error(E1702, format!("targets have no field `{other}`"))
                                .with_primary(f.key.span, "unknown field");
                        match crate::util::closest(other, TARGET_FIELDS.iter().copied()) {
                            Some(s) => d = d.with_note(format!("help: did you mean `{s}`?")),
                            None => {
                                d = d.with_note(format!("fields: {}", TARGET_FIELDS.join(", ")))
                            }
                        }
                        self.report(d);
                        ok = false;
                    }
                },
            }
        }
        if device_span.is_none() {
            let d = Diagnostic::error(E1701, format!("target `{}` has no `device`", name.text))
                .with_primary(name.span, "missing `device = ...;`")
                .with_note("every target runs somewhere: write e.g. `device = cuda(0);` or `device = cpu;`");
            self.report(d);
            ok = false;
        }
        if t.is_host && (t.compiler.is_some() || patterns.is_some()) {
            let at = field_span(
                &seen,
                if t.compiler.is_some() {
                    "compiler"
                } else {
                    "patterns"
                },
            )
            .unwrap_or(name.span);
            let d = Diagnostic::error(E1708, "the host target takes no `compiler` or `patterns`")
                .with_primary(at, "not for the host target")
                .with_secondary(
                    field_span(&seen, "host").unwrap_or(name.span),
                    "declared the host here",
                );
            self.report(d);
            ok = false;
        }
        let fusion_without_compiler = t.fusion.is_some() && t.compiler.is_none() && !compiler_given;
        if fusion_without_compiler {
            let d = Diagnostic::error(
                E1708,
                "`fusion` applies to BYOC targets only (those with a `compiler`)",
            )
            .with_primary(
                field_span(&seen, "fusion").unwrap_or(name.span),
                "this target has no `compiler`",
            );
            self.report(d);
            ok = false;
        }
        match (patterns, rule) {
            (Some((_, ps)), Some((_, rs))) => {
                let d =
                    Diagnostic::error(E1708, "a target has either `patterns` or `rule`, not both")
                        .with_primary(rs, "explicit rule")
                        .with_secondary(ps, "patterns");
                self.report(d);
                ok = false;
            }
            (None, None) if !t.is_host => {
                let d = Diagnostic::error(E1701, format!("target `{}` has neither `patterns` nor `rule`", name.text))
                    .with_primary(name.span, "no candidates would be produced")
                    .with_note("BYOC targets list `patterns = [\"name\" = PATTERN, ...];`; other targets give `rule = ...;`");
                self.report(d);
                ok = false;
            }
            (Some((list, ps)), None) => {
                if t.compiler.is_none() && !compiler_given {
                    let d = Diagnostic::error(
                        E1701,
                        "`patterns` needs a `compiler` (the BYOC backend's name)",
                    )
                    .with_primary(ps, "patterns of a non-BYOC target");
                    self.report(d);
                    ok = false;
                }
                match self.byoc_tree(&mut t, list, ps) {
                    Some(r) => t.rule = r,
                    None => ok = false,
                }
            }
            (None, Some((r, rs))) if t.fusion.is_some() && !fusion_without_compiler => {
                let _ = self.rule(r);
                let d = Diagnostic::error(
                    E1708,
                    "`fusion` applies to `patterns`; an explicit `rule` states its own combiners",
                )
                .with_primary(rs, "explicit rule")
                .with_note(
                    "remove `fusion`, or grow the candidates with `combine(...)` inside the rule",
                );
                self.report(d);
                ok = false;
            }
            (None, Some((r, _))) => match self.rule(r) {
                Some(r) => t.rule = r,
                None => ok = false,
            },
            (None, None) => t.rule = Rule::Host,
        }
        if let Some(r) = refines {
            ok &= self.refinement(&mut t, r, entries, device_span);
        }
        let _ = span;
        if ok {
            self.target_index
                .insert(t.name.clone(), self.program.targets.len());
            self.program.targets.push(t);
        }
    }

    fn bad_field(&mut self, f: &ast::ConfigEntry, expected: &str) -> bool {
        let d = Diagnostic::error(E1703, format!("field `{}` must be {expected}", f.key.text))
            .with_primary(f.value.span, format!("expected {expected}"));
        self.report(d);
        false
    }

    /// `cpu`, `cuda(0)`, `VirtualDevice(device = "cuda", id = 0, target = "cuda", scope = "global")`.
    pub fn device(&mut self, v: &ast::Value) -> Option<VirtualDevice> {
        let bad = |cx: &mut Self, why: String| {
            let d = Diagnostic::error(E1704, format!("invalid device: {why}"))
                .with_primary(v.span, "expected `cpu`, `cuda(0)` or `VirtualDevice(device = \"cuda\", id = 0, target = \"cuda\")`");
            cx.report(d);
            None
        };
        match &v.kind {
            ValueKind::Name(n) => match device_type_code(n) {
                Some(c) => Some(VirtualDevice {
                    device_type: Some(c),
                    virtual_device_id: Some(0),
                    ..VirtualDevice::default()
                }),
                None => bad(self, format!("unknown device `{n}`")),
            },
            ValueKind::Call(n, args) => {
                let Some(c) = device_type_code(&n.text) else {
                    return bad(self, format!("unknown device `{}`", n.text));
                };
                match args.as_slice() {
                    [ast::Value {
                        kind: ValueKind::Int(id),
                        ..
                    }] if *id >= 0 && *id <= i32::MAX as i64 => Some(VirtualDevice {
                        device_type: Some(c),
                        virtual_device_id: Some(*id as i32),
                        ..VirtualDevice::default()
                    }),
                    _ => bad(self, format!("`{}(...)` takes one device id", n.text)),
                }
            }
            ValueKind::Device(fields) => {
                let mut vd = VirtualDevice::default();
                for f in fields {
                    match (f.key.text.as_str(), &f.value.kind) {
                        ("device", ValueKind::Str(s)) => match device_type_code(s) {
                            Some(c) => vd.device_type = Some(c),
                            None => return bad(self, format!("unknown device `{s}`")),
                        },
                        ("id", ValueKind::Int(i)) if *i >= 0 && *i <= i32::MAX as i64 => {
                            vd.virtual_device_id = Some(*i as i32)
                        }
                        ("target", ValueKind::Str(s)) => vd.target = Some(s.clone()),
                        ("scope", ValueKind::Str(s)) => vd.memory_scope = Some(s.clone()),
                        (k, _) => {
                            return bad(
                                self,
                                format!("bad field `{k}` (fields: device, id, target, scope)"),
                            )
                        }
                    }
                }
                Some(vd)
            }
            _ => bad(self, "not a device".into()),
        }
    }

    fn quantity(&mut self, f: &ast::ConfigEntry, dim: &str) -> Option<f64> {
        // Decimal exponent of each unit; negative exponents divide, so `5 us` is exactly 5e-06.
        let scale = |unit: &str| -> Option<i32> {
            Some(match (dim, unit) {
                ("flops", "tflops") => 12,
                ("flops", "gflops") => 9,
                ("rate", "tbps") => 12,
                ("rate", "gbps") => 9,
                ("time", "s") => 0,
                ("time", "ms") => -3,
                ("time", "us") => -6,
                ("time", "ns") => -9,
                _ => return None,
            })
        };
        let units = match dim {
            "flops" => "`gflops` or `tflops`",
            "rate" => "`gbps` or `tbps`",
            _ => "`s`, `ms`, `us` or `ns`",
        };
        match &f.value.kind {
            ValueKind::Quantity(v, unit) => match scale(&unit.text) {
                // Times may be zero (no launch overhead); rates must be positive.
                Some(e) if *v > 0.0 || (*v == 0.0 && dim == "time") => Some(if e >= 0 {
                    v * 10f64.powi(e)
                } else {
                    v / 10f64.powi(-e)
                }),
                Some(_) => {
                    let d = Diagnostic::error(E1706, format!("`{}` must be positive", f.key.text))
                        .with_primary(f.value.span, "not positive");
                    self.report(d);
                    None
                }
                None => {
                    let d = Diagnostic::error(
                        E1706,
                        format!(
                            "`{}` is measured in {units}, not `{}`",
                            f.key.text, unit.text
                        ),
                    )
                    .with_primary(unit.span, "wrong unit");
                    self.report(d);
                    None
                }
            },
            _ => {
                let d =
                    Diagnostic::error(E1706, format!("`{}` needs a unit ({units})", f.key.text))
                        .with_primary(f.value.span, "a number with a unit, such as `5 us`");
                self.report(d);
                None
            }
        }
    }

    fn cost(
        &mut self,
        c: &mut CostParams,
        fields: &[ast::ConfigEntry],
        efficiency: &[(ast::Name, ast::Value)],
    ) -> bool {
        let mut ok = true;
        for f in fields {
            match f.key.text.as_str() {
                "peak" => {
                    c.peak_flops = self.quantity(f, "flops").or_else(|| {
                        ok = false;
                        None
                    })
                }
                "bandwidth" => {
                    c.bandwidth = self.quantity(f, "rate").or_else(|| {
                        ok = false;
                        None
                    })
                }
                "launch" => {
                    c.launch = self.quantity(f, "time").or_else(|| {
                        ok = false;
                        None
                    })
                }
                other => {
                    let mut d =
                        Diagnostic::error(E1706, format!("cost blocks have no field `{other}`"))
                            .with_primary(f.key.span, "unknown cost parameter");
                    d = match crate::util::closest(
                        other,
                        ["peak", "bandwidth", "launch"].into_iter(),
                    ) {
                        Some(s) => d.with_note(format!("help: did you mean `{s}`?")),
                        None => d.with_note("fields: peak, bandwidth, launch, efficiency { ... }"),
                    };
                    self.report(d);
                    ok = false;
                }
            }
        }
        for (op, v) in efficiency {
            let value = match v.kind {
                ValueKind::Float(x) => x,
                ValueKind::Int(x) => x as f64,
                _ => -1.0,
            };
            if !(value > 0.0 && value <= 1.0) {
                let d = Diagnostic::error(E1706, "an efficiency is a fraction of peak in (0, 1]")
                    .with_primary(v.span, "expected a number in (0, 1], such as 0.6");
                self.report(d);
                ok = false;
                continue;
            }
            if op.text == "default" {
                c.default_efficiency = Some(value);
                continue;
            }
            match registry().lookup(&op.text) {
                Some(id) => c.efficiency.push((id, value)),
                None => {
                    let mut d = Diagnostic::error(E1301, format!("unknown operator `{}`", op.text))
                        .with_primary(op.span, "not a registered operator (or `default`)");
                    if let Some(s) = registry().suggest(&op.text) {
                        d = d.with_note(format!("help: did you mean `{s}`?"));
                    }
                    self.report(d);
                    ok = false;
                }
            }
        }
        ok
    }

    fn transition(&mut self, t: &mut Transition, fields: &[ast::ConfigEntry]) -> bool {
        let mut ok = true;
        for f in fields {
            match f.key.text.as_str() {
                "dispatch" => {
                    t.dispatch = self.quantity(f, "time").or_else(|| {
                        ok = false;
                        None
                    })
                }
                "latency" => {
                    t.latency = self.quantity(f, "time").or_else(|| {
                        ok = false;
                        None
                    })
                }
                "bandwidth" => {
                    t.bandwidth = self.quantity(f, "rate").or_else(|| {
                        ok = false;
                        None
                    })
                }
                other => {
                    let d = Diagnostic::error(
                        E1706,
                        format!("transition blocks have no field `{other}`"),
                    )
                    .with_primary(f.key.span, "unknown field")
                    .with_note("fields: dispatch, latency, bandwidth");
                    self.report(d);
                    ok = false;
                }
            }
        }
        ok
    }

    /// The standard BYOC tree (TVM's Collage RFC):
    /// `primitive(only_valid(combine?(union(composite(name_i, pattern_i)), style), 1 exit, no taps))`.
    fn byoc_tree(
        &mut self,
        t: &mut Target,
        list: &[(ast::Str, ast::Pat)],
        span: Span,
    ) -> Option<Rule> {
        if list.is_empty() {
            let d =
                Diagnostic::error(E1701, "`patterns` is empty").with_primary(span, "no patterns");
            self.report(d);
            return None;
        }
        let mut composites = Vec::new();
        let mut ok = true;
        for (i, (name, pat)) in list.iter().enumerate() {
            if let Some((prev, _)) = list[..i].iter().find(|(n, _)| n.value == name.value) {
                let d =
                    Diagnostic::error(E1202, format!("composite `{}` is listed twice", name.value))
                        .with_primary(name.span, "listed again here")
                        .with_secondary(prev.span, "first listed here");
                self.report(d);
                ok = false;
                continue;
            }
            let pname = match &pat.kind {
                ast::PatKind::Call {
                    callee, args: None, ..
                } if callee.len() == 1 => callee[0].text.clone(),
                _ => String::new(),
            };
            match self.top_pattern(pat) {
                Some((p, _)) => composites.push(Rule::Composite(
                    name.value.clone(),
                    Box::new(Rule::Pattern {
                        name: pname,
                        pattern: p,
                    }),
                )),
                None => ok = false,
            }
        }
        if !ok {
            return None;
        }
        let style = *t
            .fusion
            .get_or_insert_with(|| default_style(t.compiler.as_deref().unwrap_or("")));
        let union = Rule::Union(composites);
        let grown = match style {
            FusionStyle::None => union,
            FusionStyle::Tvm => Rule::Combine {
                sub: Box::new(union),
                combiners: vec![Combiner::ByKind(vec![
                    (OpPattern::OutEWiseFusable, OpPattern::Broadcast),
                    (OpPattern::Broadcast, OpPattern::CommReduce),
                    (OpPattern::Injective, OpPattern::Injective),
                ])],
                max_depth: t.max_depth,
            },
            FusionStyle::Arbitrary => Rule::Combine {
                sub: Box::new(union),
                combiners: vec![Combiner::ByKind(vec![(
                    OpPattern::OutEWiseFusable,
                    OpPattern::OutEWiseFusable,
                )])],
                max_depth: t.max_depth,
            },
        };
        Some(Rule::Primitive(Box::new(Rule::OnlyValid(
            Box::new(grown),
            SubGraphConfig {
                max_depth: t.max_depth,
                max_exits: 1,
                allow_taps: false,
            },
        ))))
    }

    /// `refines = other;`: `other` must be an earlier non-BYOC target whose device this target's
    /// device refines.
    fn refinement(
        &mut self,
        t: &mut Target,
        key: &ast::Name,
        entries: &[TargetEntry],
        device_span: Option<Span>,
    ) -> bool {
        let value = entries.iter().find_map(|e| match e {
            TargetEntry::Field(f) if f.key.text == "refines" => Some(&f.value),
            _ => None,
        });
        let Some(ast::Value {
            kind: ValueKind::Name(other),
            span,
        }) = value
        else {
            return false;
        };

        if *other == t.name {
            let d = Diagnostic::error(E1705, "a target cannot refine itself")
                .with_primary(*span, "itself");
            self.report(d);
            return false;
        }
        let def = match self.lookup(other) {
            Some(d) if self.defs[d].kind == DefKind::Target => d,
            found => {
                let mut d = match found {
                    Some(d) => Diagnostic::error(
                        E1705,
                        format!("`{other}` is {}, not a target", self.defs[d].kind.noun()),
                    )
                    .with_primary(*span, "expected a target")
                    .with_secondary(self.defs[d].name_span, "defined here"),
                    None => Diagnostic::error(E1705, format!("unknown target `{other}`"))
                        .with_primary(*span, "no target of this name is in scope"),
                };
                let targets: Vec<String> = self.target_index.keys().cloned().collect();
                if let Some(s) = crate::util::closest(other, targets.iter().map(String::as_str)) {
                    d = d.with_note(format!("help: did you mean `{s}`?"));
                } else if found.is_none() {
                    d = d.with_note(
                        "a refined target must be declared first, in this file or one it imports",
                    );
                }
                self.report(d);
                return false;
            }
        };
        let Some(&idx) = self.target_index.get(other) else {
            let d = Diagnostic::error(
                E1705,
                format!("`{other}` must be declared (and valid) before the targets that refine it"),
            )
            .with_primary(*span, "declared later or invalid")
            .with_secondary(self.defs[def].name_span, "declared here");
            self.report(d);
            return false;
        };
        let base = &self.program.targets[idx];
        let mut problems = Vec::new();
        if base.compiler.is_some() {
            problems.push(format!(
                "`{other}` is a BYOC target; only native targets can be refined"
            ));
        }
        if !t.device.refines(&base.device) {
            problems.push(format!(
                "the device {} does not refine `{other}`'s device {}",
                t.device, base.device
            ));
        }
        if let Some(p) = problems.first() {
            let mut d =
                Diagnostic::error(E1705, format!("`{}` cannot refine `{other}`: {p}", t.name))
                    .with_primary(*span, "invalid refinement")
                    .with_secondary(
                        self.defs[def].name_span,
                        format!("`{other}` is declared here"),
                    );
            if let Some(ds) = device_span {
                d = d.with_secondary(ds, "this target's device");
            }
            let _ = key;
            self.report(d);
            return false;
        }
        t.refines = Some(idx);
        true
    }
}

/// The span of a field's key among the fields seen.
fn field_span(seen: &[(String, Span)], key: &str) -> Option<Span> {
    seen.iter().find(|(k, _)| k == key).map(|(_, s)| *s)
}

/// The default fusion style of a BYOC compiler, as TVM's Collage chooses it.
pub fn default_style(compiler: &str) -> FusionStyle {
    match compiler {
        "cutlass" | "cublas" | "cudnn" => FusionStyle::None,
        "tensorrt" => FusionStyle::Tvm,
        _ => FusionStyle::Arbitrary,
    }
}

use crate::ops::OpPattern;
