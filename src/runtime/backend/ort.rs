//! ONNX Runtime sessions: an ONNX model opened with the library [`crate::runtime::ffi::ort`] loads, run
//! on collage's tensors; the yardstick `collage bench` compares with.
//!
//! [`Session`] opens an ONNX file with the CPU execution provider and collage's fixed settings
//! ([`Settings`]: all graph optimizations, intra-op threads N, inter-op threads 1, sequential
//! execution, spinning off) and runs it on named tensors ([`Tensor`]: dtype, shape, bytes);
//! ONNX Runtime's error messages become diagnostics E2441-E2444. docs/backends.md, "ONNX
//! Runtime", says why these settings.
//!
//! Every file goes through collage's own ONNX importer ([`crate::frontend::onnx::load_file`]) before
//! ONNX Runtime opens it, and is refused with the importer's first error: ONNX Runtime opening
//! a model by path reads external data at any location, which the importer refuses (E3013).

use crate::diag::{self as codes, Diagnostic};
use crate::ir::DType;
use crate::runtime::exec::tensor::{Tensor, U16, U32, U64};
use crate::runtime::ffi::ort::OnnxRuntime;
use half::f16;
use ort::value::{DynValue, TensorElementType, ValueType};
use std::path::{Path, PathBuf};

/// How a session runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settings {
    /// Intra-op threads (ONNX Runtime's pool: the calling thread and N − 1 workers).
    pub intra_threads: usize,
    /// Whether ONNX Runtime's threads spin while waiting for work (`session.intra_op.
    /// allow_spinning`, `session.inter_op.allow_spinning`). On by default, as in ONNX
    /// Runtime: see docs/backends.md, "Thread pools".
    pub spinning: bool,
}

impl Settings {
    /// N intra-op threads, spinning on (ONNX Runtime's default).
    pub fn threads(n: usize) -> Settings {
        Settings {
            intra_threads: n.max(1),
            spinning: true,
        }
    }

    /// The session configuration entries these settings set, as `(key, value)`: also what
    /// `tests/onnx/time_ort.py` sets.
    pub fn config_entries(&self) -> [(&'static str, &'static str); 2] {
        let v = if self.spinning { "1" } else { "0" };
        [
            ("session.intra_op.allow_spinning", v),
            ("session.inter_op.allow_spinning", v),
        ]
    }
}

/// One input or output of a model, as ONNX Runtime sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Port {
    /// Its name.
    pub name: String,
    /// Its element type, for a tensor of a supported dtype ([`dtype_of`]).
    pub dtype: Option<DType>,
    /// ONNX Runtime's name of its type: `tensor(float)`, `seq(tensor(int64))`.
    pub kind: String,
    /// The extents, `None` for a symbolic or unknown one (tensors only).
    pub dims: Vec<Option<usize>>,
}

/// An open ONNX model.
pub struct Session {
    inner: ort::session::Session,
    model: PathBuf,
    inputs: Vec<Port>,
    outputs: Vec<Port>,
    settings: Settings,
}

/// Inputs converted once to ONNX Runtime's values, to be run many times.
pub struct Inputs {
    values: Vec<(String, DynValue)>,
}

/// The collage dtype of an ONNX Runtime element type, if collage has it.
pub fn dtype_of(t: TensorElementType) -> Option<DType> {
    Some(match t {
        TensorElementType::Float32 => DType::F32,
        TensorElementType::Float16 => DType::F16,
        TensorElementType::Float64 => DType::F64,
        TensorElementType::Int8 => DType::I8,
        TensorElementType::Int16 => DType::I16,
        TensorElementType::Int32 => DType::I32,
        TensorElementType::Int64 => DType::I64,
        TensorElementType::Uint8 => DType::U8,
        TensorElementType::Uint16 => U16,
        TensorElementType::Uint32 => U32,
        TensorElementType::Uint64 => U64,
        TensorElementType::Bool => DType::BOOL,
        _ => return None,
    })
}

