//! Evaluating compiled predicates against the nodes a match bound to its captures.
//!
//! Values are integers, floats, strings, booleans, dtypes, lists and nodes. An attribute that is
//! unset (`None`, an empty dtype) or a property that cannot be known (the dtype of a tuple) is
//! *unknown*: comparisons with it are false, arithmetic on it stays unknown, and a predicate that
//! ends unknown does not hold. `&&` and `||` short-circuit.

use super::graph::DataflowGraph;
use crate::ir::{AttrValue, Callee, Constant, DType, Dim, Expr, Scalar, Type};
use crate::ops::registry;
use crate::rules::dsl::ast::{BinOp, UnOp};
use crate::rules::ruletree::{Builtin, Lit, Pred, Prop};

#[derive(Clone, Debug, PartialEq)]
enum V {
    Int(i64),
    Float(f64),
    Str(String),
    Bool(bool),
    DType(DType),
    List(Vec<V>),
    Node(usize),
    Unknown,
}

/// Whether the predicate holds with the given capture bindings (by capture id).
pub(crate) fn holds(g: &DataflowGraph<'_>, p: &Pred, caps: &[Option<usize>]) -> bool {
    eval(g, p, caps) == V::Bool(true)
}

fn eval(g: &DataflowGraph<'_>, p: &Pred, caps: &[Option<usize>]) -> V {
    match p {
        Pred::Lit(l) => match l {
            Lit::Int(v) => V::Int(*v),
            Lit::Float(v) => V::Float(*v),
            Lit::Str(s) => V::Str(s.clone()),
            Lit::Bool(b) => V::Bool(*b),
            Lit::DType(d) => V::DType(*d),
        },
        Pred::Capture(i) => caps
            .get(*i as usize)
            .copied()
            .flatten()
            .map_or(V::Unknown, V::Node),
        Pred::Prop(b, prop) => match eval(g, b, caps) {
            V::Node(n) => prop_of(g, n, *prop),
            _ => V::Unknown,
        },
        Pred::Attr(b, name) => match eval(g, b, caps) {
            V::Node(n) => attr_of(g, n, name),
            _ => V::Unknown,
        },
        Pred::Arg(b, i) => match (eval(g, b, caps), eval(g, i, caps)) {
            (V::Node(n), V::Int(i)) => arg_of(g, n, i),
            _ => V::Unknown,
        },
        Pred::Index(b, i) => match (eval(g, b, caps), eval(g, i, caps)) {
            (V::List(items), V::Int(i)) => {
                let len = items.len() as i64;
                let k = if i < 0 { len + i } else { i };
                if (0..len).contains(&k) {
                    items[k as usize].clone()
                } else {
                    V::Unknown
                }
            }
            _ => V::Unknown,
        },
        Pred::List(items) => V::List(items.iter().map(|x| eval(g, x, caps)).collect()),
        Pred::Unary(op, x) => match (op, eval(g, x, caps)) {
            (UnOp::Not, V::Bool(b)) => V::Bool(!b),
            (UnOp::Neg, V::Int(v)) => V::Int(v.saturating_neg()),
            (UnOp::Neg, V::Float(v)) => V::Float(-v),
            _ => V::Unknown,
        },
        Pred::Binary(op, a, b) => binary(g, *op, a, b, caps),
        Pred::Call(f, args) => {
            let Some(V::List(items)) = args.first().map(|a| eval(g, a, caps)) else {
                return V::Unknown;
            };
            builtin(*f, &items)
        }
    }
}

fn binary(g: &DataflowGraph<'_>, op: BinOp, a: &Pred, b: &Pred, caps: &[Option<usize>]) -> V {
    match op {
        BinOp::And => match eval(g, a, caps) {
            V::Bool(false) => V::Bool(false),
            V::Bool(true) => match eval(g, b, caps) {
                V::Bool(x) => V::Bool(x),
                _ => V::Unknown,
            },
            _ => V::Unknown,
        },
        BinOp::Or => match eval(g, a, caps) {
            V::Bool(true) => V::Bool(true),
            V::Bool(false) => match eval(g, b, caps) {
                V::Bool(x) => V::Bool(x),
                _ => V::Unknown,
            },
            _ => V::Unknown,
        },
        _ => {
            let (x, y) = (eval(g, a, caps), eval(g, b, caps));
            if x == V::Unknown || y == V::Unknown {
                return match op {
                    BinOp::Eq
                    | BinOp::Ne
                    | BinOp::Lt
                    | BinOp::Le
                    | BinOp::Gt
                    | BinOp::Ge
                    | BinOp::In => V::Bool(false),
                    _ => V::Unknown,
                };
            }
            match op {
                BinOp::Eq => V::Bool(equal(&x, &y)),
                BinOp::Ne => V::Bool(!equal(&x, &y)),
                BinOp::In => match y {
                    V::List(items) => V::Bool(items.iter().any(|i| equal(&x, i))),
                    _ => V::Bool(false),
                },
                BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge => match (num(&x), num(&y)) {
                    (Some(p), Some(q)) => V::Bool(match op {
                        BinOp::Lt => p < q,
                        BinOp::Le => p <= q,
                        BinOp::Gt => p > q,
                        _ => p >= q,
                    }),
                    _ => V::Bool(false),
                },
                _ => arith(op, &x, &y),
            }
        }
    }
}

fn num(v: &V) -> Option<f64> {
    match v {
        V::Int(i) => Some(*i as f64),
        V::Float(f) => Some(*f),
        _ => None,
    }
}

