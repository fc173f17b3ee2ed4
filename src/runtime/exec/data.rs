//! Weights and inputs: where the values of constants and of `@main`'s parameters come from.
//!
//! * A `meta[relay.Constant][i]` whose metadata section carries its NDArray gets that data.
//! * Every other meta constant gets pseudo-random data drawn from the seed, keyed by its meta
//!   table key and index (which `collage partition` keeps: a partitioned model has exactly the
//!   weights of the original) and by its type. The distribution depends on how the constant is
//!   used, found by following it through calls into the functions it is passed to, so the
//!   original and the partitioned model agree on it too ([`Role`]).
//! * Scalar literals (`0f`, `2f16`, `50257i64`) are their value.
//! * Inputs are drawn from the seed by parameter name, with the same rules, unless given.
//!
//! The generator is counter-based (SplitMix64 of the stream key plus the element index), so
//! every element is independent of how the work is split across threads and of the order in
//! which tensors are made.

use crate::ir::{
    AttrValue, Callee, Constant, DType, DTypeCode, Expr, ExprId, Module, Scalar, VarId,
};
use crate::ops::Op;
use crate::runtime::exec::kernel::ConstantSource;
use crate::runtime::exec::tensor::{is_f32_family, Shape, Tensor};
use rayon::prelude::*;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

/// The default seed of `collage run`.
pub const DEFAULT_SEED: u64 = 0;

/// Integers drawn without a more specific role lie in `[0, INT_RANGE)`.
pub const INT_RANGE: i64 = 64;

/// How a value is used, which decides its distribution.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Role {
    /// Anything else: floats uniform in `[-1, 1)`, integers in `[0, 64)`, bools fair.
    Uniform,
    /// The weight of a convolution, dense layer or matrix product with this fan-in: uniform in
    /// `[-1/√fan_in, 1/√fan_in)`.
    Weight {
        /// Input elements per output element.
        fan_in: u64,
    },
    /// A scale or variance (`gamma` and `moving_var` of normalisations), a divisor, or the
    /// operand of `sqrt`, `rsqrt`, `log` and the base of `power`: uniform in `[0.5, 1.5)`
    /// (integers in `[1, 64)`).
    Positive,
    /// The indices of `take` over an axis of this extent: integers uniform in `[0, extent)`.
    Index {
        /// The extent of the gathered axis.
        extent: u64,
    },
    /// Integers cast to a floating-point type, such as the attention masks of BERT-like
    /// exports (`(1 - float(mask)) · -3.4e38`): 0 or 1. Drawn from `[0, 64)`, a mask made
    /// every attention score `-inf` and the outputs NaN.
    Flag,
}

impl Role {
    fn rank(self) -> u8 {
        match self {
            Role::Uniform => 0,
            Role::Index { .. } | Role::Flag => 1,
            Role::Positive => 2,
            Role::Weight { .. } => 3,
        }
    }

    /// The stronger of two roles (deterministic whatever the order uses are found in).
    fn join(self, other: Role) -> Role {
        match (self, other) {
            (Role::Weight { fan_in: a }, Role::Weight { fan_in: b }) => {
                Role::Weight { fan_in: a.max(b) }
            }
            (Role::Index { extent: a }, Role::Index { extent: b }) => {
                Role::Index { extent: a.min(b) }
            }
            // An index that is also a flag: 0 or 1 where the axis allows.
            (Role::Index { extent }, Role::Flag) | (Role::Flag, Role::Index { extent }) => {
                Role::Index {
                    extent: extent.min(2),
                }
            }
            (a, b) if b.rank() > a.rank() => b,
            (a, _) => a,
        }
    }
}

fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// FNV-1a of a string: stable stream keys for names.
fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The stream key of a constant or an input.
fn stream(seed: u64, what: &str, index: u64, ty: &Shape) -> u64 {
    let mut h = splitmix64(seed ^ fnv(what));
    h = splitmix64(h ^ index);
    h = splitmix64(h ^ fnv(&ty.to_string()));
    h
}

