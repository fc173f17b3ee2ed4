//! The ONNX front end's upper layer: an ONNX [`Model`] becomes a type-checked [`Module`] whose
//! `@main` computes what the graph computes.
//!
//! [`import`] binds the inputs' shapes, then walks the nodes in topological order. A node whose
//! inputs are known values (weights, folded values, static shapes) folds ([`super::fold`]); any
//! other node becomes operator calls ([`ops`]), typed as they are made, so the shapes of later
//! `Shape` nodes are known and their computations fold too. Weights become `meta[relay.Constant]`
//! constants whose data are views of the model's bytes (never copied), the first time an
//! operator uses them; weights that only feed folded computations never enter the module.
//!
//! Expressions carry spans into a *node listing*, a text with one line per ONNX node (its
//! position in the file, operator, name, inputs and outputs), added to the [`SourceMap`] under
//! the model's file name. A diagnostic about an expression therefore quotes the node it came
//! from, and [`node_of_line`] maps a listing line back to the node.
//!
//! `docs/onnx.md` lists the operators, the opsets and the decompositions.

mod ops;

use super::fold::Folder;
use super::model::{Model, Node};
use super::names;
use super::shapes::{bind_inputs, Bindings, BoundInput};
use super::tensor::{DType as OnnxDType, TensorData};
use crate::diag::{Diagnostic, E3022, E3024};
use crate::ir::{
    AttrValue, Attrs, ConstData, Constant, DType, Expr, ExprId, FuncId, Function, Global, GlobalId,
    MetaObject, Module, Scalar, TensorType, Type, Var, VarId, VirtualDevice,
};
use crate::ops::{def_of, Op, RelCall};
use crate::source::{FileId, ListedNode, SourceMap, Span};
use rustc_hash::{FxHashMap, FxHashSet};

/// The meta-table key of imported weights.
pub const CONSTANT_KEY: &str = "relay.Constant";

/// An imported model.
#[derive(Debug)]
pub struct Imported {
    /// The module: `@main` with one parameter per graph input, type-checked.
    pub module: Module,
    /// The node listing the module's spans point into.
    pub listing: FileId,
    /// The graph inputs, in order: the ONNX name and the parameter's type.
    pub inputs: Vec<(String, TensorType)>,
    /// The graph outputs' ONNX names, in order.
    pub outputs: Vec<String>,
    /// Warnings from decoding, binding and folding.
    pub warnings: Vec<Diagnostic>,
    /// How many nodes folded into constants.
    pub folded: usize,
}

/// The collage dtype of an ONNX element type.
pub fn dtype_of(d: OnnxDType) -> DType {
    use crate::ir::DTypeCode::*;
    match d {
        OnnxDType::F32 => DType::F32,
        OnnxDType::F16 => DType::F16,
        OnnxDType::BF16 => DType::scalar(BFloat, 16),
        OnnxDType::F64 => DType::F64,
        OnnxDType::I8 => DType::I8,
        OnnxDType::I16 => DType::I16,
        OnnxDType::I32 => DType::I32,
        OnnxDType::I64 => DType::I64,
        OnnxDType::U8 => DType::U8,
        OnnxDType::U16 => DType::scalar(UInt, 16),
        OnnxDType::U32 => DType::scalar(UInt, 32),
        OnnxDType::U64 => DType::scalar(UInt, 64),
        OnnxDType::Bool => DType::BOOL,
    }
}

/// A zero-dimensional tensor of `dtype` holding `v` (integers wrapped to the width, bfloat16
/// rounded to nearest even), or `None` when ONNX has no such type.
fn scalar_data(v: f64, dtype: DType) -> Option<TensorData> {
    let od = (0..=16)
        .filter_map(OnnxDType::from_onnx)
        .find(|&o| dtype_of(o) == dtype)?;
    let bytes: Vec<u8> = match od {
        OnnxDType::BF16 => half::bf16::from_f64(v).to_le_bytes().to_vec(),
        OnnxDType::F16 | OnnxDType::F32 | OnnxDType::F64 => return None,
        _ => {
            let i = if v.is_sign_negative() {
                v as i64 as u64
            } else {
                v as u64
            };
            i.to_le_bytes()[..od.size()].to_vec()
        }
    };
    TensorData::new(od, Vec::new(), bytes.into()).ok()
}