fn kind_of(t: &ValueType) -> String {
    t.to_string()
}

fn port(name: &str, t: &ValueType) -> Port {
    match t {
        ValueType::Tensor { ty, shape, .. } => Port {
            name: name.to_string(),
            dtype: dtype_of(*ty),
            kind: kind_of(t),
            dims: shape.iter().map(|&d| usize::try_from(d).ok()).collect(),
        },
        _ => Port {
            name: name.to_string(),
            dtype: None,
            kind: kind_of(t),
            dims: Vec::new(),
        },
    }
}

impl Session {
    /// Opens `model` with the CPU execution provider, all graph optimizations
    /// (`ORT_ENABLE_ALL`), `settings.intra_threads` intra-op threads, one inter-op thread,
    /// sequential execution and the spinning policy of `settings`.
    ///
    /// The model goes through collage's own importer first ([`crate::frontend::onnx::load_file`]) and is
    /// refused with its first error when the importer refuses it: ONNX Runtime opening a model
    /// by path reads external data at any location (an absolute path, outside the model's
    /// folder, through a symbolic link out), which collage's importer refuses (E3013).
    pub fn open(rt: &OnnxRuntime, model: &Path, settings: Settings) -> Result<Session, Diagnostic> {
        if let Err(ds) = crate::frontend::onnx::load_file(model) {
            let first = ds
                .iter()
                .position(|d| d.severity == crate::diag::Severity::Error)
                .unwrap_or(0);
            if let Some(d) = ds.into_iter().nth(first) {
                return Err(d.with_note(
                    "ONNX Runtime is given only models collage's ONNX importer accepts",
                ));
            }
        }
        let fail = |e: String| {
            Diagnostic::error(
                codes::E2441,
                format!("ONNX Runtime cannot open `{}`", model.display()),
            )
            .with_note(e)
        };
        let fail_at = |e: ort::Error<ort::session::builder::SessionBuilder>| fail(e.to_string());
        let mut builder = ort::session::Session::builder(rt.environment())
            .map_err(|e| fail(e.to_string()))?
            .with_optimization_level(ort::session::builder::GraphOptimizationLevel::All)
            .map_err(fail_at)?
            .with_intra_threads(settings.intra_threads.max(1))
            .map_err(fail_at)?
            .with_inter_threads(1)
            .map_err(fail_at)?
            .with_parallel_execution(false)
            .map_err(fail_at)?;
        for (k, v) in settings.config_entries() {
            builder = builder.with_config_entry(k, v).map_err(fail_at)?;
        }
        let inner = builder
            .commit_from_file(model)
            .map_err(|e| fail(e.to_string()))?;
        let inputs = inner
            .inputs()
            .iter()
            .map(|o| port(o.name(), o.dtype()))
            .collect();
        let outputs = inner
            .outputs()
            .iter()
            .map(|o| port(o.name(), o.dtype()))
            .collect();
        Ok(Session {
            inner,
            model: model.to_path_buf(),
            inputs,
            outputs,
            settings,
        })
    }

    /// The model's inputs.
    pub fn inputs(&self) -> &[Port] {
        &self.inputs
    }

    /// The model's outputs.
    pub fn outputs(&self) -> &[Port] {
        &self.outputs
    }

    /// The settings the session was opened with.
    pub fn settings(&self) -> Settings {
        self.settings
    }

    fn bad_input(&self, message: String) -> Diagnostic {
        Diagnostic::error(codes::E2443, message)
            .with_note(format!("model: `{}`", self.model.display()))
    }

