//! The pipeline behind each command, in one place: load inputs, run the phases, render results
//! and diagnostics, and decide the exit code.

use crate::dataflow::{Graph, NodeIdx};
use crate::diag::{self, Diagnostic, Diagnostics, E0901};
use crate::ir::Module;
use crate::relay;
use crate::source::{SourceMap, Span};
use std::path::Path;

/// How a command ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Success.
    Ok,
    /// The input has errors (diagnostics were printed).
    InputErrors,
    /// Usage or I/O problem.
    Usage,
    /// A bug in collage itself.
    Internal,
}

impl Outcome {
    /// The process exit code: 0, 1 for input errors, 2 for usage or I/O errors, 101 for bugs.
    pub fn exit_code(self) -> u8 {
        match self {
            Outcome::Ok => 0,
            Outcome::InputErrors => 1,
            Outcome::Usage => 2,
            Outcome::Internal => 101,
        }
    }
}

/// Reads a file into the source map, or prints an error.
pub fn read_source(sources: &mut SourceMap, path: &Path) -> Result<crate::source::FileId, Outcome> {
    match std::fs::read(path) {
        Ok(bytes) => match String::from_utf8(bytes) {
            Ok(text) => Ok(sources.add(path.display().to_string(), text)),
            Err(e) => {
                let valid = e.utf8_error().valid_up_to();
                let mut text = String::from_utf8_lossy(e.as_bytes()).into_owned();
                text.truncate(text.floor_char_boundary(valid + 3));
                let file = sources.add(path.display().to_string(), text);
                let span = Span::new(file, valid, valid + 1);
                let d = Diagnostic::error(crate::diag::E0101, "the file is not valid UTF-8")
                    .with_primary(span, "invalid byte sequence here");
                diag::emit_stderr(&d.into(), sources);
                Err(Outcome::InputErrors)
            }
        },
        Err(e) => {
            eprintln!("error[{}]: cannot read `{}`: {e}", E0901.id, path.display());
            Err(Outcome::Usage)
        }
    }
}

/// Loads (parses and type-checks) a model file.
pub fn load_model(sources: &mut SourceMap, path: &Path) -> Result<Module, Outcome> {
    let file = read_source(sources, path)?;
    relay::load(sources, file).map_err(|diags| {
        report(&diags, sources);
        Outcome::InputErrors
    })
}

/// Prints diagnostics to standard error in source order.
pub fn report(diags: &Diagnostics, sources: &SourceMap) {
    let mut sorted = diags.clone();
    sorted.sort_by_position();
    diag::emit_stderr(&sorted, sources);
}

/// `collage parse MODEL [--json]`.
pub fn parse_command(path: &Path, json: bool, type_comments: bool) -> Outcome {
    let mut sources = SourceMap::new();
    let m = match load_model(&mut sources, path) {
        Ok(m) => m,
        Err(o) => return o,
    };
    if json {
        match dataflow_json(&m) {
            Some(v) => println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default()),
            None => {
                eprintln!("error: the module has no `@main` function");
                return Outcome::InputErrors;
            }
        }
    } else {
        let opts = relay::print::PrintOptions { type_comments };
        print!("{}", relay::print::print_module_with(&m, opts));
    }
    Outcome::Ok
}

/// The dataflow graph of `@main` as JSON: `{"function", "nodes": [{index, kind, op, type,
/// binding, span, inputs}]}`.
pub fn dataflow_json(m: &Module) -> Option<serde_json::Value> {
    let main = m.main()?;
    let g = Graph::build(m, main);
    let nodes: Vec<serde_json::Value> = (0..g.len())
        .map(|i| {
            let idx = NodeIdx(i as u32);
            let ty = match g.nodes[i].what {
                crate::dataflow::NodeRef::Expr(e) => m.ty(e).map(|t| t.to_string()),
                crate::dataflow::NodeRef::Func(f) => function_type(m, f).map(|t| t.to_string()),
                crate::dataflow::NodeRef::Op(_) => None,
            };
            let span = g
                .span(m, idx)
                .map(|s| serde_json::json!({"start": s.start, "end": s.end}));
            serde_json::json!({
                "index": i,
                "kind": g.kind_name(m, idx),
                "op": g.op_name(m, idx),
                "type": ty,
                "binding": g.binding(m, idx),
                "span": span,
                "inputs": g.nodes[i].inputs.iter().map(|x| x.0).collect::<Vec<_>>(),
            })
        })
        .collect();
    let name = m
        .defs
        .iter()
        .find(|(_, f)| *f == main)
        .map(|(g, _)| m.globals[g.index()].name.clone());
    Some(serde_json::json!({"function": name, "nodes": nodes}))
}

/// The type of a function from its parameters' and body's inferred types.
pub fn function_type(m: &Module, f: crate::ir::FuncId) -> Option<crate::ir::Type> {
    let func = m.func(f);
    let params = func
        .params
        .iter()
        .map(|p| m.ty(m.var(*p).expr).cloned())
        .collect::<Option<Vec<_>>>()?;
    let ret = m.ty(func.body)?.clone();
    Some(crate::ir::Type::Func(crate::ir::FuncType {
        params,
        ret: Box::new(ret),
    }))
}