/// Imports `model` with its inputs' shapes bound by `bindings`. The node listing is added to
/// `sources`. Errors name the node (position, name, operator), the opset and the file; at most
/// [`super::MAX_ERRORS`] are reported.
pub fn import(
    model: &Model,
    bindings: &Bindings,
    sources: &mut SourceMap,
) -> Result<Imported, Vec<Diagnostic>> {
    let (inputs, mut warnings) = bind_inputs(model, bindings)?;
    warnings.splice(0..0, model.warnings.iter().cloned());
    let (listing_text, lines, listed) = listing(model);
    let listing = sources.add_listing(model.file.clone(), listing_text, listed);
    let line_spans: Vec<Span> = {
        let file = sources.get(listing);
        let starts = file.line_starts();
        lines
            .iter()
            .map(|&l| {
                let start = starts.get(l).copied().unwrap_or(0) as usize;
                let end = starts
                    .get(l + 1)
                    .map_or(file.text.len(), |&e| (e as usize).saturating_sub(1));
                Span::new(listing, start, end.max(start))
            })
            .collect()
    };
    let whole = Span::new(listing, 0, 0);
    let mut cx = Cx::new(model, whole);
    cx.params(&inputs);
    let mut errors: Vec<Diagnostic> = Vec::new();
    // The outputs of nodes that failed, and of nodes that read them: those nodes are not
    // converted, so that one error is not followed by one more per node downstream.
    let mut undefined: FxHashSet<&str> = FxHashSet::default();
    let mut downstream = 0usize;
    for (k, node) in model.graph.nodes.iter().enumerate() {
        cx.node = Some(node);
        cx.span = line_spans[k];
        if !undefined.is_empty() && node.inputs.iter().any(|i| undefined.contains(i.as_str())) {
            undefined.extend(
                node.outputs
                    .iter()
                    .filter(|o| !o.is_empty())
                    .map(String::as_str),
            );
            downstream += 1;
            continue;
        }
        let before = errors.len();
        match cx
            .folder
            .step(node, &|name: &str| cx_shape(&cx.env, &cx.tys, name))
        {
            Ok(true) => continue,
            Ok(false) => {}
            Err(d) => {
                errors.push(d);
                undefined.extend(
                    node.outputs
                        .iter()
                        .filter(|o| !o.is_empty())
                        .map(String::as_str),
                );
                if errors.len() >= super::MAX_ERRORS {
                    break;
                }
                continue;
            }
        }
        if let Err(d) = ops::convert(&mut cx, node) {
            errors.push(d);
            if errors.len() >= super::MAX_ERRORS {
                break;
            }
        }
        if errors.len() > before {
            undefined.extend(
                node.outputs
                    .iter()
                    .filter(|o| !o.is_empty())
                    .map(String::as_str),
            );
        }
    }
    if !errors.is_empty() {
        if downstream > 0 {
            let last = errors.pop().expect("an error");
            errors.push(last.with_note(format!(
                "{downstream} later node(s) read values these errors leave undefined and were \
                 not converted"
            )));
        }
        return Err(errors);
    }
    cx.node = None;
    cx.span = whole;
    let body = cx.outputs().map_err(|d| vec![d])?;
    let Cx {
        mut m,
        folder,
        params,
        ..
    } = cx;
    let folding = folder.finish();
    warnings.extend(folding.warnings);
    finish_main(&mut m, params, body, whole);
    if let Err(diags) = crate::analysis::typeck::check(&mut m) {
        return Err(diags.iter().cloned().collect());
    }
    Ok(Imported {
        module: m,
        listing,
        inputs: inputs
            .iter()
            .map(|i| (i.name.clone(), input_type(i)))
            .collect(),
        outputs: model.graph.outputs.iter().map(|o| o.name.clone()).collect(),
        warnings,
        folded: folding.folded.len(),
    })
}

fn input_type(i: &BoundInput) -> TensorType {
    let shape: Vec<i64> = i.shape.iter().map(|&d| d as i64).collect();
    TensorType::new(&shape, dtype_of(i.dtype))
}