    /// Checks `inputs` against the model's (every input once, by name, of its dtype, rank and
    /// fixed extents) and converts them to ONNX Runtime's values.
    pub fn prepare(&self, inputs: &[(&str, &Tensor)]) -> Result<Inputs, Diagnostic> {
        let mut values = Vec::with_capacity(inputs.len());
        for (i, (name, t)) in inputs.iter().enumerate() {
            let Some(port) = self.inputs.iter().find(|p| p.name == *name) else {
                let names: Vec<&str> = self.inputs.iter().map(|p| p.name.as_str()).collect();
                return Err(self.bad_input(format!(
                    "the model has no input `{name}` (its inputs: {})",
                    names.join(", ")
                )));
            };
            if inputs[..i].iter().any(|(n, _)| n == name) {
                return Err(self.bad_input(format!("the input `{name}` is given twice")));
            }
            if port.dtype != Some(t.dtype()) {
                return Err(self.bad_input(format!(
                    "the input `{name}` is a `{}`, the model wants {}",
                    t.dtype(),
                    port.kind
                )));
            }
            let fits = port.dims.len() == t.shape().len()
                && port
                    .dims
                    .iter()
                    .zip(t.shape())
                    .all(|(d, &s)| d.is_none_or(|d| d == s));
            if !fits {
                let want: Vec<String> = port
                    .dims
                    .iter()
                    .map(|d| d.map_or("?".to_string(), |d| d.to_string()))
                    .collect();
                return Err(self.bad_input(format!(
                    "the input `{name}` has shape {:?}, the model wants [{}]",
                    t.shape(),
                    want.join(", ")
                )));
            }
            let v = to_value(t).map_err(|e| {
                self.bad_input(format!("the input `{name}` cannot be passed ({e})"))
            })?;
            values.push((name.to_string(), v));
        }
        if let Some(p) = self
            .inputs
            .iter()
            .find(|p| !inputs.iter().any(|(n, _)| *n == p.name))
        {
            return Err(self.bad_input(format!("the input `{}` is missing", p.name)));
        }
        Ok(Inputs { values })
    }

    /// Runs the model on prepared inputs: every output, in the model's order.
    pub fn run_prepared(&mut self, inputs: &Inputs) -> Result<Vec<(String, Tensor)>, Diagnostic> {
        let feed: Vec<(&str, &DynValue)> =
            inputs.values.iter().map(|(n, v)| (n.as_str(), v)).collect();
        let model = self.model.clone();
        let outputs = self.inner.run(feed).map_err(|e| {
            Diagnostic::error(
                codes::E2442,
                format!("ONNX Runtime failed to run `{}`", model.display()),
            )
            .with_note(e.to_string())
        })?;
        let mut out = Vec::with_capacity(outputs.len());
        for (name, value) in &outputs {
            let t = from_value(&value).map_err(|e| {
                Diagnostic::error(
                    codes::E2444,
                    format!("the output `{name}` of ONNX Runtime cannot be read ({e})"),
                )
                .with_note(format!("model: `{}`", model.display()))
            })?;
            out.push((name.to_string(), t));
        }
        Ok(out)
    }

    /// Runs the model on named inputs: every output, in the model's order.
    pub fn run(&mut self, inputs: &[(&str, &Tensor)]) -> Result<Vec<(String, Tensor)>, Diagnostic> {
        let prepared = self.prepare(inputs)?;
        self.run_prepared(&prepared)
    }
}

/// A collage tensor as an ONNX Runtime value (its bytes copied once).
fn to_value(t: &Tensor) -> Result<DynValue, String> {
    let shape: Vec<i64> = t.shape().iter().map(|&d| d as i64).collect();
    macro_rules! typed {
        ($ty:ty) => {
            ort::value::Tensor::<$ty>::from_array((shape, t.as_slice::<$ty>().to_vec()))
                .map(|v| v.into_dyn())
                .map_err(|e| e.to_string())
        };
    }
    let d = t.dtype();
    match d {
        _ if d == DType::F32 => typed!(f32),
        _ if d == DType::F16 => typed!(f16),
        _ if d == DType::F64 => typed!(f64),
        _ if d == DType::I8 => typed!(i8),
        _ if d == DType::I16 => typed!(i16),
        _ if d == DType::I32 => typed!(i32),
        _ if d == DType::I64 => typed!(i64),
        _ if d == DType::U8 => typed!(u8),
        _ if d == U16 => typed!(u16),
        _ if d == U32 => typed!(u32),
        _ if d == U64 => typed!(u64),
        _ if d == DType::BOOL => {
            let data: Vec<bool> = t.bytes().iter().map(|&b| b != 0).collect();
            ort::value::Tensor::<bool>::from_array((shape, data))
                .map(|v| v.into_dyn())
                .map_err(|e| e.to_string())
        }
        _ => Err(format!("ONNX Runtime takes no `{d}` tensors from collage")),
    }
}