fn equal(a: &V, b: &V) -> bool {
    match (a, b) {
        (V::Int(_) | V::Float(_), V::Int(_) | V::Float(_)) => num(a) == num(b),
        (V::List(x), V::List(y)) => x.len() == y.len() && x.iter().zip(y).all(|(p, q)| equal(p, q)),
        (V::Unknown, _) | (_, V::Unknown) => false,
        _ => a == b,
    }
}

fn arith(op: BinOp, x: &V, y: &V) -> V {
    match (x, y) {
        (V::Int(a), V::Int(b)) => match op {
            BinOp::Add => a.checked_add(*b).map_or(V::Unknown, V::Int),
            BinOp::Sub => a.checked_sub(*b).map_or(V::Unknown, V::Int),
            BinOp::Mul => a.checked_mul(*b).map_or(V::Unknown, V::Int),
            BinOp::Div => a.checked_div(*b).map_or(V::Unknown, V::Int),
            BinOp::Rem => a.checked_rem(*b).map_or(V::Unknown, V::Int),
            _ => V::Unknown,
        },
        _ => match (num(x), num(y)) {
            (Some(a), Some(b)) => V::Float(match op {
                BinOp::Add => a + b,
                BinOp::Sub => a - b,
                BinOp::Mul => a * b,
                BinOp::Div => a / b,
                BinOp::Rem => a % b,
                _ => return V::Unknown,
            }),
            _ => V::Unknown,
        },
    }
}

fn builtin(f: Builtin, items: &[V]) -> V {
    match f {
        Builtin::Len => V::Int(items.len() as i64),
        Builtin::All => V::Bool(items.iter().all(|v| *v == V::Bool(true))),
        Builtin::Any => V::Bool(items.contains(&V::Bool(true))),
        Builtin::Sum | Builtin::Product | Builtin::Min | Builtin::Max => {
            if items.iter().any(|v| !matches!(v, V::Int(_) | V::Float(_))) {
                return V::Unknown;
            }
            let all_int = items.iter().all(|v| matches!(v, V::Int(_)));
            if all_int {
                let mut ints =
                    items
                        .iter()
                        .filter_map(|v| if let V::Int(i) = v { Some(*i) } else { None });
                let r = match f {
                    Builtin::Sum => ints.try_fold(0i64, |a, b| a.checked_add(b)),
                    Builtin::Product => ints.try_fold(1i64, |a, b| a.checked_mul(b)),
                    Builtin::Min => ints.min(),
                    _ => ints.max(),
                };
                r.map_or(V::Unknown, V::Int)
            } else {
                let fs = items.iter().filter_map(num);
                V::Float(match f {
                    Builtin::Sum => fs.sum(),
                    Builtin::Product => fs.product(),
                    Builtin::Min => fs.fold(f64::INFINITY, f64::min),
                    _ => fs.fold(f64::NEG_INFINITY, f64::max),
                })
            }
        }
    }
}

fn prop_of(g: &DataflowGraph<'_>, n: usize, prop: Prop) -> V {
    let Some(e) = g.expr(n) else {
        return V::Unknown;
    };
    match (prop, g.module.expr(e)) {
        (Prop::IsConst, x) => return V::Bool(matches!(x, Expr::Const(_))),
        (Prop::Value, Expr::Const(Constant::Scalar { value, .. })) => {
            return match value {
                Scalar::Float(f) => V::Float(*f),
                Scalar::Int(i) => V::Int(*i),
                _ => V::Unknown,
            }
        }
        (Prop::Value, _) => return V::Unknown,
        _ => {}
    }
    let Some(Type::Tensor(t)) = g.module.ty(e) else {
        return V::Unknown;
    };
    match prop {
        Prop::DType => V::DType(t.dtype),
        Prop::Rank => V::Int(t.rank() as i64),
        Prop::Shape => V::List(
            t.shape
                .iter()
                .map(|d| match d {
                    Dim::Fixed(v) => V::Int(*v),
                    _ => V::Int(-1),
                })
                .collect(),
        ),
        Prop::IsConst | Prop::Value => V::Unknown,
    }
}

fn attr_of(g: &DataflowGraph<'_>, n: usize, name: &str) -> V {
    let Some(e) = g.expr(n) else {
        return V::Unknown;
    };
    let Expr::Call {
        callee: Callee::Op(op),
        attrs,
        ..
    } = g.module.expr(e)
    else {
        return V::Unknown;
    };
    let def = registry().get(*op);
    let is_dtype = def
        .attr_field(name)
        .is_some_and(|f| f.ty == crate::ir::AttrType::DType);
    match attrs.get(def.attrs, name) {
        Some(v) if is_dtype => match v.as_str().and_then(DType::parse) {
            Some(d) => V::DType(d),
            None => V::Unknown,
        },
        Some(v) => from_attr(v),
        None => V::Unknown,
    }
}

fn from_attr(v: &AttrValue) -> V {
    match v {
        AttrValue::Int(i, _) => V::Int(*i),
        AttrValue::Float(f, _) => V::Float(*f),
        AttrValue::Bool(b) => V::Bool(*b),
        AttrValue::Str(s) => V::Str(s.clone()),
        AttrValue::Array(items) => V::List(items.iter().map(from_attr).collect()),
        AttrValue::None => V::Unknown,
        AttrValue::Device(_) | AttrValue::Meta(..) => V::Unknown,
    }
}

fn arg_of(g: &DataflowGraph<'_>, n: usize, i: i64) -> V {
    let Some(e) = g.expr(n) else {
        return V::Unknown;
    };
    let Expr::Call { args, .. } = g.module.expr(e) else {
        return V::Unknown;
    };
    usize::try_from(i)
        .ok()
        .and_then(|i| args.get(i))
        .and_then(|a| g.node(*a))
        .map_or(V::Unknown, V::Node)
}
