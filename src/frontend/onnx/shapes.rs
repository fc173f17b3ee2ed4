//! Binding the unknown dimensions of a model's inputs, and binding inputs to constants.
//!
//! An input binding `x=1x3x48x192` (the future `--input-shape`) gives an input's whole shape; a
//! symbol binding `batch=1` (the future `--dim`) gives a size to every dimension named `batch`.
//! An input binding wins over symbol bindings on that input, and it does not bind the symbols
//! its axes carry: two axes sharing one symbol (as Paddle exports write) may receive different
//! sizes, and axes without a name are fine. Fixed sizes in the model must agree with an input
//! binding. Whatever is left unknown is one error listing each input with its dimensions.

use super::model::{Dim, Graph, Model, ValueInfo, Weight};
use super::tensor::{element_count, DType, TensorData};
use crate::diag::{Diagnostic, ModelPlace, E3018, E3019, E3020, W3053};
use rustc_hash::FxHashMap;

/// The flag that gives an input's shape, named in messages.
pub const INPUT_SHAPE_FLAG: &str = "--input-shape";
/// The flag that gives a symbol's size, named in messages.
pub const DIM_FLAG: &str = "--dim";

/// Parses `name=1x3x48x192`. The name is everything before the last `=` (ONNX names may hold
/// `:` or `.`); `name=` with nothing after it is a scalar (rank 0).
pub fn parse_input_shape(s: &str) -> Result<(String, Vec<u64>), Diagnostic> {
    let bad = |why: &str| {
        Diagnostic::error(E3018, format!("`{s}` is not an input shape: {why}")).with_note(format!(
            "write {INPUT_SHAPE_FLAG} NAME=D1xD2x..., for example x=1x3x224x224"
        ))
    };
    let Some((name, dims)) = s.rsplit_once('=') else {
        return Err(bad("there is no `=`"));
    };
    if name.is_empty() {
        return Err(bad("the input name is empty"));
    }
    let mut shape = Vec::new();
    if !dims.is_empty() {
        for d in dims.split(['x', 'X', ',']) {
            let n: u64 = d
                .trim()
                .parse()
                .map_err(|_| bad(&format!("`{d}` is not a size")))?;
            shape.push(n);
        }
    }
    check_size(&shape).map_err(|m| bad(&m))?;
    Ok((name.to_string(), shape))
}

/// Parses `symbol=8`.
pub fn parse_dim(s: &str) -> Result<(String, u64), Diagnostic> {
    let bad = |why: &str| {
        Diagnostic::error(E3018, format!("`{s}` is not a dimension binding: {why}"))
            .with_note(format!("write {DIM_FLAG} SYMBOL=SIZE, for example batch=1"))
    };
    let Some((name, n)) = s.rsplit_once('=') else {
        return Err(bad("there is no `=`"));
    };
    if name.is_empty() {
        return Err(bad("the symbol is empty"));
    }
    let n: u64 = n
        .trim()
        .parse()
        .map_err(|_| bad(&format!("`{n}` is not a size")))?;
    check_size(&[n]).map_err(|m| bad(&m))?;
    Ok((name.to_string(), n))
}

fn check_size(shape: &[u64]) -> Result<(), String> {
    let dims: Vec<i64> = shape
        .iter()
        .map(|&d| d.min(i64::MAX as u64) as i64)
        .collect();
    element_count(&dims)
        .map(|_| ())
        .ok_or_else(|| "more than 2^40 elements".to_string())
}

/// Sizes for unknown input dimensions.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Bindings {
    /// Whole shapes of inputs, by ONNX input name.
    pub inputs: Vec<(String, Vec<u64>)>,
    /// Sizes of symbols.
    pub dims: Vec<(String, u64)>,
    /// Shapes of the data files given for inputs: used for inputs [`Bindings::inputs`] does
    /// not size, and checked against `dims` and against each other on named dimensions.
    pub files: Vec<(String, Vec<u64>)>,
}

impl Bindings {
    /// Bindings from the texts of the two flags.
    pub fn parse<'a>(
        input_shapes: impl IntoIterator<Item = &'a str>,
        dims: impl IntoIterator<Item = &'a str>,
    ) -> Result<Bindings, Diagnostic> {
        Ok(Bindings {
            inputs: input_shapes
                .into_iter()
                .map(parse_input_shape)
                .collect::<Result<_, _>>()?,
            dims: dims.into_iter().map(parse_dim).collect::<Result<_, _>>()?,
            files: Vec::new(),
        })
    }
}

/// An input with its static shape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BoundInput {
    /// The ONNX input name.
    pub name: String,
    /// Its element type.
    pub dtype: DType,
    /// Its shape, every dimension known.
    pub shape: Vec<u64>,
}