/// The node listing, for each node of `model.graph.nodes` (in that order) its line, and the
/// node of each line.
fn listing(model: &Model) -> (String, Vec<usize>, Vec<ListedNode>) {
    use std::fmt::Write;
    let mut order: Vec<usize> = (0..model.graph.nodes.len()).collect();
    order.sort_by_key(|&k| model.graph.nodes[k].index);
    let mut lines = vec![0; order.len()];
    let mut text = String::new();
    let clean = |s: &str| crate::diag::escape_controls(s).into_owned();
    let mut listed = Vec::with_capacity(order.len());
    for (line, &k) in order.iter().enumerate() {
        let n = &model.graph.nodes[k];
        lines[k] = line;
        listed.push(ListedNode {
            index: n.index,
            name: n.name.clone(),
            op_type: n.op_type.clone(),
        });
        let _ = write!(text, "#{} {}", n.index, clean(&n.op_type));
        if !n.name.is_empty() {
            let _ = write!(text, " `{}`", clean(&n.name));
        }
        let list = |v: &[String]| v.iter().map(|s| clean(s)).collect::<Vec<_>>().join(", ");
        let _ = writeln!(text, " ({}) -> ({})", list(&n.inputs), list(&n.outputs));
    }
    (text, lines, listed)
}

fn cx_shape(env: &FxHashMap<String, ExprId>, tys: &[Option<Type>], name: &str) -> Option<Vec<u64>> {
    let e = env.get(name)?;
    match tys.get(e.index())?.as_ref()? {
        Type::Tensor(t) => t
            .static_shape()
            .map(|s| s.iter().map(|&d| d.max(0) as u64).collect()),
        _ => None,
    }
}

/// Adds `def @main(params) { body }` to `m`.
fn finish_main(m: &mut Module, params: Vec<VarId>, body: ExprId, span: Span) {
    let f = FuncId(m.funcs.len() as u32);
    m.funcs.push(Function {
        params,
        ret_type: None,
        ret_span: None,
        attrs: Vec::new(),
        result_device: VirtualDevice::unconstrained(),
        body,
        first_expr: ExprId(0),
        span,
    });
    let g = GlobalId(m.globals.len() as u32);
    m.globals.push(Global {
        name: "main".into(),
        def: Some(f),
        span,
    });
    m.defs.push((g, f));
}

/// The import's state: the module being built, the value of every ONNX name seen so far, and
/// the node being converted (for diagnostics and spans).
pub(super) struct Cx<'m> {
    model: &'m Model,
    m: Module,
    /// The type of every expression, computed as it is made.
    tys: Vec<Option<Type>>,
    /// The expression of each ONNX value that has one.
    env: FxHashMap<String, ExprId>,
    weights: FxHashMap<&'m str, &'m TensorData>,
    folder: Folder<'m>,
    params: Vec<VarId>,
    node: Option<&'m Node>,
    span: Span,
}

/// The result of a conversion step.
pub(super) type R<T> = Result<T, Diagnostic>;

impl<'m> Cx<'m> {
    fn new(model: &'m Model, span: Span) -> Cx<'m> {
        Cx {
            model,
            m: Module::new(),
            tys: Vec::new(),
            env: FxHashMap::default(),
            weights: model
                .graph
                .weights
                .iter()
                .map(|w| (w.name.as_str(), &w.data))
                .collect(),
            folder: Folder::new(model),
            params: Vec::new(),
            node: None,
            span,
        }
    }

    /// The default opset of the model.
    pub(super) fn opset(&self) -> i64 {
        self.model.opset
    }

    fn params(&mut self, inputs: &[BoundInput]) {
        for i in inputs {
            let ty = input_type(i);
            let v = VarId(self.m.vars.len() as u32);
            let expr = self.push(Expr::Var(v), Type::Tensor(ty.clone()));
            self.m.vars.push(Var {
                name: names::to_ident(&i.name),
                annotation: Some(Type::Tensor(ty)),
                device: VirtualDevice::unconstrained(),
                span: self.span,
                expr,
            });
            self.params.push(v);
            self.env.insert(i.name.clone(), expr);
        }
    }

    fn push(&mut self, e: Expr, ty: Type) -> ExprId {
        let id = self.m.push(e, self.span);
        self.tys.push(Some(ty));
        id
    }

    /// A diagnostic about the current node.
    pub(super) fn error(&self, code: crate::diag::Code, message: impl Into<String>) -> Diagnostic {
        let d = Diagnostic::error(code, message);
        match self.node {
            Some(n) => d.with_place(n.place(&self.model.file, self.model.opset)),
            None => d.with_place(crate::diag::ModelPlace {
                file: self.model.file.clone(),
                ..Default::default()
            }),
        }
    }

    /// The current node.
    pub(super) fn node(&self) -> &'m Node {
        self.node.expect("a node is being converted")
    }

