//! The canonical RelayScript printer.
//!
//! Follows TVM's printer conventions: a version header, definitions sorted by name, graph normal
//! form (every non-atomic sub-expression on its own `%N = ...;` line, numbered by one counter
//! across the whole module, the last expression of a scope inline when it has at most one use),
//! only non-default call attributes, and ` /* ty=T */` comments after constants, calls, tuples,
//! projections and functions once types are known. Virtual devices are printed as inline
//! `VirtualDevice(...)` literals.
//!
//! Constants keep their meta table key and index (`meta[relay.Constant][i]`, always with its
//! type comment). When a printed constant carries data (read from a metadata section), a
//! `#[metadata]` section after the last definition holds the constants of its key with their
//! NDArrays in TVM's JSON encoding ([`crate::frontend::relay::metadata::write_metadata`]), so the data is
//! never lost; see [`Printer::meta_table`].
//!
//! With [`PrintOptions::tvm_compat`] the output is what TVM 0.19's parser reads: virtual devices
//! are `meta[VirtualDevice][i]` references into the `#[metadata]` section (the same one as the
//! constants'), and the device of a let-bound variable
//! (for which TVM has no syntax) becomes a fixed `on_device` around the bound value, as TVM's
//! device planner writes it (or, for a bound function literal, the literal's result device).
//!
//! Printing is a fixed point: printing the re-parsed output gives the same text.

use super::print_scopes::{ScopeId, Scopes};
use crate::ir::literal::{write_float, write_int};
use crate::ir::*;
use crate::ops::registry;
use std::collections::{BTreeMap, HashSet};
use std::fmt::Write;

/// Printing options.
#[derive(Clone, Copy, Debug)]
pub struct PrintOptions {
    /// Write ` /* ty=T */` comments where types are known (constants always get theirs).
    pub type_comments: bool,
    /// Write what TVM 0.19 reads: virtual devices in a `#[metadata]` section, let-bound
    /// variables' devices as fixed `on_device` calls around the bound values.
    pub tvm_compat: bool,
}

impl Default for PrintOptions {
    fn default() -> Self {
        PrintOptions {
            type_comments: true,
            tvm_compat: false,
        }
    }
}

/// Prints a module with the default options.
pub fn print_module(m: &Module) -> String {
    print_module_with(m, PrintOptions::default())
}

/// Prints a module.
pub fn print_module_with(m: &Module, opts: PrintOptions) -> String {
    print_module_full(m, opts, None)
}

/// Prints a module with the device of every printed expression in its comment
/// (` /* ty=T, device=VirtualDevice(...) */`): the complete representation of a device plan.
/// `devices` is indexed by expression id.
pub fn print_module_with_devices(
    m: &Module,
    opts: PrintOptions,
    devices: &[VirtualDevice],
) -> String {
    print_module_full(m, opts, Some(devices))
}

fn print_module_full(m: &Module, opts: PrintOptions, devices: Option<&[VirtualDevice]>) -> String {
    let mut defs: Vec<(GlobalId, FuncId)> = m.defs.clone();
    defs.sort_by(|a, b| {
        m.globals[a.0.index()]
            .name
            .cmp(&m.globals[b.0.index()].name)
    });
    let roots: Vec<ExprId> = defs.iter().map(|(_, f)| m.func(*f).body).collect();
    let (scopes, root_scopes) = Scopes::compute(m, &roots);
    let mut p = Printer::new(m, opts, scopes);
    p.devices = devices;
    p.out.push_str("#[version = \"0.0.5\"]\n");
    for (i, ((g, f), sc)) in defs.iter().zip(root_scopes).enumerate() {
        if i > 0 {
            p.out.push('\n');
        }
        // Each definition is its own scope: its variables only need to differ from each other.
        p.used_names.clear();
        let head = format!("def @{}", m.globals[g.index()].name);
        let text = p.function(*f, sc, &head, 0);
        p.out.push_str(&text);
        p.out.push('\n');
    }
    let table = p.meta_table();
    if !table.is_empty() {
        p.out.push_str("\n#[metadata]\n");
        p.out.push_str(&super::metadata::write_metadata(&table));
        p.out.push('\n');
    }
    p.out
}