/// An ONNX Runtime output as a collage tensor (its bytes copied).
fn from_value(v: &ort::value::DynValueRef<'_>) -> Result<Tensor, String> {
    let ValueType::Tensor { ty, shape, .. } = v.dtype() else {
        return Err(format!("it is a {}, not a tensor", v.dtype()));
    };
    let Some(dtype) = dtype_of(*ty) else {
        return Err(format!("its element type {ty} is not supported"));
    };
    let dims: Vec<usize> = shape
        .iter()
        .map(|&d| usize::try_from(d).map_err(|_| format!("its shape {shape:?} is not concrete")))
        .collect::<Result<_, _>>()?;
    let err = |e: ort::Error| e.to_string();
    let terr = |e: crate::runtime::exec::tensor::TensorError| e.0;
    macro_rules! typed {
        ($ty:ty) => {{
            let (_, data) = v.try_extract_tensor::<$ty>().map_err(err)?;
            Tensor::from_slice(dtype, &dims, data).map_err(terr)
        }};
    }
    match *ty {
        TensorElementType::Float32 => typed!(f32),
        TensorElementType::Float16 => typed!(f16),
        TensorElementType::Float64 => typed!(f64),
        TensorElementType::Int8 => typed!(i8),
        TensorElementType::Int16 => typed!(i16),
        TensorElementType::Int32 => typed!(i32),
        TensorElementType::Int64 => typed!(i64),
        TensorElementType::Uint8 => typed!(u8),
        TensorElementType::Uint16 => typed!(u16),
        TensorElementType::Uint32 => typed!(u32),
        TensorElementType::Uint64 => typed!(u64),
        TensorElementType::Bool => {
            let (_, data) = v.try_extract_tensor::<bool>().map_err(err)?;
            let bytes: Vec<u8> = data.iter().map(|&b| u8::from(b)).collect();
            Tensor::from_bytes(DType::BOOL, &dims, &bytes).map_err(terr)
        }
        _ => Err(format!("its element type {ty} is not supported")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_spin_by_default_and_can_turn_spinning_off() {
        let s = Settings::threads(0);
        assert_eq!(s.intra_threads, 1);
        assert_eq!(
            s.config_entries(),
            [
                ("session.intra_op.allow_spinning", "1"),
                ("session.inter_op.allow_spinning", "1")
            ]
        );
        let off = Settings {
            spinning: false,
            ..s
        };
        assert_eq!(
            off.config_entries(),
            [
                ("session.intra_op.allow_spinning", "0"),
                ("session.inter_op.allow_spinning", "0")
            ]
        );
    }

    #[test]
    fn the_dtypes_collage_has_map_both_ways() {
        for (t, d) in [
            (TensorElementType::Float32, DType::F32),
            (TensorElementType::Float16, DType::F16),
            (TensorElementType::Float64, DType::F64),
            (TensorElementType::Int8, DType::I8),
            (TensorElementType::Uint8, DType::U8),
            (TensorElementType::Int32, DType::I32),
            (TensorElementType::Int64, DType::I64),
            (TensorElementType::Bool, DType::BOOL),
        ] {
            assert_eq!(dtype_of(t), Some(d));
        }
        assert_eq!(dtype_of(TensorElementType::String), None);
        assert_eq!(dtype_of(TensorElementType::Bfloat16), None);
    }
}