    /// The known value of ONNX value `name` (a weight or a folded value), without making it
    /// part of the module.
    pub(super) fn known(&self, name: &str) -> Option<&TensorData> {
        if name.is_empty() {
            return None;
        }
        self.folder
            .value(name)
            .or_else(|| self.weights.get(name).copied())
    }

    /// The expression of ONNX value `name`: an input, an earlier node's output, or a known
    /// value made a constant on first use.
    pub(super) fn value(&mut self, name: &str) -> R<ExprId> {
        if let Some(&e) = self.env.get(name) {
            return Ok(e);
        }
        let Some(t) = self.known(name).cloned() else {
            return Err(self.error(
                crate::diag::E3008,
                format!("value `{name}` has no producer the importer knows"),
            ));
        };
        let e = self.constant(&t);
        self.env.insert(name.to_string(), e);
        Ok(e)
    }

    /// A constant holding `t`'s bytes (shared, not copied): a literal for a scalar of a common
    /// type, else a metadata constant.
    pub(super) fn constant(&mut self, t: &TensorData) -> ExprId {
        let dtype = dtype_of(t.dtype);
        if t.shape.is_empty() {
            let scalar = match t.dtype {
                OnnxDType::F32 | OnnxDType::F64 => t.to_f64().first().map(|&v| Scalar::Float(v)),
                OnnxDType::I32 | OnnxDType::I64 => {
                    t.to_i64().and_then(|v| v.first().copied()).map(Scalar::Int)
                }
                OnnxDType::Bool => t.bytes().first().map(|&b| Scalar::Bool(b != 0)),
                _ => None,
            };
            if let Some(value) = scalar {
                return self.push(
                    Expr::Const(Constant::Scalar { value, dtype }),
                    Type::Tensor(TensorType::scalar(dtype)),
                );
            }
        }
        let shape: Vec<i64> = t.shape.iter().map(|&d| d as i64).collect();
        let ty = TensorType::new(&shape, dtype);
        let list = self.m.meta.objects.entry(CONSTANT_KEY.into()).or_default();
        let index = list.len() as u32;
        list.push(MetaObject::Constant(ty.clone()));
        self.m.meta.data.insert(
            (CONSTANT_KEY.into(), index),
            ConstData(t.shared_bytes().clone()),
        );
        self.push(
            Expr::Const(Constant::Meta {
                key: CONSTANT_KEY.into(),
                index,
                ty: ty.clone(),
            }),
            Type::Tensor(ty),
        )
    }

    /// A scalar constant of value `v`: a literal, or for a dtype the text format has no
    /// literal for (8-bit and unsigned integers, bfloat16) a metadata constant, so that the
    /// printed program parses again. Integers wrap to the dtype's width, as a cast does.
    pub(super) fn scalar(&mut self, v: f64, dtype: DType) -> ExprId {
        if !crate::ir::literal::has_literal(dtype) {
            if let Some(t) = scalar_data(v, dtype) {
                return self.constant(&t);
            }
        }
        let value = if dtype.is_float() {
            Scalar::Float(v)
        } else if dtype.is_bool() {
            Scalar::Bool(v != 0.0)
        } else {
            // Saturated to the dtype's range (as a float-to-integer cast), so the literal
            // keeps its dtype when printed and parsed again.
            let (lo, hi) = match dtype.bits {
                16 => (i16::MIN as i64, i16::MAX as i64),
                32 => (i32::MIN as i64, i32::MAX as i64),
                _ => (i64::MIN, i64::MAX),
            };
            Scalar::Int((v as i64).clamp(lo, hi))
        };
        self.push(
            Expr::Const(Constant::Scalar { value, dtype }),
            Type::Tensor(TensorType::scalar(dtype)),
        )
    }

    /// A constant tensor of int64 values.
    pub(super) fn i64s(&mut self, v: &[i64]) -> ExprId {
        let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        let t = TensorData::new(OnnxDType::I64, vec![v.len() as u64], bytes.into())
            .expect("the size matches");
        self.constant(&t)
    }