struct Printer<'m> {
    m: &'m Module,
    opts: PrintOptions,
    out: String,
    counter: usize,
    /// The text that refers to an already printed expression (`%3`, `%x`, a literal...).
    refs: Vec<Option<String>>,
    uses: Vec<u32>,
    var_names: Vec<Option<String>>,
    used_names: HashSet<String>,
    scopes: Scopes,
    devices: Option<&'m [VirtualDevice]>,
    /// In TVM-compatible mode, the devices referred to as `meta[VirtualDevice][i]`, in order.
    meta_devices: Vec<VirtualDevice>,
    /// In TVM-compatible mode, function literals bound by a let whose variable has a device
    /// the literal does not state: they are printed with it as their result device.
    result_devices: std::collections::HashMap<FuncId, VirtualDevice>,
    /// The meta constants printed, by key and index, with the type of their first reference.
    meta_consts: BTreeMap<String, BTreeMap<u32, TensorType>>,
}

impl<'m> Printer<'m> {
    fn new(m: &'m Module, opts: PrintOptions, scopes: Scopes) -> Printer<'m> {
        let n = m.exprs.len();
        let mut uses = vec![0u32; n];
        for (i, e) in m.exprs.iter().enumerate() {
            // Only reachable expressions (those with a scope) count: dead bindings are not
            // printed, so they must not make their operands look shared.
            if scopes.of_expr[i].is_none() {
                continue;
            }
            match e {
                Expr::Func(_) | Expr::Let { .. } => {}
                _ => m.for_each_operand(ExprId(i as u32), |c| uses[c.index()] += 1),
            }
            if let Expr::Let { value, .. } = e {
                uses[value.index()] += 1;
            }
        }
        Printer {
            m,
            opts,
            out: String::new(),
            counter: 0,
            refs: vec![None; n],
            uses,
            var_names: vec![None; m.vars.len()],
            used_names: HashSet::new(),
            scopes,
            devices: None,
            meta_devices: Vec::new(),
            result_devices: std::collections::HashMap::new(),
            meta_consts: BTreeMap::new(),
        }
    }

    /// The meta table of the printed text: the virtual devices referred to (TVM-compatible
    /// mode), and the constants of every key under which a printed constant carries data that
    /// fits its type. Such a key's array holds every printed index of it, with its data when it
    /// has some, and the null object at indices nothing printed refers to, so each printed
    /// `meta[key][i]` names its own entry. Keys without data are left out: their constants are
    /// typed by their comments, as before. Devices own the key `VirtualDevice`; constants under
    /// that key (which no parsed module has) are not written. Keys are in name order.
    fn meta_table(&self) -> Vec<(String, Vec<super::metadata::MetaEntry>)> {
        use super::metadata::{data_fits, MetaEntry};
        let mut table: BTreeMap<String, Vec<MetaEntry>> = BTreeMap::new();
        if !self.meta_devices.is_empty() {
            let devices = self.meta_devices.iter().cloned().map(MetaEntry::Device);
            table.insert("VirtualDevice".to_string(), devices.collect());
        }
        for (key, consts) in &self.meta_consts {
            if table.contains_key(key) {
                continue;
            }
            let data_of = |index: u32, ty: &TensorType| {
                self.m
                    .meta
                    .data
                    .get(&(key.clone(), index))
                    .filter(|d| data_fits(ty, &d.0))
            };
            if !consts.iter().any(|(&i, ty)| data_of(i, ty).is_some()) {
                continue;
            }
            let len = consts.keys().next_back().map_or(0, |&i| i as usize + 1);
            let mut entries = vec![MetaEntry::Null; len];
            for (&i, ty) in consts {
                entries[i as usize] = MetaEntry::Constant {
                    ty: ty.clone(),
                    data: data_of(i, ty).cloned(),
                };
            }
            table.insert(key.clone(), entries);
        }
        table.into_iter().collect()
    }

    /// A virtual device as printed: the inline literal, or in TVM-compatible mode a reference
    /// into the metadata section (equal devices share one entry).
    fn device(&mut self, d: &VirtualDevice) -> String {
        if !self.opts.tvm_compat {
            return d.to_string();
        }
        let i = match self.meta_devices.iter().position(|x| x == d) {
            Some(i) => i,
            None => {
                self.meta_devices.push(d.clone());
                self.meta_devices.len() - 1
            }
        };
        format!("meta[VirtualDevice][{i}]")
    }

    /// An attribute value as printed (devices through [`Printer::device`]).
    fn attr(&mut self, v: &AttrValue) -> String {
        match v {
            AttrValue::Device(d) => self.device(d),
            AttrValue::Array(items) if self.opts.tvm_compat => {
                let parts: Vec<String> = items.iter().map(|x| self.attr(x)).collect();
                format!("[{}]", parts.join(", "))
            }
            other => other.to_string(),
        }
    }

    fn var_name(&mut self, v: VarId) -> String {
        if let Some(n) = &self.var_names[v.index()] {
            return n.clone();
        }
        let base = &self.m.var(v).name;
        let base = if base.is_empty()
            || !base.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        {
            format!("v{base}")
        } else {
            base.clone()
        };
        let mut name = base.clone();
        let mut k = 1;
        // `%x1`, but `%FunctionVar_0_1` rather than the misleading `%FunctionVar_01`.
        let sep = if base.ends_with(|c: char| c.is_ascii_digit()) {
            "_"
        } else {
            ""
        };
        while self.used_names.contains(&name) {
            name = format!("{base}{sep}{k}");
            k += 1;
        }
        self.used_names.insert(name.clone());
        let full = format!("%{name}");
        self.var_names[v.index()] = Some(full.clone());
        full
    }

    fn ty_comment(&self, e: ExprId) -> String {
        let ty = match (self.opts.type_comments, self.m.ty(e)) {
            (true, Some(t)) => Some(format!("ty={t}")),
            _ => None,
        };
        self.comment(e, ty)
    }

    /// ` /* item, device=... */` from an optional first item and the expression's device.
    fn comment(&self, e: ExprId, first: Option<String>) -> String {
        let device = self
            .devices
            .and_then(|d| d.get(e.index()))
            .map(|d| format!("device={d}"));
        let items: Vec<String> = first.into_iter().chain(device).collect();
        if items.is_empty() {
            String::new()
        } else {
            format!(" /* {} */", items.join(", "))
        }
    }

    fn binder(&mut self, v: VarId) -> String {
        self.binder_with(v, true)
    }

    /// A binder, with its device unless `device` is false.
    fn binder_with(&mut self, v: VarId, device: bool) -> String {
        let mut s = self.var_name(v);
        let var = self.m.var(v);
        if device && !var.device.is_unconstrained() {
            let d = self.device(&var.device);
            let _ = write!(s, " {{virtual_device={d}}}");
        }
        if let Some(t) = &self.m.var(v).annotation {
            let _ = write!(s, ": {t}");
        }
        s
    }

    /// In TVM-compatible mode, a let-bound variable's device, which TVM cannot write on the
    /// binder, goes on the bound value: a function literal states it as its result device (when
    /// it states none), anything else is wrapped in a fixed `on_device`. Returns whether the
    /// binder must still carry it (never in TVM-compatible mode).
    fn let_device(&mut self, var: VarId, value: ExprId) -> bool {
        let device = &self.m.var(var).device;
        if !self.opts.tvm_compat || device.is_unconstrained() {
            return true;
        }
        if let Expr::Func(f) = self.m.expr(value) {
            let func = self.m.func(*f);
            if func.result_device.is_unconstrained()
                && !crate::analysis::devices::is_unplanned(func)
            {
                self.result_devices.insert(*f, device.clone());
            }
        }
        false
    }

    /// The text of a let-bound value whose variable's device is `device` (TVM-compatible mode):
    /// wrapped in a fixed `on_device` unless it is a function literal. A planned literal states
    /// the device as its result device; a `Primitive=1`, `Compiler=` or `Extern=` literal is
    /// device-polymorphic, so, as in TVM, nothing is written for it.
    fn wrap_let_value(&mut self, value: ExprId, text: String, device: &VirtualDevice) -> String {
        if let Expr::Func(f) = self.m.expr(value) {
            let func = self.m.func(*f);
            let stated = self.result_devices.get(f).unwrap_or(&func.result_device);
            if stated == device || crate::analysis::devices::is_unplanned(func) {
                return text;
            }
        }
        let d = self.device(device);
        format!(
            "on_device({text}, virtual_device={d}, constrain_result=True){}",
            self.ty_comment(value)
        )
    }

    /// `<head>(params, attrs) -> ret {` body `}` at the given indentation; the body is scope `sc`.
    fn function(&mut self, f: FuncId, sc: ScopeId, head: &str, indent: usize) -> String {
        let func = self.m.func(f);
        let mut parts: Vec<String> = func.params.iter().map(|&p| self.binder(p)).collect();
        for (k, v) in &func.attrs {
            let v = self.attr(v);
            parts.push(format!("{k}={v}"));
        }
        let result = match self.result_devices.get(&f) {
            Some(d) => d.clone(),
            None => func.result_device.clone(),
        };
        if !result.is_unconstrained() {
            let d = self.device(&result);
            parts.push(format!("virtual_device={d}"));
        }
        let mut s = format!("{head}({})", parts.join(", "));
        if let Some(t) = &func.ret_type {
            let _ = write!(s, " -> {t}");
        }
        s.push_str(" {\n");
        let body = self.scope(sc, indent + 1);
        s.push_str(&body);
        s.push_str(&"  ".repeat(indent));
        s.push('}');
        s
    }

    /// Prints the lines of scope `sc`, ending with its root, and returns them.
    fn scope(&mut self, sc: ScopeId, indent: usize) -> String {
        let saved = std::mem::take(&mut self.out);
        let mut root = self.scopes.root[sc as usize];
        // A chain of lets is printed as consecutive lines of the scope.
        while let Expr::Let { var, value, body } = self.m.expr(root) {
            let (var, value, body) = (*var, *value, *body);
            if !(self.scopes.chain[root.index()] || self.scopes.root[sc as usize] == root) {
                break;
            }
            let on_binder = self.let_device(var, value);
            let mut value_text = self.emit_inline(value, sc, indent);
            if !on_binder {
                let device = self.m.var(var).device.clone();
                value_text = self.wrap_let_value(value, value_text, &device);
            }
            let binder = self.binder_with(var, on_binder);
            let _ = writeln!(
                self.out,
                "{}let {binder} = {value_text};",
                "  ".repeat(indent)
            );
            root = body;
        }
        let text = self.emit_inline(root, sc, indent);
        let _ = writeln!(self.out, "{}{text}", "  ".repeat(indent));
        std::mem::replace(&mut self.out, saved)
    }

    /// Emits the lines `e` depends on and returns the inline text of `e` itself (with its type
    /// comment), binding it to `%N` first if it has more than one use.
    fn emit_inline(&mut self, e: ExprId, sc: ScopeId, indent: usize) -> String {
        if let Some(r) = &self.refs[e.index()] {
            return r.clone();
        }
        self.emit_operands(e, sc, indent);
        if self.uses[e.index()] > 1 && !self.is_atomic(e) {
            return self.bind(e, indent);
        }
        let text = self.text(e, indent);
        if self.is_atomic(e) {
            self.refs[e.index()] = Some(text.clone());
        }
        text
    }

    fn is_atomic(&self, e: ExprId) -> bool {
        matches!(
            self.m.expr(e),
            Expr::Var(_) | Expr::Global(_) | Expr::Const(_) | Expr::Op(_)
        )
    }

    /// The operands to print in scope `sc` before `e`: its ordinary operands, or, for an
    /// expression that opens scopes, the values of `sc` used inside those scopes.
    fn scope_operands(&self, e: ExprId, sc: ScopeId) -> Vec<ExprId> {
        match self.m.expr(e) {
            Expr::If { cond, .. } => {
                let mut v = vec![*cond];
                v.extend(self.hoisted(e, sc));
                v
            }
            Expr::Func(_) | Expr::Let { .. } => self.hoisted(e, sc),
            _ => self.m.operands(e),
        }
    }

    /// Non-atomic, unprinted expressions bound in `sc` that are used inside the scopes `e`
    /// opens (at any depth).
    fn hoisted(&self, e: ExprId, sc: ScopeId) -> Vec<ExprId> {
        let mut out = Vec::new();
        let mut seen = HashSet::new();
        let mut stack = Vec::new();
        match self.m.expr(e) {
            Expr::If {
                then_branch,
                else_branch,
                ..
            } => stack.extend([*then_branch, *else_branch]),
            Expr::Func(f) => stack.push(self.m.func(*f).body),
            Expr::Let { value, body, .. } => stack.extend([*value, *body]),
            _ => {}
        }
        while let Some(x) = stack.pop() {
            if !seen.insert(x) || self.refs[x.index()].is_some() || self.is_atomic(x) {
                continue;
            }
            if self.scopes.of_expr[x.index()] == Some(sc) {
                out.push(x);
                continue;
            }
            self.m.for_each_operand(x, |c| stack.push(c));
        }
        out.sort();
        out
    }

    /// Post-order emission of every not-yet-printed operand of `e` bound in scope `sc`.
    fn emit_operands(&mut self, e: ExprId, sc: ScopeId, indent: usize) {
        let mut stack: Vec<(ExprId, bool)> = self
            .scope_operands(e, sc)
            .into_iter()
            .rev()
            .map(|c| (c, false))
            .collect();
        let mut on_path = HashSet::new();
        while let Some((x, done)) = stack.pop() {
            if self.refs[x.index()].is_some() {
                continue;
            }
            if done {
                on_path.remove(&x);
                if self.is_atomic(x) {
                    let t = self.text(x, indent);
                    self.refs[x.index()] = Some(t);
                } else {
                    self.bind(x, indent);
                }
                continue;
            }
            if !on_path.insert(x) {
                continue;
            }
            stack.push((x, true));
            for c in self.scope_operands(x, sc).into_iter().rev() {
                if self.refs[c.index()].is_none() {
                    stack.push((c, false));
                }
            }
        }
    }
    /// Emits `%N = <text>;` for `e` (whose operands are printed) and returns `%N`.
    fn bind(&mut self, e: ExprId, indent: usize) -> String {
        let text = self.text(e, indent);
        let name = format!("%{}", self.counter);
        self.counter += 1;
        let _ = writeln!(self.out, "{}{name} = {text};", "  ".repeat(indent));
        self.refs[e.index()] = Some(name.clone());
        name
    }

    /// The scope `e` opens in `slot` (0: body, 1: then, 2: else).
    fn child(&self, e: ExprId, slot: u8) -> ScopeId {
        self.scopes.child.get(&(e, slot)).copied().unwrap_or(0)
    }

    fn r(&self, e: ExprId) -> String {
        self.refs[e.index()]
            .clone()
            .unwrap_or_else(|| "<?>".to_string())
    }

    /// The text of `e` whose operands are already printed, with its type comment.
    fn text(&mut self, e: ExprId, indent: usize) -> String {
        let m = self.m;
        match m.expr(e) {
            Expr::Var(v) => self.var_name(*v),
            Expr::Global(g) => format!("@{}", m.globals[g.index()].name),
            Expr::Op(op) => registry().get(*op).name.to_string(),
            Expr::Const(c) => {
                let mut s = String::new();
                match c {
                    Constant::Scalar { value, dtype } => {
                        let _ = match value {
                            Scalar::Int(v) => write_int(&mut s, *v, *dtype),
                            Scalar::Float(v) => write_float(&mut s, *v, *dtype),
                            Scalar::Bool(b) => write_int(&mut s, *b as i64, DType::BOOL),
                        };
                        s.push_str(&self.ty_comment(e));
                    }
                    Constant::Meta { key, index, ty } => {
                        self.meta_consts
                            .entry(key.clone())
                            .or_default()
                            .entry(*index)
                            .or_insert_with(|| ty.clone());
                        let _ = write!(s, "meta[{key}][{index}]");
                        s.push_str(&self.comment(e, Some(format!("ty={ty}"))));
                    }
                }
                s
            }
            Expr::Call {
                callee,
                args,
                attrs,
            } => {
                let mut parts: Vec<String> = args.iter().map(|a| self.r(*a)).collect();
                let head = match callee {
                    Callee::Op(op) => {
                        let def = registry().get(*op);
                        for (k, v) in attrs.non_default(def.attrs) {
                            let v = self.attr(v);
                            parts.push(format!("{k}={v}"));
                        }
                        def.name.to_string()
                    }
                    Callee::Expr(c) => self.r(*c),
                };
                format!("{head}({}){}", parts.join(", "), self.ty_comment(e))
            }
            Expr::Tuple(fields) => {
                let parts: Vec<String> = fields.iter().map(|f| self.r(*f)).collect();
                let comma = if parts.len() == 1 { "," } else { "" };
                format!("({}{comma}){}", parts.join(", "), self.ty_comment(e))
            }
            Expr::Proj { tuple, index } => {
                format!("{}.{index}{}", self.r(*tuple), self.ty_comment(e))
            }
            Expr::Func(f) => {
                let sc = self.child(e, 0);
                let text = self.function(*f, sc, "fn ", indent);
                format!("{text}{}", self.ty_comment(e))
            }
            Expr::If { cond, .. } => {
                let c = self.r(*cond);
                let pad = "  ".repeat(indent);
                let (ts, es) = (self.child(e, 1), self.child(e, 2));
                let t = self.scope(ts, indent + 1);
                let f = self.scope(es, indent + 1);
                format!("if ({c}) {{\n{t}{pad}}} else {{\n{f}{pad}}}")
            }
            Expr::Let { .. } => {
                let pad = "  ".repeat(indent);
                let sc = self.child(e, 0);
                let inner = self.scope(sc, indent + 1);
                format!("(\n{inner}{pad})")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frontend::relay::metadata::parse_metadata;

    const TEXT: &str = "#[version = \"0.0.5\"]\n\
        def @main(%x: Tensor[(2), float32]) {\n  \
        %0 = add(%x, meta[relay.Constant][3] /* ty=Tensor[(2), float32] */);\n  \
        %1 = multiply(%x, meta[relay.Constant][0] /* ty=Tensor[(2), float32] */);\n  \
        (%0, %1)\n}\n";

    /// The section printed with `text`.
    fn section(text: &str) -> Option<MetaTable> {
        let at = text.find("#[metadata]")?;
        Some(parse_metadata(&text[at + "#[metadata]".len()..]).unwrap())
    }

    #[test]
    fn constants_without_data_print_no_section() {
        let m = crate::frontend::relay::load_text(TEXT);
        let text = print_module(&m);
        assert!(!text.contains("#[metadata]"), "{text}");
        assert!(text.contains("meta[relay.Constant][3] /* ty=Tensor[(2), float32] */"));
    }

    /// With data for one constant, the section holds every printed index of its key: the data
    /// at 3, the constant without data at 0 (typed by its comment) and null objects between.
    #[test]
    fn data_puts_the_key_in_the_section() {
        let mut m = crate::frontend::relay::load_text(TEXT);
        let bytes: Vec<u8> = [1.5f32, -2.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        m.meta.data.insert(
            ("relay.Constant".to_string(), 3),
            ConstData(bytes.clone().into()),
        );
        // Data for a constant nothing prints is not written.
        m.meta.data.insert(
            ("relay.Constant".to_string(), 7),
            ConstData(vec![0; 4].into()),
        );
        let text = print_module(&m);
        let table = section(&text).expect("a section");
        let f32x2 = TensorType::new(&[2], DType::F32);
        assert_eq!(
            table.objects["relay.Constant"],
            vec![
                MetaObject::UntypedConstant,
                MetaObject::Other(String::new()),
                MetaObject::Other(String::new()),
                MetaObject::Constant(f32x2),
            ]
        );
        assert_eq!(table.data.len(), 1);
        assert_eq!(
            table.data[&("relay.Constant".to_string(), 3)].0.as_ref(),
            &bytes[..]
        );
        let again = crate::frontend::relay::load_text(&text);
        crate::ir::equal::modules_equal(&m, &again).unwrap();
        crate::ir::equal::constant_data_equal(&m, &again).unwrap();
        assert_eq!(print_module(&again), text);
    }

    /// Data that does not fit the constant's type (no parsed module has such) is not written,
    /// and the key is left out.
    #[test]
    fn data_of_the_wrong_size_is_not_written() {
        let mut m = crate::frontend::relay::load_text(TEXT);
        m.meta.data.insert(
            ("relay.Constant".to_string(), 3),
            ConstData(vec![0; 5].into()),
        );
        let text = print_module(&m);
        assert!(!text.contains("#[metadata]"), "{text}");
    }
}
