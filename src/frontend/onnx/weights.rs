//! Tensor data out of `TensorProto`s: `raw_data` as a view into the mapped file, ONNX's typed
//! fields converted once, and external data files mapped and checked (the location must stay in
//! the model's folder, the range inside the file, the length equal to dtype × shape).

use super::proto::{tensor_proto, TensorProto};
use super::tensor::{element_count, onnx_type_name, DType, TensorData};
use crate::diag::{Code, Diagnostic, ModelPlace, E3010, E3011, E3012, E3013, E3014, E3015, E3016};
use bytes::Bytes;
use rustc_hash::FxHashMap;
use std::path::{Component, Path, PathBuf};

/// Reads tensor data for one load: knows the model's folder and keeps each external data file
/// mapped once.
pub(crate) struct TensorReader {
    base_dir: Option<PathBuf>,
    /// The canonical model folder, computed on first use.
    canonical_base: Option<PathBuf>,
    mapped: FxHashMap<PathBuf, Bytes>,
}

/// Why a tensor could not be read: a code and a message; the caller adds the place.
pub(crate) type TensorError = (Code, String);

impl TensorReader {
    pub(crate) fn new(base_dir: Option<PathBuf>) -> TensorReader {
        TensorReader {
            base_dir,
            canonical_base: None,
            mapped: FxHashMap::default(),
        }
    }

    /// The data of `t`, whose name for messages is `what`.
    pub(crate) fn read(&mut self, t: &TensorProto) -> Result<TensorData, TensorError> {
        let code = t.data_type.unwrap_or(0);
        let Some(dtype) = DType::from_onnx(code) else {
            return Err((
                E3010,
                format!("tensors of type {} are not supported", onnx_type_name(code)),
            ));
        };
        let Some(count) = element_count(&t.dims) else {
            return Err((E3011, shape_message(&t.dims)));
        };
        let shape: Vec<u64> = t.dims.iter().map(|&d| d as u64).collect();
        if t.segment.is_some() {
            return Err((E3016, "segmented tensors are not supported".into()));
        }
        let mismatch = |expected: u64, got: u64, unit: &str| {
            (
                E3012,
                format!(
                    "{} {:?} needs {expected} {unit} but the data hold {got}",
                    dtype.name(),
                    t.dims
                ),
            )
        };
        if t.data_location == Some(tensor_proto::DataLocation::External as i32) {
            let data = self.external(t)?;
            let len = data.len() as u64;
            return TensorData::new(dtype, shape, data).map_err(|e| mismatch(e, len, "bytes"));
        }
        if let Some(raw) = &t.raw_data {
            let len = raw.len() as u64;
            return TensorData::new(dtype, shape, raw.clone())
                .map_err(|e| mismatch(e, len, "bytes"));
        }
        // The typed fields. Their lengths were paid for by the file's bytes; the element count
        // is checked against the shape before anything is converted.
        let held = match dtype {
            DType::F32 => t.float_data.len(),
            DType::F64 => t.double_data.len(),
            DType::I64 => t.int64_data.len(),
            DType::U32 | DType::U64 => t.uint64_data.len(),
            _ => t.int32_data.len(),
        } as u64;
        if held != count {
            return Err(mismatch(count, held, "elements"));
        }
        let mut out = Vec::with_capacity(count as usize * dtype.size());
        match dtype {
            DType::F32 => t
                .float_data
                .iter()
                .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
            DType::F64 => t
                .double_data
                .iter()
                .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
            DType::I64 => t
                .int64_data
                .iter()
                .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
            DType::U64 => t
                .uint64_data
                .iter()
                .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
            DType::U32 => t
                .uint64_data
                .iter()
                .for_each(|&x| out.extend_from_slice(&(x as u32).to_le_bytes())),
            DType::I32 => t
                .int32_data
                .iter()
                .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
            // 16-bit types (float16 and bfloat16 as their bit patterns) in the low half.
            DType::I16 | DType::U16 | DType::F16 | DType::BF16 => t
                .int32_data
                .iter()
                .for_each(|&x| out.extend_from_slice(&(x as u16).to_le_bytes())),
            DType::I8 | DType::U8 => t.int32_data.iter().for_each(|&x| out.push(x as u8)),
            DType::Bool => t
                .int32_data
                .iter()
                .for_each(|&x| out.push(u8::from(x != 0))),
        }
        TensorData::new(dtype, shape, Bytes::from(out)).map_err(|e| mismatch(e, 0, "bytes"))
    }