/// The static shapes of the model's inputs under `bindings`, with warnings for bindings that
/// matched nothing. Errors: a binding for an unknown input, of the wrong rank or against a
/// fixed size (E3019); dimensions left unknown (E3020, one error listing every input).
pub fn bind_inputs(
    model: &Model,
    bindings: &Bindings,
) -> Result<(Vec<BoundInput>, Vec<Diagnostic>), Vec<Diagnostic>> {
    let file = &model.file;
    let place = |name: &str| ModelPlace {
        file: file.clone(),
        tensor: Some(name.to_string()),
        ..ModelPlace::default()
    };
    let mut errors = Vec::new();
    let mut warnings = Vec::new();
    let symbols: FxHashMap<&str, u64> = bindings
        .dims
        .iter()
        .map(|(s, n)| (s.as_str(), *n))
        .collect();
    let mut used_symbols: FxHashMap<&str, bool> = symbols.keys().map(|s| (*s, false)).collect();
    for (name, _) in &bindings.inputs {
        if !model.graph.inputs.iter().any(|i| &i.name == name) {
            let known: Vec<&str> = model.graph.inputs.iter().map(|i| i.name.as_str()).collect();
            errors.push(
                Diagnostic::error(E3019, format!("the model has no input `{name}`"))
                    .with_place(place(name))
                    .with_note(format!("its inputs are: {}", known.join(", "))),
            );
        }
    }
    let mut out = Vec::new();
    let mut unbound = false;
    // The size each named dimension takes in the files read so far, and the input it came from.
    let mut from_files: FxHashMap<&str, (u64, &str)> = FxHashMap::default();
    for input in &model.graph.inputs {
        let dtype = input.dtype.unwrap_or(DType::F32);
        let flag = bindings
            .inputs
            .iter()
            .rev()
            .find(|(n, _)| *n == input.name)
            .map(|(_, s)| s);
        let file = bindings
            .files
            .iter()
            .rev()
            .find(|(n, _)| *n == input.name)
            .map(|(_, s)| s);
        if let (None, Some(shape), Some(dims)) = (flag, file, &input.shape) {
            let named = dims
                .iter()
                .zip(shape)
                .enumerate()
                .filter_map(|(axis, (d, &n))| {
                    if let Dim::Symbol(s) = d {
                        Some((axis, s.as_str(), n))
                    } else {
                        None
                    }
                });
            for (axis, s, n) in named {
                let clash = match (symbols.get(s), from_files.get(s)) {
                    (Some(&v), _) if v != n => Some(format!("`--dim {s}={v}`")),
                    (_, Some(&(v, other))) if v != n => {
                        Some(format!("the file given for input `{other}` ({s} = {v})"))
                    }
                    _ => None,
                };
                if let Some(why) = clash {
                    errors.push(
                        Diagnostic::error(
                            E3019,
                            format!(
                                "the file given for input `{}` has size {n} on axis {axis} \
                                 (`{s}`), which disagrees with {why}",
                                input.name
                            ),
                        )
                        .with_place(place(&input.name)),
                    );
                }
                if let Some(u) = used_symbols.get_mut(s) {
                    *u = true;
                }
                from_files.entry(s).or_insert((n, input.name.as_str()));
            }
        }
        let by = if flag.is_some() {
            "the binding gives"
        } else {
            "the file given for it has"
        };
        if let Some(shape) = flag.or(file) {
            if let Some(dims) = &input.shape {
                if dims.len() != shape.len() {
                    errors.push(
                        Diagnostic::error(
                            E3019,
                            format!(
                                "input `{}` has rank {} ({}) but {by} {} dimensions",
                                input.name,
                                dims.len(),
                                show_dims(dims),
                                shape.len()
                            ),
                        )
                        .with_place(place(&input.name)),
                    );
                    continue;
                }
                for (axis, (d, &n)) in dims.iter().zip(shape).enumerate() {
                    if let Dim::Fixed(f) = d {
                        if *f != n {
                            errors.push(
                                Diagnostic::error(
                                    E3019,
                                    format!(
                                        "input `{}` has size {f} on axis {axis}, but {by} {n}",
                                        input.name
                                    ),
                                )
                                .with_place(place(&input.name)),
                            );
                        }
                    }
                }
            }
            out.push(BoundInput {
                name: input.name.clone(),
                dtype,
                shape: shape.clone(),
            });
            continue;
        }
        let Some(dims) = &input.shape else {
            unbound = true;
            continue;
        };
        let mut shape = Vec::with_capacity(dims.len());
        for d in dims {
            match d {
                Dim::Fixed(n) => shape.push(*n),
                Dim::Symbol(s) => match symbols.get(s.as_str()) {
                    Some(&n) => {
                        used_symbols.insert(s.as_str(), true);
                        shape.push(n);
                    }
                    None => unbound = true,
                },
                Dim::Unknown => unbound = true,
            }
        }
        if shape.len() == dims.len() {
            let i: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
            if element_count(&i).is_none() {
                errors.push(
                    Diagnostic::error(
                        E3019,
                        format!("input `{}` would have more than 2^40 elements", input.name),
                    )
                    .with_place(place(&input.name)),
                );
            }
            out.push(BoundInput {
                name: input.name.clone(),
                dtype,
                shape,
            });
        }
    }
    if unbound {
        errors.push(unbound_error(model, bindings, &symbols));
    }
    for (s, used) in used_symbols {
        if !used && !model.graph.inputs.iter().any(|i| has_symbol(i, s)) {
            warnings.push(
                Diagnostic::warning(W3053, format!("no input has a dimension named `{s}`"))
                    .with_place(ModelPlace {
                        file: file.clone(),
                        ..ModelPlace::default()
                    }),
            );
        }
    }
    warnings.sort_by(|a, b| a.message.cmp(&b.message));
    if errors.is_empty() {
        Ok((out, warnings))
    } else {
        Err(errors)
    }
}