/// Fills a tensor of type `ty` from a stream, by role.
pub fn random_tensor(ty: &Shape, key: u64, role: Role) -> Result<Tensor, String> {
    let mut t = Tensor::zeros_of(ty).map_err(|e| e.0)?;
    let draw = move |j: usize| splitmix64(key.wrapping_add(j as u64));
    let unit = |v: u64| (v >> 40) as f64 / (1u64 << 24) as f64;
    let d = ty.dtype;
    if d.is_float() {
        let (lo, hi) = match role {
            Role::Weight { fan_in } => {
                let b = 1.0 / (fan_in.max(1) as f64).sqrt();
                (-b, b)
            }
            Role::Positive => (0.5, 1.5),
            _ => (-1.0, 1.0),
        };
        if is_f32_family(d) {
            t.fill_f32(|v| {
                v.par_chunks_mut(1 << 14)
                    .enumerate()
                    .for_each(|(c, chunk)| {
                        for (i, x) in chunk.iter_mut().enumerate() {
                            *x = (lo + (hi - lo) * unit(draw((c << 14) + i))) as f32;
                        }
                    })
            });
        } else {
            for i in 0..t.numel() {
                t.set_from_f64(i, lo + (hi - lo) * unit(draw(i)));
            }
        }
    } else if d == DType::BOOL {
        for (i, b) in t.as_mut_slice::<u8>().iter_mut().enumerate() {
            *b = (draw(i) >> 63) as u8;
        }
    } else if d.code == DTypeCode::Int || d.code == DTypeCode::UInt {
        let (lo, range) = match role {
            Role::Index { extent } => (0i64, extent.max(1)),
            Role::Flag => (0, 2),
            Role::Positive => (1, (INT_RANGE - 1) as u64),
            _ => (0, INT_RANGE as u64),
        };
        t.fill_i64(|v| {
            v.par_chunks_mut(1 << 14)
                .enumerate()
                .for_each(|(c, chunk)| {
                    for (i, x) in chunk.iter_mut().enumerate() {
                        *x = lo + (draw((c << 14) + i) % range) as i64;
                    }
                })
        });
    }
    Ok(t)
}