    /// The tensor type of expression `e`.
    pub(super) fn ty(&self, e: ExprId) -> R<TensorType> {
        match self.tys.get(e.index()).and_then(Option::as_ref) {
            Some(Type::Tensor(t)) => Ok(t.clone()),
            other => Err(self.error(
                E3024,
                format!(
                    "expected a tensor, found {}",
                    other.map_or("an untyped value".to_string(), |t| format!("`{t}`"))
                ),
            )),
        }
    }

    /// The static shape of expression `e`.
    pub(super) fn shape(&self, e: ExprId) -> R<Vec<i64>> {
        let t = self.ty(e)?;
        t.static_shape()
            .ok_or_else(|| self.error(E3024, format!("the shape of `{t}` is not static")))
    }

    /// A call of `op` with `attrs` set (the others at their defaults), typed by the operator's
    /// relation; a relation's refusal is E3024 naming the node.
    pub(super) fn call(
        &mut self,
        op: Op,
        args: &[ExprId],
        attrs: &[(&str, AttrValue)],
    ) -> R<ExprId> {
        let def = def_of(op).expect("a built-in operator");
        let mut values = Attrs::defaults(def.attrs);
        for (name, v) in attrs {
            let field = def
                .attr_field(name)
                .unwrap_or_else(|| panic!("`{}` has no attribute `{name}`", def.name));
            let v = field
                .ty
                .coerce(v.clone())
                .map_err(|e| self.error(E3024, format!("`{}` {name}: {e}", def.name)))?;
            values.set(def.attrs, name, v);
        }
        let arg_types: Vec<Type> = args
            .iter()
            .map(|a| {
                self.tys
                    .get(a.index())
                    .cloned()
                    .flatten()
                    .ok_or_else(|| self.error(E3024, "an argument has no type"))
            })
            .collect::<R<_>>()?;
        let ty = (def.rel)(&RelCall {
            op: def,
            args: &arg_types,
            attrs: &values,
        })
        .map_err(|e| {
            self.error(
                E3024,
                format!(
                    "`{}` (as `{}`) does not type: {}",
                    self.node().op_type,
                    def.name,
                    e.message
                ),
            )
        })?;
        let callee = crate::ir::Callee::Op(op.id().expect("a built-in operator"));
        Ok(self.push(
            Expr::Call {
                callee,
                args: args.to_vec(),
                attrs: values,
            },
            ty,
        ))
    }

    /// A tuple of tensors.
    pub(super) fn tuple(&mut self, fields: &[ExprId]) -> R<ExprId> {
        let tys = fields
            .iter()
            .map(|&f| self.ty(f).map(Type::Tensor))
            .collect::<R<Vec<_>>>()?;
        Ok(self.push(Expr::Tuple(fields.to_vec()), Type::Tuple(tys)))
    }

    /// Field `index` of a tuple-valued expression.
    pub(super) fn proj(&mut self, tuple: ExprId, index: u32) -> R<ExprId> {
        let ty = match self.tys.get(tuple.index()).and_then(Option::as_ref) {
            Some(Type::Tuple(fs)) => fs.get(index as usize).cloned(),
            _ => None,
        }
        .ok_or_else(|| self.error(E3024, format!("no field {index} in a tuple")))?;
        Ok(self.push(Expr::Proj { tuple, index }, ty))
    }

    /// Makes `e` the value of the current node's output `i` (an omitted output is dropped).
    /// The expression's binding name (what `--explain` and reports call it) becomes the
    /// output's identifier, unless it already has one.
    pub(super) fn bind(&mut self, i: usize, e: ExprId) {
        if let Some(name) = self.node().outputs.get(i).filter(|o| !o.is_empty()) {
            self.env.insert(name.clone(), e);
            let named = matches!(self.m.expr(e), Expr::Call { .. } | Expr::Proj { .. });
            if named && self.m.bindings[e.index()].is_none() {
                self.m.bindings[e.index()] = Some(names::to_ident(name).into_boxed_str());
            }
        }
    }

    /// The body of `@main`: the graph's output, or a tuple of its outputs.
    fn outputs(&mut self) -> R<ExprId> {
        let names: Vec<String> = self
            .model
            .graph
            .outputs
            .iter()
            .map(|o| o.name.clone())
            .collect();
        let mut exprs = Vec::new();
        for n in &names {
            exprs.push(self.value(n)?);
        }
        match exprs.as_slice() {
            [one] => Ok(*one),
            [] => Err(self.error(E3022, "the graph has no outputs")),
            _ => self.tuple(&exprs),
        }
    }
}