fn has_symbol(v: &ValueInfo, s: &str) -> bool {
    v.shape
        .iter()
        .flatten()
        .any(|d| matches!(d, Dim::Symbol(x) if x == s))
}

fn show_dims(dims: &[Dim]) -> String {
    let parts: Vec<String> = dims.iter().map(Dim::to_string).collect();
    format!("[{}]", parts.join(", "))
}

fn unbound_error(model: &Model, bindings: &Bindings, symbols: &FxHashMap<&str, u64>) -> Diagnostic {
    let mut d =
        Diagnostic::error(E3020, "some input dimensions have no size").with_place(ModelPlace {
            file: model.file.clone(),
            ..ModelPlace::default()
        });
    for input in &model.graph.inputs {
        let bound = bindings
            .inputs
            .iter()
            .chain(&bindings.files)
            .any(|(n, _)| *n == input.name);
        let dims = match &input.shape {
            Some(dims) => show_dims(dims),
            None => "unknown rank".to_string(),
        };
        let open = !bound
            && input.shape.as_ref().is_none_or(|ds| {
                ds.iter().any(|d| match d {
                    Dim::Fixed(_) => false,
                    Dim::Symbol(s) => !symbols.contains_key(s.as_str()),
                    Dim::Unknown => true,
                })
            });
        let state = if bound {
            "bound"
        } else if open {
            "unbound"
        } else {
            "complete"
        };
        d = d.with_note(format!(
            "input `{}`: {} {dims} ({state})",
            input.name,
            input.dtype.map(DType::name).unwrap_or("?")
        ));
    }
    d.with_note(format!(
        "give whole shapes with {INPUT_SHAPE_FLAG} NAME=1x3x224x224, or sizes of named \
         dimensions with {DIM_FLAG} SYMBOL=N"
    ))
}

/// Binds inputs to constants: each input for which `value` returns a tensor becomes a weight
/// (removed from the inputs). The tensor's type must be the input's, and its shape must fit the
/// input's declared dimensions (fixed sizes equal, symbols and unknown sizes free).
pub fn bind_constants(
    model: &mut Model,
    mut value: impl FnMut(&str) -> Option<TensorData>,
) -> Result<(), Vec<Diagnostic>> {
    let mut errors = Vec::new();
    let Graph {
        inputs, weights, ..
    } = &mut model.graph;
    let mut kept = Vec::with_capacity(inputs.len());
    for input in inputs.drain(..) {
        let Some(t) = value(&input.name) else {
            kept.push(input);
            continue;
        };
        let place = ModelPlace {
            file: model.file.clone(),
            tensor: Some(input.name.clone()),
            ..ModelPlace::default()
        };
        if input.dtype.is_some_and(|d| d != t.dtype) {
            errors.push(
                Diagnostic::error(
                    E3019,
                    format!(
                        "input `{}` is {} but its constant is {}",
                        input.name,
                        input.dtype.unwrap().name(),
                        t.dtype.name()
                    ),
                )
                .with_place(place),
            );
            kept.push(input);
            continue;
        }
        if let Some(dims) = &input.shape {
            let fits = dims.len() == t.shape.len()
                && dims
                    .iter()
                    .zip(&t.shape)
                    .all(|(d, &n)| !matches!(d, Dim::Fixed(f) if *f != n));
            if !fits {
                errors.push(
                    Diagnostic::error(
                        E3019,
                        format!(
                            "input `{}` has shape {} but its constant has shape {:?}",
                            input.name,
                            show_dims(dims),
                            t.shape
                        ),
                    )
                    .with_place(place),
                );
                kept.push(input);
                continue;
            }
        }
        weights.push(Weight {
            name: input.name,
            data: t,
            constant_node: None,
        });
    }
    *inputs = kept;
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_shapes_and_dims_parse() {
        assert_eq!(
            parse_input_shape("x=1x3x48x192").unwrap(),
            ("x".into(), vec![1, 3, 48, 192])
        );
        assert_eq!(
            parse_input_shape("onnx::a=b=2").unwrap(),
            ("onnx::a=b".into(), vec![2])
        );
        assert_eq!(parse_input_shape("s=").unwrap(), ("s".into(), vec![]));
        assert_eq!(parse_dim("batch=8").unwrap(), ("batch".into(), 8));
        for bad in [
            "x",
            "=1x2",
            "x=1xx2",
            "x=-1",
            "x=1x",
            "x=4294967296x4294967296",
        ] {
            assert_eq!(parse_input_shape(bad).unwrap_err().code, E3018, "{bad}");
        }
        for bad in ["batch", "=3", "b=x", "b=4611686018427387904"] {
            assert_eq!(parse_dim(bad).unwrap_err().code, E3018, "{bad}");
        }
    }
}