/// The role of a value used as argument `pos` of a call of an operator (with the call's
/// attributes and argument types).
fn role_of_use(m: &Module, call: ExprId, pos: usize) -> Role {
    let Expr::Call {
        callee: Callee::Op(op),
        args,
        attrs,
    } = m.expr(call)
    else {
        return Role::Uniform;
    };
    let def = crate::ops::op(*op);
    let attr = |n: &str| attrs.get(def.attrs, n);
    let arg_dims = |i: usize| -> Vec<u64> {
        args.get(i)
            .and_then(|&a| m.ty(a))
            .and_then(|t| t.as_tensor())
            .and_then(|t| t.static_shape())
            .map(|s| s.into_iter().map(|d| d.max(0) as u64).collect())
            .unwrap_or_default()
    };
    let numel = |d: &[u64]| d.iter().product::<u64>();
    let flag = |n: &str| attr(n).and_then(AttrValue::as_bool).unwrap_or(false);
    match (def.op, pos) {
        (Op::Dense | Op::Matmul, 1) => {
            let w = arg_dims(1);
            let k = if def.op == Op::Matmul && !flag("transpose_b") {
                w.first().copied()
            } else {
                w.get(1).copied()
            };
            Role::Weight {
                fan_in: k.unwrap_or(1),
            }
        }
        (Op::BatchMatmul, 0 | 1) => {
            let x = arg_dims(0);
            let k = if flag("transpose_a") {
                x.get(1)
            } else {
                x.get(2)
            };
            Role::Weight {
                fan_in: k.copied().unwrap_or(1),
            }
        }
        (Op::Conv1d | Op::Conv2d | Op::Conv3d | Op::Conv2dTranspose | Op::Conv3dTranspose, 1) => {
            let w = arg_dims(1);
            let layout = attr("kernel_layout")
                .and_then(AttrValue::as_str)
                .and_then(|s| crate::ops::layout::Layout::parse(s).ok());
            let letter = if def.op.conv_kind().is_some_and(|k| k.transposed) {
                'I'
            } else {
                'O'
            };
            let out: u64 = match &layout {
                Some(l) if l.rank() == w.len() => l
                    .axes()
                    .iter()
                    .zip(&w)
                    .filter(|(a, _)| a.name == letter)
                    .map(|(_, &d)| d)
                    .product(),
                _ => w.first().copied().unwrap_or(1),
            };
            Role::Weight {
                fan_in: numel(&w) / out.max(1),
            }
        }
        (Op::BatchNorm, 1 | 4) | (Op::LayerNorm | Op::InstanceNorm | Op::GroupNorm, 1) => {
            Role::Positive
        }
        (Op::Sqrt | Op::Rsqrt | Op::Log, 0) | (Op::Divide, 1) | (Op::Power, 0) => Role::Positive,
        (Op::Cast, 0)
            if args.first().is_some_and(|&a| is_integer(m, a))
                && attr("dtype")
                    .and_then(AttrValue::as_str)
                    .and_then(crate::ir::DType::parse)
                    .is_some_and(|d| d.is_float()) =>
        {
            Role::Flag
        }
        (Op::Take, 1) => {
            let d = arg_dims(0);
            let extent = match attr("axis").and_then(AttrValue::as_int) {
                None => numel(&d),
                Some(a) => {
                    let r = d.len() as i64;
                    let a = if a < 0 { a + r } else { a };
                    d.get(a.max(0) as usize).copied().unwrap_or(1)
                }
            };
            Role::Index { extent }
        }
        _ => Role::Uniform,
    }
}

/// Whether operator `op` gives its integer operand `pos`'s values unchanged to its result, whose
/// uses then decide the operand's role too: the values `where` chooses (indices normalised as
/// ONNX `Gather` imports them, `where(less(i, 0), add(i, n), i)`, keep the role of the `take`
/// they feed), and the operand of a layout change (a mask reshaped before its cast).
fn passes_on(op: Op, pos: usize) -> bool {
    match op {
        Op::Where => pos > 0,
        Op::Reshape | Op::ExpandDims | Op::Squeeze | Op::Transpose | Op::BroadcastTo => pos == 0,
        _ => false,
    }
}

/// Whether `e` is a tensor of integers.
fn is_integer(m: &Module, e: ExprId) -> bool {
    m.ty(e)
        .and_then(|t| t.as_tensor())
        .is_some_and(|t| matches!(t.dtype.code, DTypeCode::Int | DTypeCode::UInt))
}

/// Users of every expression, and let-bound values, for following values into functions.
struct Uses {
    users: HashMap<ExprId, Vec<ExprId>>,
    let_value: HashMap<VarId, ExprId>,
}

impl Uses {
    fn new(m: &Module) -> Uses {
        let mut users: HashMap<ExprId, Vec<ExprId>> = HashMap::new();
        let mut let_value = HashMap::new();
        for i in 0..m.exprs.len() {
            let e = ExprId(i as u32);
            if let Expr::Let { var, value, .. } = m.expr(e) {
                let_value.insert(*var, *value);
            }
            if matches!(m.expr(e), Expr::Func(_)) {
                continue;
            }
            m.for_each_operand(e, |o| users.entry(o).or_default().push(e));
        }
        Uses { users, let_value }
    }

    /// The function a callee expression denotes, through let-bound variables.
    fn callee(&self, m: &Module, mut c: ExprId) -> Option<crate::ir::FuncId> {
        for _ in 0..64 {
            match m.expr(c) {
                Expr::Func(f) => return Some(*f),
                Expr::Global(g) => return m.globals[g.index()].def,
                Expr::Var(v) => c = *self.let_value.get(v)?,
                _ => return None,
            }
        }
        None
    }