/// Expands directories into their `.rules` files (sorted); files are kept as given.
pub fn rules_files(paths: &[std::path::PathBuf]) -> Result<Vec<std::path::PathBuf>, Outcome> {
    let mut out = Vec::new();
    for p in paths {
        if p.is_dir() {
            let entries = std::fs::read_dir(p).map_err(|e| {
                eprintln!(
                    "error[{}]: cannot read directory `{}`: {e}",
                    E0901.id,
                    p.display()
                );
                Outcome::Usage
            })?;
            let mut files: Vec<std::path::PathBuf> = entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|f| f.extension().is_some_and(|x| x == "rules"))
                .collect();
            files.sort();
            out.extend(files);
        } else if p.is_file() {
            out.push(p.clone());
        } else {
            eprintln!(
                "error[{}]: cannot read `{}`: no such file or directory",
                E0901.id,
                p.display()
            );
            return Err(Outcome::Usage);
        }
    }
    Ok(out)
}

/// `collage check FILE|DIR... [--print]`: checks rules files; with `--print`, prints the compiled
/// rule trees.
pub fn check_command(paths: &[std::path::PathBuf], print: bool) -> Outcome {
    let roots = match rules_files(paths) {
        Ok(r) => r,
        Err(o) => return o,
    };
    let mut sources = SourceMap::new();
    let checked = crate::sema::check(&mut sources, &crate::sema::Provider::Files, &roots);
    report(&checked.diags, &sources);
    match checked.program {
        Some(p) => {
            if print {
                print!("{}", crate::ruletree::print::print_program(&p));
            }
            Outcome::Ok
        }
        None => Outcome::InputErrors,
    }
}

/// `collage fuse MODEL [--max-depth N] [--json]`: TVM's greedy FuseOps partition of `@main`.
pub fn fuse_command(path: &Path, max_depth: usize, json: bool) -> Outcome {
    let mut sources = SourceMap::new();
    let m = match load_model(&mut sources, path) {
        Ok(m) => m,
        Err(o) => return o,
    };
    let Some(main) = m.main() else {
        eprintln!("error: the module has no `@main` function");
        return Outcome::InputErrors;
    };
    let result = crate::fuse::fuse(&m, main, max_depth);
    if json {
        let v = fuse_json(&m, main, max_depth, &result);
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
    } else {
        print!("{}", fuse_text(&m, main, max_depth, &result));
    }
    Outcome::Ok
}

/// The name of a FuseOps node in output: the source's `%N` binding or `%var` name, else `#i`
/// with its FuseOps post-DFS index.
pub fn fuse_node_name(m: &Module, e: crate::ir::ExprId, index: usize) -> String {
    match m.expr(e) {
        crate::ir::Expr::Var(v) => format!("%{}", m.var(*v).name),
        _ => match &m.bindings[e.index()] {
            Some(b) => format!("%{b}"),
            None => format!("#{index}"),
        },
    }
}

/// What a FuseOps node is, in one word: the operator of an operator call, else `call`, `var`,
/// `const`, `tuple`, `.N` (a projection), `let`, `if` or `fn`.
pub fn fuse_node_desc(m: &Module, e: crate::ir::ExprId) -> String {
    use crate::ir::{Callee, Expr};
    match m.expr(e) {
        Expr::Call {
            callee: Callee::Op(op),
            ..
        } => crate::ops::registry().get(*op).name.to_string(),
        Expr::Call { .. } => "call".into(),
        Expr::Var(_) => "var".into(),
        Expr::Const(_) => "const".into(),
        Expr::Tuple(_) => "tuple".into(),
        Expr::Proj { index, .. } => format!(".{index}"),
        Expr::Let { .. } => "let".into(),
        Expr::If { .. } => "if".into(),
        Expr::Func(_) => "fn".into(),
        Expr::Global(_) => "global".into(),
        Expr::Op(op) => crate::ops::registry().get(*op).name.to_string(),
    }
}

fn is_op_call(m: &Module, e: crate::ir::ExprId) -> bool {
    matches!(
        m.expr(e),
        crate::ir::Expr::Call {
            callee: crate::ir::Callee::Op(_),
            ..
        }
    )
}

/// The post-DFS index of every expression in a FuseOps result (`usize::MAX` if it has none).
fn fuse_indices(m: &Module, r: &crate::fuse::FuseResult) -> Vec<usize> {
    let mut idx = vec![usize::MAX; m.exprs.len()];
    for (i, e) in r.order.iter().enumerate() {
        idx[e.index()] = i;
    }
    idx
}

/// The name of a function for output: `@name` of its definition, or `fn` for a literal.
fn function_name(m: &Module, f: crate::ir::FuncId) -> Option<String> {
    m.defs
        .iter()
        .find(|(_, d)| *d == f)
        .map(|(g, _)| m.globals[g.index()].name.clone())
}