    /// The bytes of an external tensor: `location` relative to the model's folder, `offset` and
    /// `length` within the file.
    fn external(&mut self, t: &TensorProto) -> Result<Bytes, TensorError> {
        let mut location = None;
        let mut offset = None;
        let mut length = None;
        for e in &t.external_data {
            let value = e.value.as_deref().unwrap_or("");
            match e.key.as_deref().unwrap_or("") {
                "location" => location = Some(value),
                "offset" => offset = Some(parse_u64("offset", value)?),
                "length" => length = Some(parse_u64("length", value)?),
                // `checksum` and unknown keys are not used.
                _ => {}
            }
        }
        let Some(location) = location else {
            return Err((E3015, "external data without a `location`".into()));
        };
        let file = self.map(location)?;
        let size = file.len() as u64;
        let offset = offset.unwrap_or(0);
        if offset > size {
            return Err((
                E3014,
                format!("offset {offset} is past the end of `{location}` ({size} bytes)"),
            ));
        }
        let length = length.unwrap_or(size - offset);
        match offset.checked_add(length) {
            Some(end) if end <= size => Ok(file.slice(offset as usize..end as usize)),
            _ => Err((
                E3014,
                format!(
                    "offset {offset} and length {length} reach past the end of `{location}` \
                     ({size} bytes)"
                ),
            )),
        }
    }

    /// Maps an external data file after checking that it lies in the model's folder.
    fn map(&mut self, location: &str) -> Result<Bytes, TensorError> {
        let refuse = |why: &str| Err((E3013, format!("external data location `{location}` {why}")));
        let rel = Path::new(location);
        if location.is_empty() {
            return refuse("is empty");
        }
        if rel.is_absolute() || location.starts_with('/') || location.starts_with('\\') {
            return refuse("is absolute; it must be relative to the model's folder");
        }
        if rel
            .components()
            .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
        {
            return refuse("leaves the model's folder");
        }
        let Some(base) = self.base_dir.clone() else {
            return Err((
                E3015,
                format!(
                    "external data `{location}` needs the model's folder, which is not known \
                     for a model read from memory"
                ),
            ));
        };
        if self.canonical_base.is_none() {
            let c = std::fs::canonicalize(&base).map_err(|e| {
                (
                    E3015,
                    format!("cannot resolve the model's folder {}: {e}", base.display()),
                )
            })?;
            self.canonical_base = Some(c);
        }
        let canonical_base = self.canonical_base.as_ref().unwrap();
        let path = std::fs::canonicalize(base.join(rel)).map_err(|e| {
            (
                E3015,
                format!("cannot open external data `{location}`: {e}"),
            )
        })?;
        // A symbolic link may point anywhere: compare the resolved paths.
        if !path.starts_with(canonical_base) {
            return refuse("is a link that leads out of the model's folder");
        }
        if let Some(b) = self.mapped.get(&path) {
            return Ok(b.clone());
        }
        let bytes = map_file(&path).map_err(|e| {
            (
                E3015,
                format!("cannot read external data `{location}`: {e}"),
            )
        })?;
        self.mapped.insert(path, bytes.clone());
        Ok(bytes)
    }
}

/// Maps a regular file read-only into memory as shared bytes (an empty file gives empty bytes).
/// Anything but a regular file (a directory, a FIFO, a device) is refused before it is opened
/// for reading, so that nothing blocks.
pub(crate) fn map_file(path: &Path) -> std::io::Result<Bytes> {
    let meta = std::fs::metadata(path)?;
    if !meta.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    let file = std::fs::File::open(path)?;
    // SAFETY: the mapping is read-only. As with every memory-mapped reader, a file truncated by
    // another process while mapped is not defended against; the model and its data files are
    // inputs the user hands over and does not rewrite meanwhile. Its pages can be given back
    // once copied (`crate::util::memory::release`).
    unsafe { crate::util::memory::map_file(&file) }
}

fn parse_u64(key: &str, value: &str) -> Result<u64, TensorError> {
    value.trim().parse::<u64>().map_err(|_| {
        (
            E3015,
            format!("external data `{key}` is `{value}`, not a non-negative integer"),
        )
    })
}

/// The message for dimensions refused by [`element_count`].
pub(crate) fn shape_message(dims: &[i64]) -> String {
    if let Some(d) = dims.iter().find(|&&d| d < 0) {
        format!("dimensions {dims:?} include the negative size {d}")
    } else {
        format!(
            "dimensions {dims:?} hold more than {} elements (the limit is 2^40)",
            super::tensor::MAX_ELEMENTS
        )
    }
}

/// A diagnostic for a tensor that could not be read.
pub(crate) fn tensor_diagnostic(e: TensorError, name: &str, place: ModelPlace) -> Diagnostic {
    let (code, msg) = e;
    let subject = if name.is_empty() {
        "tensor".to_string()
    } else {
        format!("tensor `{name}`")
    };
    Diagnostic::error(code, format!("{subject}: {msg}")).with_place(place)
}