    /// The role of the value of `start`, from every operator use reachable through function
    /// parameters, let bindings and tuple projections.
    fn role(&self, m: &Module, start: ExprId) -> Role {
        let mut role = Role::Uniform;
        let mut seen = std::collections::HashSet::new();
        // (value expression, tuple path not yet projected away)
        let mut stack: Vec<(ExprId, Vec<u32>)> = vec![(start, Vec::new())];
        while let Some((e, path)) = stack.pop() {
            if seen.len() > 100_000 || !seen.insert((e, path.clone())) {
                continue;
            }
            for &u in self.users.get(&e).map(Vec::as_slice).unwrap_or(&[]) {
                match m.expr(u) {
                    Expr::Call { callee, args, .. } => {
                        for (pos, _) in args.iter().enumerate().filter(|(_, &a)| a == e) {
                            match callee {
                                Callee::Op(op) if path.is_empty() => {
                                    role = role.join(role_of_use(m, u, pos));
                                    if is_integer(m, e) && passes_on(crate::ops::op(*op).op, pos) {
                                        stack.push((u, Vec::new()));
                                    }
                                }
                                Callee::Op(_) => {}
                                Callee::Expr(c) => {
                                    if let Some(f) = self.callee(m, *c) {
                                        if let Some(&p) = m.func(f).params.get(pos) {
                                            stack.push((m.var(p).expr, path.clone()));
                                        }
                                    }
                                }
                            }
                        }
                    }
                    Expr::Let { var, value, body } => {
                        if *value == e {
                            stack.push((m.var(*var).expr, path.clone()));
                        }
                        if *body == e {
                            stack.push((u, path.clone()));
                        }
                    }
                    Expr::Tuple(fields) => {
                        for (i, _) in fields.iter().enumerate().filter(|(_, &f)| f == e) {
                            let mut p = path.clone();
                            p.push(i as u32);
                            stack.push((u, p));
                        }
                    }
                    Expr::Proj { index, .. } => {
                        if let Some((&last, rest)) = path.split_last() {
                            if last == *index {
                                stack.push((u, rest.to_vec()));
                            }
                        }
                    }
                    _ => {}
                }
            }
        }
        role
    }
}

/// Meta table key, index, type and role of a generated constant.
type CacheKey = (String, u32, Shape, String);

/// The address and length of a constant's data, and its type.
type DataKey = (usize, usize, Shape);

/// Weights shared by several modules (a model and its partitioned form): generated tensors are
/// cached by meta table key, index, type and role, so the same constant is made once.
pub struct Weights {
    /// The seed.
    pub seed: u64,
    cache: Mutex<BTreeMap<CacheKey, Arc<Tensor>>>,
    /// Tensors made from constants' data, by the address and length of the data and the type:
    /// every module reading the same bytes (a model and its partitioned forms share their
    /// metadata) gets the same tensor. The entry keeps the bytes, so their address cannot be
    /// reused by other data while it is cached.
    data: Mutex<HashMap<DataKey, (bytes::Bytes, Arc<Tensor>)>>,
}

impl Weights {
    /// An empty store for `seed`.
    pub fn new(seed: u64) -> Weights {
        Weights {
            seed,
            cache: Mutex::new(BTreeMap::new()),
            data: Mutex::new(HashMap::new()),
        }
    }

    /// The constants of one module.
    pub fn for_module<'w>(&'w self, m: &Module) -> ModuleWeights<'w> {
        let uses = Uses::new(m);
        let mut roles = BTreeMap::new();
        for (i, e) in m.exprs.iter().enumerate() {
            if let Expr::Const(Constant::Meta { key, index, .. }) = e {
                let r = uses.role(m, ExprId(i as u32));
                let slot = roles.entry((key.clone(), *index)).or_insert(Role::Uniform);
                *slot = slot.join(r);
            }
        }
        let inputs = m
            .main()
            .map(|f| {
                m.func(f)
                    .params
                    .iter()
                    .map(|&p| (m.var(p).name.clone(), uses.role(m, m.var(p).expr)))
                    .collect()
            })
            .unwrap_or_default();
        ModuleWeights {
            store: self,
            roles,
            inputs,
        }
    }
}