/// The text report of a FuseOps result: one line per group that has more than one node or an
/// operator call, then a summary line.
///
/// ```text
/// group 1 [I]: #1 %0 (const, nn.pad)
/// group 4 [A] anchor %1: %1 %2 %3 (nn.conv2d, add, nn.relu)
/// @main: nodes 22, groups 15, operator calls 13, kernels 8, fused kernels 3, max depth 256
/// ```
///
/// A group line gives the group's index (as in `--json`), its kind letter (`E`lemwise,
/// `B`roadcast, `I`njective, comm `R`educe, `A`nchor-capable out-ewise-fusable, `T`uple,
/// `O`paque), its anchor if any, its members in post-DFS order (the last one is the group's
/// output) and what each member is (see [`fuse_node_name`] and [`fuse_node_desc`]). In the
/// summary, a kernel is a group with at least one operator call; a fused kernel has two or more.
pub fn fuse_text(
    m: &Module,
    func: crate::ir::FuncId,
    max_depth: usize,
    r: &crate::fuse::FuseResult,
) -> String {
    use std::fmt::Write as _;
    let idx = fuse_indices(m, r);
    let name = |e: crate::ir::ExprId| fuse_node_name(m, e, idx[e.index()]);
    let mut out = String::new();
    let (mut calls, mut kernels, mut fused) = (0usize, 0usize, 0usize);
    for (gi, g) in r.groups.iter().enumerate() {
        let n_calls = g.nodes.iter().filter(|&&e| is_op_call(m, e)).count();
        calls += n_calls;
        if n_calls > 0 {
            kernels += 1;
        }
        if n_calls > 1 {
            fused += 1;
        }
        if g.nodes.len() < 2 && n_calls == 0 {
            continue;
        }
        let _ = write!(out, "group {gi} [{}]", g.pattern.letter());
        if let Some(a) = g.anchor {
            let _ = write!(out, " anchor {}", name(a));
        }
        out.push(':');
        for &e in &g.nodes {
            let _ = write!(out, " {}", name(e));
        }
        let descs: Vec<String> = g.nodes.iter().map(|&e| fuse_node_desc(m, e)).collect();
        let _ = writeln!(out, " ({})", descs.join(", "));
    }
    let fname = function_name(m, func).map_or_else(|| "fn".to_string(), |n| format!("@{n}"));
    let _ = writeln!(
        out,
        "{fname}: nodes {}, groups {}, operator calls {calls}, kernels {kernels}, fused kernels \
         {fused}, max depth {max_depth}",
        r.order.len(),
        r.groups.len(),
    );
    out
}

/// The JSON report of a FuseOps result: `{"function", "max_depth", "groups": [{"index",
/// "pattern", "root", "anchor", "nodes": [{"index", "kind", "op", "binding", "span"}]}]}`. Every
/// group is listed, singletons included; `index`, `root` and `anchor` are FuseOps post-DFS
/// indices.
pub fn fuse_json(
    m: &Module,
    func: crate::ir::FuncId,
    max_depth: usize,
    r: &crate::fuse::FuseResult,
) -> serde_json::Value {
    use crate::ir::Expr;
    let idx = fuse_indices(m, r);
    let groups: Vec<serde_json::Value> = r
        .groups
        .iter()
        .enumerate()
        .map(|(gi, g)| {
            let nodes: Vec<serde_json::Value> = g
                .nodes
                .iter()
                .map(|&e| {
                    let kind = match m.expr(e) {
                        Expr::Var(_) => "Var",
                        Expr::Const(_) => "Constant",
                        Expr::Call { .. } => "Call",
                        Expr::Tuple(_) => "Tuple",
                        Expr::Proj { .. } => "TupleGetItem",
                        Expr::Let { .. } => "Let",
                        Expr::If { .. } => "If",
                        Expr::Func(_) => "Function",
                        Expr::Global(_) => "GlobalVar",
                        Expr::Op(_) => "Op",
                    };
                    let op = is_op_call(m, e).then(|| fuse_node_desc(m, e));
                    let binding = match m.expr(e) {
                        Expr::Var(v) => Some(format!("%{}", m.var(*v).name)),
                        _ => m.bindings[e.index()].as_ref().map(|b| format!("%{b}")),
                    };
                    let s = m.span(e);
                    serde_json::json!({
                        "index": idx[e.index()],
                        "kind": kind,
                        "op": op,
                        "binding": binding,
                        "span": {"start": s.start, "end": s.end},
                    })
                })
                .collect();
            serde_json::json!({
                "index": gi,
                "pattern": g.pattern.name(),
                "root": idx[g.root.index()],
                "anchor": g.anchor.map(|a| idx[a.index()]),
                "nodes": nodes,
            })
        })
        .collect();
    serde_json::json!({
        "function": function_name(m, func),
        "max_depth": max_depth,
        "groups": groups,
    })
}