impl Weights {
    /// The bytes of the tensors made so far (constants with data, and generated ones).
    pub fn bytes(&self) -> u64 {
        let data = self.data.lock().unwrap_or_else(|p| p.into_inner());
        let cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        data.values()
            .map(|(_, t)| t.bytes().len() as u64)
            .sum::<u64>()
            + cache.values().map(|t| t.bytes().len() as u64).sum::<u64>()
    }

    /// The tensor of type `shape` holding `bytes`, made once per distinct bytes and type.
    fn of_data(&self, bytes: &bytes::Bytes, shape: &Shape) -> Result<Arc<Tensor>, String> {
        let key = (bytes.as_ptr() as usize, bytes.len(), shape.clone());
        let data = || self.data.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, t)) = data().get(&key) {
            return Ok(t.clone());
        }
        let t = match tensor_of_bytes(bytes, shape) {
            Some(t) => t,
            None => {
                let t = Tensor::from_bytes(shape.dtype, &shape.dims, bytes)
                    .map_err(|e| e.to_string())?;
                crate::util::memory::release(bytes);
                Arc::new(t)
            }
        };
        Ok(data().entry(key).or_insert((bytes.clone(), t)).1.clone())
    }
}

/// The tensors whose storage [`tensor_bytes`] handed out as bytes, by the address of their
/// data: a constant made from such bytes is that tensor, not a copy.
static SHARED: Mutex<Vec<(usize, std::sync::Weak<Tensor>)>> = Mutex::new(Vec::new());

fn shared() -> std::sync::MutexGuard<'static, Vec<(usize, std::sync::Weak<Tensor>)>> {
    SHARED.lock().unwrap_or_else(|p| p.into_inner())
}

/// The bytes of a tensor, as shared bytes that keep the tensor alive and do not copy it (a
/// constant folded by the simplifier becomes the module's metadata so). A store making a
/// constant of type `t.ty()` from these bytes ([`Weights`]) takes `t` itself.
pub fn tensor_bytes(t: Arc<Tensor>) -> bytes::Bytes {
    struct Owner(Arc<Tensor>);
    impl AsRef<[u8]> for Owner {
        fn as_ref(&self) -> &[u8] {
            self.0.bytes()
        }
    }
    let mut s = shared();
    s.retain(|(_, w)| w.strong_count() > 0);
    s.push((t.bytes().as_ptr() as usize, Arc::downgrade(&t)));
    drop(s);
    bytes::Bytes::from_owner(Owner(t))
}

/// The live tensor whose data `bytes` are (all of them, nothing less), if [`tensor_bytes`] made
/// them and it has type `shape`. A live tensor owns its storage, so no other data can lie at
/// its address while it lives.
fn tensor_of_bytes(bytes: &[u8], shape: &Shape) -> Option<Arc<Tensor>> {
    let p = bytes.as_ptr() as usize;
    let s = shared();
    let t = s
        .iter()
        .filter(|(a, _)| *a == p)
        .find_map(|(_, w)| w.upgrade())?;
    (t.bytes().len() == bytes.len() && t.dtype() == shape.dtype && t.shape() == shape.dims)
        .then_some(t)
}

/// The constants of one module, from a [`Weights`] store.
pub struct ModuleWeights<'w> {
    store: &'w Weights,
    roles: BTreeMap<(String, u32), Role>,
    inputs: BTreeMap<String, Role>,
}

impl ModuleWeights<'_> {
    /// The role found for an input of `@main`.
    pub fn input_role(&self, name: &str) -> Role {
        self.inputs.get(name).copied().unwrap_or(Role::Uniform)
    }

    /// The role found for a meta constant.
    pub fn constant_role(&self, key: &str, index: u32) -> Role {
        self.roles
            .get(&(key.to_string(), index))
            .copied()
            .unwrap_or(Role::Uniform)
    }

    /// A random input for the parameter `name` of type `ty`.
    pub fn random_input(&self, name: &str, ty: &Shape) -> Result<Tensor, String> {
        random_tensor(
            ty,
            stream(self.store.seed, &format!("input:{name}"), 0, ty),
            self.input_role(name),
        )
    }
}

/// A scalar literal as a tensor.
pub fn scalar_tensor(value: Scalar, dtype: DType) -> Result<Tensor, String> {
    let r = match value {
        Scalar::Int(v) => Tensor::scalar_int(dtype, v),
        Scalar::Float(v) => Tensor::scalar(dtype, v),
        Scalar::Bool(b) => Tensor::scalar_int(dtype, b as i64),
    };
    r.map_err(|e| e.0)
}

impl ConstantSource for ModuleWeights<'_> {
    fn constant(&self, m: &Module, e: ExprId) -> Result<Arc<Tensor>, String> {
        let c = match m.expr(e) {
            Expr::Const(c) => c,
            _ => return Err("internal error: not a constant".into()),
        };
        match c {
            Constant::Scalar { value, dtype } => Ok(Arc::new(scalar_tensor(*value, *dtype)?)),
            Constant::Meta { key, index, ty } => {
                let shape = Shape::of(ty).ok_or_else(|| {
                    format!("`meta[{key}][{index}]` has type `{ty}`, which is not static")
                })?;
                if let Some(data) = m.meta.data.get(&(key.clone(), *index)) {
                    return self.store.of_data(&data.0, &shape).map_err(|e| {
                        format!("the data of `meta[{key}][{index}]` does not fit its type: {e}")
                    });
                }
                let role = self.constant_role(key, *index);
                let ck = (key.clone(), *index, shape.clone(), format!("{role:?}"));
                let cache = || self.store.cache.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(t) = cache().get(&ck) {
                    return Ok(t.clone());
                }
                // Generated without the lock: generation runs on the rayon pool, whose workers
                // may meanwhile take other jobs that ask for constants (compiling functions in
                // parallel), and would wait forever for a lock held here. Two threads may
                // generate the same tensor; both get identical data (the stream is seeded by
                // the key), and the first one stored is kept.
                let t = Arc::new(random_tensor(
                    &shape,
                    stream(self.store.seed, key, *index as u64, &shape),
                    role,
                )?);
                Ok(cache().entry(ck).or_insert(t).clone())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tensors_own_bytes_give_the_tensor_itself() {
        let w = Weights::new(0);
        let t = Arc::new(Tensor::from_slice(DType::F32, &[2, 2], &[1f32, 2.0, 3.0, 4.0]).unwrap());
        let b = tensor_bytes(t.clone());
        assert_eq!(&b[..], t.bytes());
        let shape = Shape {
            dtype: DType::F32,
            dims: vec![2, 2],
        };
        assert!(Arc::ptr_eq(&w.of_data(&b, &shape).unwrap(), &t));
        // Another type over the same bytes is a copy of its own.
        let flat = Shape {
            dtype: DType::F32,
            dims: vec![4],
        };
        let c = w.of_data(&b, &flat).unwrap();
        assert!(!Arc::ptr_eq(&c, &t));
        assert_eq!(c.bytes(), t.bytes());
        // So are the same bytes copied elsewhere.
        let copy = bytes::Bytes::from(t.bytes().to_vec());
        assert!(!Arc::ptr_eq(&w.of_data(&copy, &shape).unwrap(), &t));
    }

    #[test]
    fn data_constants_are_made_once_per_bytes() {
        let w = Weights::new(0);
        let shape = Shape {
            dtype: DType::F32,
            dims: vec![2],
        };
        let bytes = bytes::Bytes::from(vec![0u8, 0, 128, 63, 0, 0, 0, 64]);
        let a = w.of_data(&bytes, &shape).unwrap();
        // A clone is a view of the same bytes (as a partitioned module's metadata is).
        let b = w.of_data(&bytes.clone(), &shape).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(a.as_slice::<f32>(), &[1.0, 2.0]);
        // Equal bytes elsewhere are other data.
        let other = bytes::Bytes::from(bytes.to_vec());
        assert!(!Arc::ptr_eq(&a, &w.of_data(&other, &shape).unwrap()));
        let wrong = Shape {
            dtype: DType::F32,
            dims: vec![3],
        };
        assert!(w.of_data(&bytes, &wrong).is_err());
    }

    #[test]
    fn roles_follow_values_into_functions() {
        let text = r#"#[version = "0.0.5"]
def @f(%a: Tensor[(4), float32], %v: Tensor[(4), float32]) -> Tensor[(4), float32] {
  %0 = nn.batch_norm(meta[relay.Constant][2] /* ty=Tensor[(1, 4, 2, 2), float32] */, %a, %a, %a, %v);
  %1 = %0.0;
  %2 = sum(%1, axis=[0, 2, 3]);
  %2
}
def @main(%x: Tensor[(1, 3, 8, 8), float32], %i: Tensor[(5), int64]) {
  %0 = nn.conv2d(%x, meta[relay.Constant][0] /* ty=Tensor[(4, 3, 3, 3), float32] */, padding=[1, 1, 1, 1]);
  %1 = @f(meta[relay.Constant][3] /* ty=Tensor[(4), float32] */, meta[relay.Constant][1] /* ty=Tensor[(4), float32] */);
  %2 = take(%1, %i, axis=0);
  (%0, %2)
}"#;
        let m = crate::frontend::relay::load_text(text);
        let w = Weights::new(7);
        let mw = w.for_module(&m);
        assert_eq!(
            mw.constant_role("relay.Constant", 0),
            Role::Weight { fan_in: 27 }
        );
        assert_eq!(mw.constant_role("relay.Constant", 1), Role::Positive);
        assert_eq!(mw.constant_role("relay.Constant", 2), Role::Uniform);
        assert_eq!(mw.constant_role("relay.Constant", 3), Role::Positive);
        assert_eq!(mw.input_role("i"), Role::Index { extent: 4 });
        // Indices normalised by `where`, as ONNX `Gather` imports them, keep the role.
        let onnx = r#"#[version = "0.0.5"]
def @main(%ids: Tensor[(2, 3), int64], %e: Tensor[(10, 4), float32]) {
  %0 = less(%ids, 0i64);
  %1 = add(%ids, 10i64);
  %2 = where(%0, %1, %ids);
  take(%e, %2, axis=0)
}"#;
        let m2 = crate::frontend::relay::load_text(onnx);
        assert_eq!(
            w.for_module(&m2).input_role("ids"),
            Role::Index { extent: 10 }
        );
        let ty = Shape {
            dtype: DType::I64,
            dims: vec![5],
        };
        let idx = mw.random_input("i", &ty).unwrap();
        assert!(idx.as_slice::<i64>().iter().all(|&v| (0..4).contains(&v)));
        // Deterministic, and different for another seed.
        assert_eq!(idx, mw.random_input("i", &ty).unwrap());
        let f = Shape {
            dtype: DType::F32,
            dims: vec![1000],
        };
        let a = random_tensor(&f, 1, Role::Weight { fan_in: 100 }).unwrap();
        assert!(a.as_slice::<f32>().iter().all(|v| v.abs() <= 0.1));
        assert_ne!(
            a,
            random_tensor(&f, 2, Role::Weight { fan_in: 100 }).unwrap()
        );
        let p = random_tensor(&f, 1, Role::Positive).unwrap();
        assert!(p.as_slice::<f32>().iter().all(|&v| (0.5..1.5).contains(&v)));
    }

    /// An integer input that is cast to floats (BERT's attention mask, reshaped first) draws
    /// 0 or 1; one that is also an index keeps the smaller range; a cast between floats or to
    /// an integer type changes nothing.
    #[test]
    fn integers_cast_to_floats_are_flags() {
        let text = r#"#[version = "0.0.5"]
def @main(%mask: Tensor[(1, 64), int64], %both: Tensor[(64), int64], %other: Tensor[(64), int64], %x: Tensor[(64), float32], %e: Tensor[(10, 4), float32]) {
  %0 = reshape(%mask, newshape=[1, 1, 64]);
  %1 = expand_dims(%0, axis=1);
  %2 = cast(%1, dtype="float32");
  %3 = multiply(subtract(1f, %2), -3.40282e+38f);
  %4 = take(%e, %both, axis=0);
  %5 = cast(%both, dtype="float16");
  %6 = cast(%other, dtype="int32");
  %7 = cast(%x, dtype="float16");
  (%3, %4, %5, %6, %7)
}"#;
        let m = crate::frontend::relay::load_text(text);
        let w = Weights::new(3);
        let mw = w.for_module(&m);
        assert_eq!(mw.input_role("mask"), Role::Flag);
        assert_eq!(mw.input_role("both"), Role::Index { extent: 2 });
        assert_eq!(mw.input_role("other"), Role::Uniform);
        assert_eq!(mw.input_role("x"), Role::Uniform);
        let ty = Shape {
            dtype: DType::I64,
            dims: vec![1, 64],
        };
        let mask = mw.random_input("mask", &ty).unwrap();
        let v = mask.as_slice::<i64>();
        assert!(v.iter().all(|&x| x == 0 || x == 1), "{v:?}");
        assert!(v.contains(&0) && v.contains(&1), "{v:?}");
    }

    /// Constants asked for from rayon jobs while other constants are being generated (in
    /// parallel themselves): with the cache locked during generation, a worker waiting for a
    /// stolen piece of its generation could take a job that asks for a constant and wait for
    /// the lock it holds itself, forever (with that lock, this test timed out).
    #[test]
    fn constants_from_parallel_jobs_do_not_deadlock() {
        let n = 4;
        let mut text = String::from("#[version = \"0.0.5\"]\ndef @main() {\n  (");
        for i in 0..n {
            let ty = if i == 0 { "(512, 1024)" } else { "(4, 4)" };
            text.push_str(&format!(
                "meta[relay.Constant][{i}] /* ty=Tensor[{ty}, float32] */, "
            ));
        }
        text.push_str(")\n}\n");
        let m = crate::frontend::relay::load_text(&text);
        let consts: Vec<ExprId> = (0..m.exprs.len() as u32)
            .map(ExprId)
            .filter(|&e| matches!(m.expr(e), Expr::Const(Constant::Meta { .. })))
            .collect();
        assert_eq!(consts.len(), n);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(4)
                .build()
                .unwrap();
            let sum =
                |t: Arc<Tensor>| -> f64 { t.as_slice::<f32>().iter().map(|&v| v as f64).sum() };
            let mut first = None;
            for round in 0..200u64 {
                let w = Weights::new(round % 2);
                let mw = w.for_module(&m);
                let get = |i: usize| sum(mw.constant(&m, consts[i]).unwrap());
                // One worker generates a big constant (in parallel chunks) while another
                // blocks on a small one with a third request queued behind it, and a third
                // worker is free to steal a piece of the generation.
                let sums = pool.install(|| {
                    rayon::join(
                        || get(0),
                        || rayon::join(|| get(1), || rayon::join(|| get(2), || get(3))),
                    )
                });
                if round < 2 {
                    first.get_or_insert_with(Vec::new).push(sums);
                } else {
                    assert_eq!(first.as_ref().unwrap()[(round % 2) as usize], sums);
                }
            }
            let _ = tx.send(());
        });
        rx.recv_timeout(std::time::Duration::from_secs(120))
            .expect("constants generated in parallel jobs finish");
    }
}
