//! Reading the `#[metadata]` section: the JSON that TVM's `SaveJSON` writes for the meta table, a
//! `Map<String, Array<Object>>` keyed by type key.
//!
//! The JSON is a flat node graph: `{"root": N, "nodes": [...], "b64ndarrays": [...], "attrs":
//! {...}}`. Node 0 is the null object; the root is a `Map` whose values are `Array`s of the stored
//! objects. Every value inside a node's `"attrs"` is a string: numbers in decimal, object fields
//! as the decimal index of another node (`"0"` or `"null"` = null), and a constant's `data` as an
//! index into `b64ndarrays`.
//!
//! Only what the compiler needs is kept (see [`MetaObject`]):
//!
//! * `relay.Constant` → its [`TensorType`], read from the header of its base64 NDArray blob (the
//!   payload is kept in [`MetaTable::data`], for execution), or, when the constant has no data,
//!   from its `_checked_type_` (a `relay.TensorType` node); a constant with neither is
//!   [`MetaObject::UntypedConstant`], typed by the `/* ty=... */` comment of its reference;
//! * `VirtualDevice` → a [`VirtualDevice`]. Its target is reduced to a string: the target kind's
//!   name (`"cuda"`, `"llvm"`), followed by `" -host=<host kind name>"` when the target has a host.
//!   Other target attributes (`-arch`, `-keys`, ...) are not kept;
//! * any other object → its type key.
//!
//! Variants accepted: the root map in its string-keyed form (`"keys"` beside `"data"`) or its
//! alternating key/value form (keys are `runtime.String` nodes); `"0"` and `"null"` both as null
//! references; the older attribute name `device_type` for `device_type_int`; a target kind's name
//! from its `repr_str` (how TVM serializes `TargetKind`) or from a `name` attribute; and an NDArray
//! payload size of either elements × ceil(bits / 8) (what TVM's `SaveDLTensor` writes, lanes not
//! multiplied in) or elements × ceil(bits × lanes / 8).
//!
//! [`write_metadata`] is the other direction, for printing: the JSON TVM 0.19 writes for a meta
//! table of constants (with their NDArrays, byte for byte as TVM serializes them) and virtual
//! devices.
//!
//! The reader never recurses on the input: node references are followed a fixed number of levels
//! with explicit lookups, and every index is bounds-checked. Malformed input of any kind gives a
//! [`MetadataError`], never a panic.

use crate::ir::{
    ConstData, DType, DTypeCode, Dim, MetaObject, MetaTable, TensorType, VirtualDevice,
};
use base64::Engine as _;
use serde::Deserialize;
use std::collections::{BTreeMap, HashMap};

/// Why the metadata section could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetadataError {
    /// Lowercase message, no trailing period.
    pub message: String,
    /// Byte offset inside the JSON text the problem is at, when known: the position serde_json
    /// reports for syntax and type errors, or the start of the offending node's (or base64
    /// string's) text for semantic errors.
    pub offset: Option<usize>,
}

impl std::fmt::Display for MetadataError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for MetadataError {}

/// The NDArray magic number (`kTVMNDArrayMagic`).
const NDARRAY_MAGIC: u64 = 0xDD5E_40F0_96B4_A13F;
/// The most dimensions a serialized NDArray may have before it is rejected as garbage.
const MAX_NDIM: i32 = 32;
/// Fixed part of the NDArray header: magic, reserved, device type, device id, ndim, dtype.
const HEADER_FIXED: usize = 32;
/// The longest header: fixed part, [`MAX_NDIM`] extents and the payload byte count.
const MAX_HEADER: usize = HEADER_FIXED + 8 * MAX_NDIM as usize + 8;
/// Base64 characters decoded at a time (a multiple of 4).
const B64_CHUNK: usize = 4096;

/// Parses the JSON text that follows `#[metadata]` into a meta table.
///
/// Objects are listed per type key in the order of their array; see the module documentation for
/// what is kept of each object.
pub fn parse_metadata(json: &str) -> Result<MetaTable, MetadataError> {
    match json.trim_start().as_bytes().first() {
        Some(b'{') => {}
        Some(_) => {
            return Err(MetadataError {
                message: "metadata must be a json object".to_string(),
                offset: Some(json.len() - json.trim_start().len()),
            })
        }
        None => {
            return Err(MetadataError {
                message: "metadata section is empty".to_string(),
                offset: Some(json.len()),
            })
        }
    }
    let raw: RawGraph = serde_json::from_str(json).map_err(|e| json_error(json, &e))?;
    let graph = Graph {
        json,
        nodes: raw.nodes.ok_or_else(|| MetadataError {
            message: "metadata has no `nodes` list".to_string(),
            offset: None,
        })?,
        b64: raw.b64ndarrays,
    };
    let root = raw.root.ok_or_else(|| MetadataError {
        message: "metadata has no `root`".to_string(),
        offset: None,
    })?;
    let root = match usize::try_from(root) {
        Ok(r) if r < graph.nodes.len() => r,
        _ => {
            return Err(MetadataError {
                message: format!(
                    "root refers to node {root} but there {}",
                    only(graph.nodes.len(), "node")
                ),
                offset: None,
            })
        }
    };
    graph.read_table(root)
}

/// `"are only 3 nodes"` / `"is only 1 node"`.
fn only(n: usize, what: &str) -> String {
    if n == 1 {
        format!("is only 1 {what}")
    } else {
        format!("are only {n} {what}s")
    }
}

/// Converts a serde_json error into a [`MetadataError`] with a byte offset.
fn json_error(json: &str, e: &serde_json::Error) -> MetadataError {
    let full = e.to_string();
    let suffix = format!(" at line {} column {}", e.line(), e.column());
    let msg = full.strip_suffix(&suffix).unwrap_or(&full);
    let offset = if e.line() == 0 {
        None
    } else {
        let line_start = json
            .split_inclusive('\n')
            .take(e.line() - 1)
            .map(str::len)
            .sum::<usize>();
        Some(
            line_start
                .saturating_add(e.column().saturating_sub(1))
                .min(json.len()),
        )
    };
    MetadataError {
        message: format!("invalid metadata json: {msg}"),
        offset,
    }
}

/// The top level of `SaveJSON` output. Unknown fields (the global `attrs`) are ignored.
#[derive(Deserialize)]
struct RawGraph {
    root: Option<u64>,
    nodes: Option<Vec<RawNode>>,
    #[serde(default)]
    b64ndarrays: Vec<String>,
}

/// One node of the graph.
#[derive(Deserialize)]
struct RawNode {
    #[serde(default)]
    type_key: String,
    #[serde(default)]
    repr_str: Option<String>,
    #[serde(default)]
    repr_b64: Option<String>,
    #[serde(default)]
    attrs: BTreeMap<String, String>,
    #[serde(default)]
    keys: Vec<String>,
    #[serde(default)]
    data: Vec<u64>,
}

/// The deserialized graph, with the text kept for error offsets.
struct Graph<'a> {
    json: &'a str,
    nodes: Vec<RawNode>,
    b64: Vec<String>,
}

type Res<T> = Result<T, MetadataError>;

fn is_map(key: &str) -> bool {
    matches!(key, "Map" | "ffi.Map")
}

fn is_array(key: &str) -> bool {
    matches!(key, "Array" | "ffi.Array")
}

fn is_string(key: &str) -> bool {
    matches!(key, "runtime.String" | "ffi.String" | "String")
}

/// A type key for messages (`the null object` for node 0's empty key).
fn describe(key: &str) -> String {
    if key.is_empty() {
        "the null object".to_string()
    } else {
        format!("a `{key}`")
    }
}

impl Graph<'_> {
    /// An error located at node `idx`'s text.
    fn err(&self, idx: usize, message: String) -> MetadataError {
        MetadataError {
            message,
            offset: member_element_offsets(self.json, "nodes").get(idx).copied(),
        }
    }

    /// An error located at `b64ndarrays[idx]`.
    fn err_b64(&self, idx: usize, message: String) -> MetadataError {
        MetadataError {
            message,
            offset: member_element_offsets(self.json, "b64ndarrays")
                .get(idx)
                .copied(),
        }
    }

    /// Checks a reference from node `from` to node `to`.
    fn node_ref(&self, from: usize, to: u64) -> Res<usize> {
        match usize::try_from(to) {
            Ok(t) if t < self.nodes.len() => Ok(t),
            _ => Err(self.err(
                from,
                format!(
                    "node {from} refers to node {to} but there {}",
                    only(self.nodes.len(), "node")
                ),
            )),
        }
    }

    fn attr(&self, idx: usize, name: &str) -> Option<&str> {
        self.nodes[idx].attrs.get(name).map(String::as_str)
    }

    /// An object-valued attribute: `None` when missing, `"null"` or `"0"` (the null node).
    fn ref_attr(&self, idx: usize, name: &str) -> Res<Option<usize>> {
        let Some(text) = self.attr(idx, name) else {
            return Ok(None);
        };
        if text == "null" {
            return Ok(None);
        }
        let to = parse_u64(text).ok_or_else(|| {
            self.err(
                idx,
                format!("node {idx} has {name}={text:?}, which is not a node index"),
            )
        })?;
        let to = self.node_ref(idx, to)?;
        Ok((to != 0).then_some(to))
    }

    /// An integer attribute: `None` when missing.
    fn int_attr(&self, idx: usize, name: &str) -> Res<Option<i64>> {
        let Some(text) = self.attr(idx, name) else {
            return Ok(None);
        };
        text.parse::<i64>().map(Some).map_err(|_| {
            self.err(
                idx,
                format!("node {idx} has {name}={text:?}, which is not an integer"),
            )
        })
    }

    /// The text of a string node (`runtime.String`), referred to from node `from`.
    fn string_node(&self, from: usize, idx: usize) -> Res<String> {
        let node = &self.nodes[idx];
        if !is_string(&node.type_key) {
            return Err(self.err(
                from,
                format!(
                    "node {from} refers to node {idx}, {}, where a string is expected",
                    describe(&node.type_key)
                ),
            ));
        }
        self.repr(idx)
    }

    /// A node's custom byte representation as text; empty when it has none (TVM omits an empty
    /// representation).
    fn repr(&self, idx: usize) -> Res<String> {
        let node = &self.nodes[idx];
        if let Some(s) = &node.repr_str {
            return Ok(s.clone());
        }
        if let Some(b) = &node.repr_b64 {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(b)
                .map_err(|_| self.err(idx, format!("node {idx} has invalid base64 in repr_b64")))?;
            return String::from_utf8(bytes).map_err(|_| {
                self.err(idx, format!("node {idx} has a repr_b64 that is not utf-8"))
            });
        }
        Ok(String::new())
    }

    /// Reads the meta table rooted at the `Map` node `root`.
    fn read_table(&self, root: usize) -> Res<MetaTable> {
        let map = &self.nodes[root];
        if !is_map(&map.type_key) {
            return Err(self.err(
                root,
                format!("root node {root} is {}, not a map", describe(&map.type_key)),
            ));
        }
        // (key, array node) pairs in map order.
        let mut entries: Vec<(String, usize)> = Vec::new();
        if !map.keys.is_empty() {
            if map.keys.len() != map.data.len() {
                return Err(self.err(
                    root,
                    format!(
                        "map node {root} has {} keys but {} values",
                        map.keys.len(),
                        map.data.len()
                    ),
                ));
            }
            for (k, &v) in map.keys.iter().zip(&map.data) {
                entries.push((k.clone(), self.node_ref(root, v)?));
            }
        } else {
            if !map.data.len().is_multiple_of(2) {
                return Err(self.err(
                    root,
                    format!(
                        "map node {root} has an odd number of entries in its key/value list ({})",
                        map.data.len()
                    ),
                ));
            }
            for pair in map.data.chunks_exact(2) {
                let k = self.node_ref(root, pair[0])?;
                let v = self.node_ref(root, pair[1])?;
                entries.push((self.string_node(root, k)?, v));
            }
        }

        // Element lists, and where each stored object sits (for symbolic shape dimensions).
        let mut lists: Vec<(&str, &[u64])> = Vec::with_capacity(entries.len());
        let mut positions: HashMap<usize, (&str, usize)> = HashMap::new();
        for (key, arr) in &entries {
            let node = &self.nodes[*arr];
            if !is_array(&node.type_key) {
                return Err(self.err(
                    *arr,
                    format!(
                        "meta table entry `{key}` is node {arr}, {}, not an array",
                        describe(&node.type_key)
                    ),
                ));
            }
            for (pos, &el) in node.data.iter().enumerate() {
                let el = self.node_ref(*arr, el)?;
                positions.entry(el).or_insert((key.as_str(), pos));
            }
            lists.push((key.as_str(), &node.data));
        }

        let mut table = MetaTable::default();
        let mut ndarray_cache: HashMap<usize, (TensorType, ConstData)> = HashMap::new();
        for (key, elements) in lists {
            if table.objects.contains_key(key) {
                return Err(self.err(root, format!("meta table key `{key}` appears twice")));
            }
            let mut objects = Vec::with_capacity(elements.len());
            for &el in elements {
                // Bounds were checked above.
                let el = el as usize;
                let obj = match self.nodes[el].type_key.as_str() {
                    "relay.Constant" => match self.constant(el, &positions, &mut ndarray_cache)? {
                        Some((ty, data)) => {
                            if let Some(d) = data {
                                table
                                    .data
                                    .insert((key.to_string(), objects.len() as u32), d);
                            }
                            MetaObject::Constant(ty)
                        }
                        None => MetaObject::UntypedConstant,
                    },
                    "VirtualDevice" | "target.VirtualDevice" => {
                        MetaObject::Device(self.virtual_device(el)?)
                    }
                    other => MetaObject::Other(other.to_string()),
                };
                objects.push(obj);
            }
            table.objects.insert(key.to_string(), objects);
        }
        Ok(table)
    }

    /// The type and data of the `relay.Constant` node `idx`; `None` when it has neither data
    /// nor a checked type.
    fn constant(
        &self,
        idx: usize,
        positions: &HashMap<usize, (&str, usize)>,
        cache: &mut HashMap<usize, (TensorType, ConstData)>,
    ) -> Res<Option<(TensorType, Option<ConstData>)>> {
        match self.attr(idx, "data") {
            Some(text) if text != "null" => {
                let i = parse_u64(text)
                    .and_then(|i| usize::try_from(i).ok())
                    .filter(|&i| i < self.b64.len())
                    .ok_or_else(|| {
                        self.err(
                            idx,
                            format!(
                                "constant node {idx} refers to b64ndarrays[{text}] but there {}",
                                only(self.b64.len(), "array")
                            ),
                        )
                    })?;
                if let Some((t, d)) = cache.get(&i) {
                    return Ok(Some((t.clone(), Some(d.clone()))));
                }
                let label = format!("b64ndarrays[{i}]");
                let (t, data) =
                    decode_ndarray(&self.b64[i], &label).map_err(|m| self.err_b64(i, m))?;
                let data = ConstData(data.into());
                cache.insert(i, (t.clone(), data.clone()));
                Ok(Some((t, Some(data))))
            }
            _ => Ok(self.checked_type(idx, positions)?.map(|t| (t, None))),
        }
    }

    /// A constant's type from its `_checked_type_` field, if it has one.
    fn checked_type(
        &self,
        idx: usize,
        positions: &HashMap<usize, (&str, usize)>,
    ) -> Res<Option<TensorType>> {
        let Some(ty) = self.ref_attr(idx, "_checked_type_")? else {
            return Ok(None);
        };
        let ty_key = self.nodes[ty].type_key.as_str();
        if !matches!(ty_key, "relay.TensorType" | "TensorType") {
            return Err(self.err(
                ty,
                format!(
                    "constant node {idx} has type node {ty}, {}, not a tensor type",
                    describe(ty_key)
                ),
            ));
        }
        let dtype_text = self.attr(ty, "dtype").unwrap_or("");
        let dtype = DType::parse(dtype_text).ok_or_else(|| {
            self.err(
                ty,
                format!("tensor type node {ty} has unknown dtype {dtype_text:?}"),
            )
        })?;
        let shape = self
            .ref_attr(ty, "shape")?
            .ok_or_else(|| self.err(ty, format!("tensor type node {ty} has no shape")))?;
        if !is_array(&self.nodes[shape].type_key) {
            return Err(self.err(
                shape,
                format!(
                    "tensor type node {ty} has shape node {shape}, {}, not an array",
                    describe(&self.nodes[shape].type_key)
                ),
            ));
        }
        let mut dims = Vec::with_capacity(self.nodes[shape].data.len());
        for &d in &self.nodes[shape].data {
            let d = self.node_ref(shape, d)?;
            let dim = match self.nodes[d].type_key.as_str() {
                "IntImm" => {
                    let v = self
                        .int_attr(d, "value")?
                        .ok_or_else(|| self.err(d, format!("dimension node {d} has no value")))?;
                    if v < 0 {
                        return Err(self.err(d, format!("dimension node {d} is negative ({v})")));
                    }
                    Dim::Fixed(v)
                }
                "relay.Any" | "tir.Any" => Dim::Any,
                key @ ("tir.SizeVar" | "tir.Var") => match positions.get(&d) {
                    Some((k, pos)) => Dim::Sym(format!("meta[{k}][{pos}]")),
                    None => {
                        return Err(self.err(
                            d,
                            format!(
                                "dimension node {d} is a `{key}` that is not in the meta table"
                            ),
                        ))
                    }
                },
                other => {
                    return Err(self.err(
                        d,
                        format!("dimension node {d} is {}, not an integer", describe(other)),
                    ))
                }
            };
            dims.push(dim);
        }
        Ok(Some(TensorType { shape: dims, dtype }))
    }

    /// The `VirtualDevice` node `idx`.
    fn virtual_device(&self, idx: usize) -> Res<VirtualDevice> {
        let device_type = match self.attr(idx, "device_type_int") {
            Some(_) => self.optional_i32(idx, "device_type_int")?,
            None => self.optional_i32(idx, "device_type")?,
        };
        let virtual_device_id = self.optional_i32(idx, "virtual_device_id")?;
        let memory_scope = match self.ref_attr(idx, "memory_scope")? {
            Some(s) => Some(self.string_node(idx, s)?).filter(|s| !s.is_empty()),
            None => None,
        };
        let target = match self.ref_attr(idx, "target")? {
            Some(t) => {
                let kind = self.target_kind(idx, t)?;
                match self.ref_attr(t, "host")? {
                    Some(h) if h != t => Some(format!("{kind} -host={}", self.target_kind(t, h)?)),
                    _ => Some(kind),
                }
            }
            None => None,
        };
        Ok(VirtualDevice {
            device_type,
            virtual_device_id,
            target,
            memory_scope,
        })
    }

    /// An `int` field where -1 (or a missing attribute) means unset. Other negative values are
    /// errors; 0 (TVM's `kNullDeviceType`) is kept as is.
    fn optional_i32(&self, idx: usize, name: &str) -> Res<Option<i32>> {
        match self.int_attr(idx, name)? {
            None | Some(-1) => Ok(None),
            Some(v) => match i32::try_from(v) {
                Ok(v) if v >= 0 => Ok(Some(v)),
                _ => Err(self.err(idx, format!("node {idx} has invalid {name} {v}"))),
            },
        }
    }

    /// The kind name of the `Target` node `t`, referred to from node `from`.
    fn target_kind(&self, from: usize, t: usize) -> Res<String> {
        let key = self.nodes[t].type_key.as_str();
        if key != "Target" {
            return Err(self.err(
                from,
                format!(
                    "node {from} refers to node {t}, {}, where a target is expected",
                    describe(key)
                ),
            ));
        }
        let kind = self
            .ref_attr(t, "kind")?
            .ok_or_else(|| self.err(t, format!("target node {t} has no kind")))?;
        let kind_key = self.nodes[kind].type_key.as_str();
        if kind_key != "TargetKind" {
            return Err(self.err(
                t,
                format!(
                    "target node {t} has kind node {kind}, {}, not a target kind",
                    describe(kind_key)
                ),
            ));
        }
        let mut name = self.repr(kind)?;
        if name.is_empty() {
            if let Some(text) = self.attr(kind, "name") {
                // `name` is a String field: normally a node index, but accept the literal name.
                name = match parse_u64(text) {
                    Some(n) => {
                        let n = self.node_ref(kind, n)?;
                        self.string_node(kind, n)?
                    }
                    None => text.to_string(),
                };
            }
        }
        if name.is_empty() {
            return Err(self.err(kind, format!("target kind node {kind} has no name")));
        }
        Ok(name)
    }
}

/// The TVM release whose `SaveJSON` output [`write_metadata`] reproduces.
pub const TVM_VERSION: &str = "0.19.0";

/// One element of a meta table array for [`write_metadata`].
#[derive(Clone, Debug, PartialEq)]
pub enum MetaEntry {
    /// An index nothing refers to: the null object.
    Null,
    /// A `relay.Constant` of type `ty`, with its data bytes (row-major, little-endian) when it
    /// has them.
    Constant {
        /// The constant's type.
        ty: TensorType,
        /// Its data, if known.
        data: Option<ConstData>,
    },
    /// A virtual device.
    Device(VirtualDevice),
}

/// The metadata section of a printed module: the JSON TVM 0.19's `SaveJSON` writes for the meta
/// table `{key: [objects...], ...}` (keys in the given order), which its parser loads back into
/// the same objects.
///
/// Nodes are numbered as TVM numbers them, depth first from the root map in the order of each
/// object's fields; node 0 is the null object, and object fields refer to nodes by decimal index
/// (`"0"` for null).
///
/// * A `relay.Constant` node has TVM's four fields in TVM's visiting order: `data`, the index
///   of its NDArray in `b64ndarrays`; `virtual_device_`, one fully unconstrained
///   `VirtualDevice` node shared by every constant; `span`, null; `_checked_type_`, a
///   `relay.TensorType` node (`shape` an `Array` of `IntImm` extents, `int32` unless the extent
///   needs `int64`, `dtype` its name). Its NDArray is what TVM's `SaveDLTensor` writes, in
///   standard base64 with padding: magic `0xDD5E40F096B4A13F`, reserved 0, device CPU (1, 0),
///   `ndim`, dtype code, bits and lanes, the extents, the payload byte count, the payload. Two
///   constants whose data is one shared buffer of one type share one NDArray, as in TVM.
/// * A constant without data, or whose data does not fit its type (which no read module has),
///   has neither `data` nor a checked type: its type is left to the `/* ty=... */` comment of
///   the reference, which [`parse_metadata`] accepts. TVM cannot load such a constant (it has
///   no data to load), as it could not resolve the reference without the caller's table.
/// * A `VirtualDevice` node has its four fields (`device_type_int` and `virtual_device_id` are
///   -1 when unset, `target` a `Target` node or null, `memory_scope` a `runtime.String`). A
///   target string is written as a `Target` of the kind named by its first word (a
///   `TargetKind` node, which TVM looks up by name), with no tag, keys, attributes or features,
///   and, for a `-host=K` option, a host target of kind `K`. Other options are not written: TVM
///   gives each option of a kind its own type, which a target string does not say.
///   [`parse_metadata`] reads the kind and the host back, as it does for TVM's own output.
/// * [`MetaEntry::Null`] is the null node (`0` in the array).
pub fn write_metadata(table: &[(String, Vec<MetaEntry>)]) -> String {
    let mut w = JsonWriter {
        nodes: vec![r#"{"type_key": ""}"#.to_string()],
        b64: Vec::new(),
        shared_data: HashMap::new(),
        unconstrained: None,
    };
    let map = w.reserve();
    let mut arrays = Vec::with_capacity(table.len());
    for (_, entries) in table {
        let array = w.reserve();
        let elements: Vec<usize> = entries
            .iter()
            .map(|e| match e {
                MetaEntry::Null => 0,
                MetaEntry::Constant { ty, data } => w.constant(ty, data.as_ref()),
                MetaEntry::Device(d) => w.device(d),
            })
            .collect();
        w.nodes[array] = w.container("Array", &elements);
        arrays.push(array);
    }
    let keys: Vec<String> = table.iter().map(|(k, _)| json_string(k)).collect();
    let data: Vec<String> = arrays.iter().map(usize::to_string).collect();
    w.nodes[map] = if table.is_empty() {
        r#"{"type_key": "Map"}"#.to_string()
    } else {
        format!(
            r#"{{"type_key": "Map", "keys": [{}], "data": [{}]}}"#,
            keys.join(", "),
            data.join(", ")
        )
    };
    let mut out = String::from("{\n  \"root\": 1,\n  \"nodes\": [\n");
    for (i, n) in w.nodes.iter().enumerate() {
        out.push_str("    ");
        out.push_str(n);
        out.push_str(if i + 1 < w.nodes.len() { ",\n" } else { "\n" });
    }
    if w.b64.is_empty() {
        out.push_str("  ],\n  \"b64ndarrays\": [],\n");
    } else {
        out.push_str("  ],\n  \"b64ndarrays\": [\n");
        for (i, b) in w.b64.iter().enumerate() {
            out.push_str("    \"");
            out.push_str(b);
            out.push_str(if i + 1 < w.b64.len() { "\",\n" } else { "\"\n" });
        }
        out.push_str("  ],\n");
    }
    out.push_str(&format!(
        "  \"attrs\": {{\"tvm_version\": \"{TVM_VERSION}\"}}\n}}"
    ));
    out
}

/// [`write_metadata`] of the meta table `{"VirtualDevice": [devices...]}`.
pub fn write_devices(devices: &[VirtualDevice]) -> String {
    let entries = devices.iter().cloned().map(MetaEntry::Device).collect();
    write_metadata(&[("VirtualDevice".to_string(), entries)])
}

/// The NDArray blob (not yet base64) TVM's `SaveDLTensor` writes for a tensor of type `ty` with
/// `data`, or `None` when the data does not fit the type: the type must have static extents and
/// at most [`MAX_NDIM`] of them, and the data as many bytes as the extents times
/// ceil(bits / 8) (what TVM writes) or times the lane-inclusive element size (what the reader
/// also accepts). The byte count written is the data's length, so what was read is written back
/// unchanged.
pub fn ndarray_blob(ty: &TensorType, data: &[u8]) -> Option<Vec<u8>> {
    let header = ndarray_header(ty, data.len())?;
    let mut blob = header;
    blob.extend_from_slice(data);
    Some(blob)
}

/// The header part of [`ndarray_blob`] for `len` payload bytes.
fn ndarray_header(ty: &TensorType, len: usize) -> Option<Vec<u8>> {
    let ndim = ty.shape.len();
    if ndim > MAX_NDIM as usize {
        return None;
    }
    let mut dims = Vec::with_capacity(ndim);
    let mut elements: u64 = 1;
    for d in &ty.shape {
        let d = d.fixed().filter(|&d| d >= 0)?;
        elements = elements.checked_mul(d as u64)?;
        dims.push(d);
    }
    let dtype = ty.dtype;
    let code: u8 = match dtype.code {
        DTypeCode::Int => 0,
        DTypeCode::UInt => 1,
        DTypeCode::Float => 2,
        DTypeCode::BFloat => 4,
    };
    let bits = u8::try_from(dtype.bits).ok()?;
    let tvm_size = elements.checked_mul(u64::from(bits).div_ceil(8));
    let full_size = elements.checked_mul(dtype.bytes());
    let len64 = len as u64;
    if Some(len64) != tvm_size && Some(len64) != full_size {
        return None;
    }
    let count = i64::try_from(len).ok()?;
    let mut h = Vec::with_capacity(HEADER_FIXED + 8 * ndim + 8);
    h.extend_from_slice(&NDARRAY_MAGIC.to_le_bytes());
    h.extend_from_slice(&0u64.to_le_bytes());
    h.extend_from_slice(&1i32.to_le_bytes());
    h.extend_from_slice(&0i32.to_le_bytes());
    h.extend_from_slice(&(ndim as i32).to_le_bytes());
    h.push(code);
    h.push(bits);
    h.extend_from_slice(&dtype.lanes.to_le_bytes());
    for d in dims {
        h.extend_from_slice(&d.to_le_bytes());
    }
    h.extend_from_slice(&count.to_le_bytes());
    Some(h)
}

/// Whether `data` can be written as the NDArray of a constant of type `ty` ([`ndarray_blob`]).
pub fn data_fits(ty: &TensorType, data: &[u8]) -> bool {
    ndarray_header(ty, data.len()).is_some()
}

/// Builds the node list of [`write_metadata`]; each node is its JSON text.
struct JsonWriter {
    nodes: Vec<String>,
    /// The base64 NDArrays.
    b64: Vec<String>,
    /// The NDArray of each data buffer written so far, by buffer address, length and type
    /// (looked up, never iterated).
    shared_data: HashMap<(usize, usize, TensorType), usize>,
    /// The unconstrained `VirtualDevice` node of the constants, once written.
    unconstrained: Option<usize>,
}

impl JsonWriter {
    /// A slot for a node whose fields are written once its children are numbered.
    fn reserve(&mut self) -> usize {
        self.nodes.push(String::new());
        self.nodes.len() - 1
    }

    fn push(&mut self, node: String) -> usize {
        self.nodes.push(node);
        self.nodes.len() - 1
    }

    /// An `Array` or `Map` node with the given elements (TVM leaves out an empty `data`).
    fn container(&self, key: &str, elements: &[usize]) -> String {
        if elements.is_empty() {
            return format!(r#"{{"type_key": "{key}"}}"#);
        }
        let data: Vec<String> = elements.iter().map(usize::to_string).collect();
        format!(r#"{{"type_key": "{key}", "data": [{}]}}"#, data.join(", "))
    }

    /// A node with a byte representation (a string, a target kind): `repr_str` when every byte
    /// is printable ASCII, otherwise `repr_b64`; nothing for an empty one.
    fn repr(&mut self, key: &str, bytes: &str) -> usize {
        let node = if bytes.is_empty() {
            format!(r#"{{"type_key": "{key}"}}"#)
        } else if bytes.bytes().all(|b| (0x20..0x7f).contains(&b)) {
            format!(
                r#"{{"type_key": "{key}", "repr_str": {}}}"#,
                json_string(bytes)
            )
        } else {
            let b64 = base64::engine::general_purpose::STANDARD.encode(bytes);
            format!(r#"{{"type_key": "{key}", "repr_b64": "{b64}"}}"#)
        };
        self.push(node)
    }

    /// A node with object attributes, written as TVM writes them (keys sorted, values strings).
    fn object(key: &str, attrs: &[(&str, String)]) -> String {
        let mut attrs = attrs.to_vec();
        attrs.sort();
        let fields: Vec<String> = attrs
            .iter()
            .map(|(k, v)| format!("{}: {}", json_string(k), json_string(v)))
            .collect();
        format!(
            r#"{{"type_key": "{key}", "attrs": {{{}}}}}"#,
            fields.join(", ")
        )
    }

    /// A `VirtualDevice` and its fields, in TVM's field order.
    fn device(&mut self, d: &VirtualDevice) -> usize {
        let at = self.reserve();
        let target = match &d.target {
            Some(t) => self.target(t),
            None => 0,
        };
        let scope = self.repr("runtime.String", d.memory_scope.as_deref().unwrap_or(""));
        let int = |v: Option<i32>| v.unwrap_or(-1).to_string();
        self.nodes[at] = Self::object(
            "VirtualDevice",
            &[
                ("device_type_int", int(d.device_type)),
                ("virtual_device_id", int(d.virtual_device_id)),
                ("target", target.to_string()),
                ("memory_scope", scope.to_string()),
            ],
        );
        at
    }

    /// A `relay.Constant` and its fields, in TVM's field order: its NDArray (when the data fits
    /// the type), the shared unconstrained device, a null span and its checked type (only with
    /// data: a constant without data is typed by its reference's comment).
    fn constant(&mut self, ty: &TensorType, data: Option<&ConstData>) -> usize {
        let at = self.reserve();
        let ndarray = data.and_then(|d| self.ndarray(ty, d));
        let device = match self.unconstrained {
            Some(d) => d,
            None => {
                let d = self.device(&VirtualDevice::default());
                self.unconstrained = Some(d);
                d
            }
        };
        let mut attrs = vec![
            ("virtual_device_", device.to_string()),
            ("span", "0".to_string()),
        ];
        match ndarray {
            Some(i) => {
                let checked = self.tensor_type(ty);
                attrs.push(("data", i.to_string()));
                attrs.push(("_checked_type_", checked.to_string()));
            }
            None => attrs.push(("_checked_type_", "0".to_string())),
        }
        self.nodes[at] = Self::object("relay.Constant", &attrs);
        at
    }

    /// The index in `b64ndarrays` of the data of a constant of type `ty`, written on first use.
    /// Constants that share their bytes (clones of one [`ConstData`]) share one NDArray. Empty
    /// data are never shared: every empty buffer may have the same address.
    fn ndarray(&mut self, ty: &TensorType, data: &ConstData) -> Option<usize> {
        let key = (data.0.as_ptr() as usize, data.0.len(), ty.clone());
        let shared = self.shared_data.get(&key).filter(|_| !data.0.is_empty());
        if let Some(&i) = shared {
            return Some(i);
        }
        let header = ndarray_header(ty, data.0.len())?;
        let mut enc =
            base64::write::EncoderStringWriter::new(&base64::engine::general_purpose::STANDARD);
        // Writing into a String cannot fail.
        let _ = std::io::Write::write_all(&mut enc, &header);
        let _ = std::io::Write::write_all(&mut enc, &data.0);
        self.b64.push(enc.into_inner());
        let i = self.b64.len() - 1;
        self.shared_data.insert(key, i);
        Some(i)
    }

    /// A `relay.TensorType` with static extents (`IntImm` nodes, `int32` when they fit).
    fn tensor_type(&mut self, ty: &TensorType) -> usize {
        let at = self.reserve();
        let shape = self.reserve();
        let dims: Vec<usize> = ty
            .shape
            .iter()
            .map(|d| {
                let v = d.fixed().unwrap_or(0);
                let dtype = if i32::try_from(v).is_ok() {
                    "int32"
                } else {
                    "int64"
                };
                self.push(Self::object(
                    "IntImm",
                    &[
                        ("dtype", dtype.to_string()),
                        ("value", v.to_string()),
                        ("span", "0".to_string()),
                    ],
                ))
            })
            .collect();
        self.nodes[shape] = self.container("Array", &dims);
        self.nodes[at] = Self::object(
            "relay.TensorType",
            &[
                ("shape", shape.to_string()),
                ("dtype", ty.dtype.to_string()),
                ("span", "0".to_string()),
            ],
        );
        at
    }

    /// A `Target` for a target string: its kind, and a host for `-host=K`.
    fn target(&mut self, text: &str) -> usize {
        let mut words = text.split_whitespace();
        let kind = words.next().unwrap_or("");
        let host = words
            .find_map(|w| w.strip_prefix("-host="))
            .filter(|h| !h.is_empty());
        self.target_of_kind(kind, host)
    }

    fn target_of_kind(&mut self, kind: &str, host: Option<&str>) -> usize {
        let at = self.reserve();
        let kind_node = self.repr("TargetKind", kind);
        let tag = self.repr("runtime.String", "");
        let keys = self.push(self.container("Array", &[]));
        let attrs = self.push(self.container("Map", &[]));
        let features = self.push(self.container("Map", &[]));
        let host = match host {
            Some(h) => self.target_of_kind(h, None),
            None => 0,
        };
        self.nodes[at] = Self::object(
            "Target",
            &[
                ("kind", kind_node.to_string()),
                ("tag", tag.to_string()),
                ("keys", keys.to_string()),
                ("attrs", attrs.to_string()),
                ("features", features.to_string()),
                ("host", host.to_string()),
            ],
        );
        at
    }
}

/// A JSON string literal.
fn json_string(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".to_string())
}

/// Parses a plain decimal index (digits only).
fn parse_u64(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// Decodes a base64 NDArray blob and returns its tensor type and its data bytes (row-major,
/// little-endian, as TVM writes them). The whole string is checked to be valid base64 and long
/// enough for the payload the header announces.
fn decode_ndarray(text: &str, label: &str) -> Result<(TensorType, Vec<u8>), String> {
    let engine = &base64::engine::general_purpose::STANDARD;
    let bytes = text.as_bytes();
    let mut all: Vec<u8> = Vec::with_capacity(bytes.len() / 4 * 3);
    let mut header: Vec<u8> = Vec::with_capacity(MAX_HEADER);
    let mut total: u64 = 0;
    let mut buf = [0u8; B64_CHUNK / 4 * 3];
    let invalid = || format!("{label} is not valid base64");
    let mut chunks = bytes.chunks(B64_CHUNK).peekable();
    while let Some(chunk) = chunks.next() {
        // Padding may only end the whole string, not an inner chunk.
        if chunks.peek().is_some() && chunk.ends_with(b"=") {
            return Err(invalid());
        }
        let n = engine
            .decode_slice(chunk, &mut buf)
            .map_err(|_| invalid())?;
        let take = (MAX_HEADER - header.len()).min(n);
        header.extend_from_slice(&buf[..take]);
        all.extend_from_slice(&buf[..n]);
        total += n as u64;
    }

    let truncated = |need: usize| {
        format!(
            "{label} is truncated: its ndarray header needs {need} bytes but the blob has {total}"
        )
    };
    if header.len() < HEADER_FIXED + 8 {
        return Err(truncated(HEADER_FIXED + 8));
    }
    let u64_at = |o: usize| u64::from_le_bytes(header[o..o + 8].try_into().unwrap_or([0; 8]));
    let i64_at = |o: usize| i64::from_le_bytes(header[o..o + 8].try_into().unwrap_or([0; 8]));
    let magic = u64_at(0);
    if magic != NDARRAY_MAGIC {
        return Err(format!(
            "{label} is not a serialized ndarray (magic 0x{magic:016x}, expected 0x{NDARRAY_MAGIC:016x})"
        ));
    }
    let ndim = i32::from_le_bytes([header[24], header[25], header[26], header[27]]);
    if !(0..=MAX_NDIM).contains(&ndim) {
        return Err(format!(
            "{label} has {ndim} dimensions; between 0 and {MAX_NDIM} are supported"
        ));
    }
    let ndim = ndim as usize;
    let header_len = HEADER_FIXED + 8 * ndim + 8;
    if header.len() < header_len {
        return Err(truncated(header_len));
    }
    let (code, bits, lanes) = (
        header[28],
        header[29],
        u16::from_le_bytes([header[30], header[31]]),
    );
    let code = match code {
        0 => DTypeCode::Int,
        1 => DTypeCode::UInt,
        2 => DTypeCode::Float,
        4 => DTypeCode::BFloat,
        c => return Err(format!("{label} has unknown dtype code {c}")),
    };
    let dtype = DType {
        code,
        bits: u16::from(bits),
        lanes,
    };
    // Reuse the dtype-name validation: only dtypes that have a name are accepted.
    if DType::parse(&dtype.to_string()) != Some(dtype) {
        return Err(format!(
            "{label} has unsupported dtype {dtype} (code {}, {bits} bits, {lanes} lanes)",
            header[28]
        ));
    }
    let mut shape = Vec::with_capacity(ndim);
    let mut elements: Option<u64> = Some(1);
    for k in 0..ndim {
        let d = i64_at(HEADER_FIXED + 8 * k);
        if d < 0 {
            return Err(format!("{label} has negative dimension {d} (axis {k})"));
        }
        elements = elements.and_then(|e| e.checked_mul(d as u64));
        shape.push(d);
    }
    let ty = TensorType::new(&shape, dtype);
    let count = i64_at(HEADER_FIXED + 8 * ndim);
    // TVM's SaveDLTensor writes elements * ceil(bits / 8) (lanes not multiplied in); accept that
    // and the lane-inclusive size, which agree for one-lane dtypes.
    let tvm_size = elements.and_then(|e| e.checked_mul(u64::from(bits).div_ceil(8)));
    let full_size = elements.and_then(|e| e.checked_mul(dtype.bytes()));
    let Some(expected) = full_size.or(tvm_size) else {
        return Err(format!("{label} has a shape too large to address ({ty})"));
    };
    let count_ok = u64::try_from(count)
        .map(|c| Some(c) == tvm_size || Some(c) == full_size)
        .unwrap_or(false);
    if !count_ok {
        return Err(format!(
            "{label} says its data is {count} bytes but {ty} needs {expected}"
        ));
    }
    let available = total - header_len as u64;
    if available < count as u64 {
        return Err(format!(
            "{label} is truncated: its header promises {count} data bytes but only {available} follow"
        ));
    }
    all.truncate(header_len + count as usize);
    all.drain(..header_len);
    Ok((ty, all))
}

/// Byte offsets of the elements of the array that is the value of the top-level member `member`
/// of a JSON object (empty if there is none). Assumes `json` is syntactically valid; on anything
/// else it returns a possibly meaningless but bounded result.
fn member_element_offsets(json: &str, member: &str) -> Vec<usize> {
    let b = json.as_bytes();
    let mut depth = 0usize;
    let mut last_string: Option<(usize, usize)> = None;
    let mut key_matches = false;
    let mut collecting = false;
    let mut expect_element = false;
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let starts_value = !matches!(c, b'}' | b']' | b',' | b':') && !c.is_ascii_whitespace();
        if collecting && depth == 2 && expect_element && starts_value {
            out.push(i);
            expect_element = false;
        }
        match c {
            b'"' => {
                let start = i + 1;
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    if b[i] == b'\\' {
                        i += 1;
                    }
                    i += 1;
                }
                if depth == 1 {
                    last_string = Some((start, i.min(b.len())));
                }
            }
            b':' if depth == 1 => {
                key_matches = last_string.is_some_and(|(s, e)| &b[s..e] == member.as_bytes());
            }
            b'{' | b'[' => {
                if depth == 1 && c == b'[' && key_matches {
                    collecting = true;
                    expect_element = true;
                    out.clear();
                }
                depth += 1;
            }
            b'}' | b']' => {
                depth = depth.saturating_sub(1);
                if depth <= 1 {
                    collecting = false;
                }
            }
            b',' => {
                if collecting && depth == 2 {
                    expect_element = true;
                }
                if depth == 1 {
                    key_matches = false;
                }
            }
            _ => {}
        }
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const REFERENCE_EXAMPLE: &str = r#"{"root": 1,
 "nodes": [
   {"type_key": ""},
   {"type_key": "Map", "keys": ["relay.Constant"], "data": [2]},
   {"type_key": "Array", "data": [3]},
   {"type_key": "relay.Constant",
    "attrs": {"_checked_type_": "6", "data": "0", "span": "0", "virtual_device_": "4"}},
   {"type_key": "VirtualDevice",
    "attrs": {"device_type_int": "-1", "memory_scope": "5", "target": "0", "virtual_device_id": "-1"}},
   {"type_key": "runtime.String"},
   {"type_key": "relay.TensorType", "attrs": {"dtype": "float32", "shape": "7", "span": "0"}},
   {"type_key": "Array", "data": [8]},
   {"type_key": "IntImm", "attrs": {"dtype": "int32", "span": "0", "value": "2"}}],
 "b64ndarrays": ["P6G0lvBAXt0AAAAAAAAAAAEAAAAAAAAAAQAAAAIgAQACAAAAAAAAAAgAAAAAAAAAAACAPwAAAEA="],
 "attrs": {"tvm_version": "0.9.dev0"}}"#;

    /// Raw NDArray bytes with every header field given explicitly.
    #[allow(clippy::too_many_arguments)]
    fn ndarray_raw(
        magic: u64,
        ndim: i32,
        code: u8,
        bits: u8,
        lanes: u16,
        shape: &[i64],
        count: i64,
        payload: usize,
    ) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&magic.to_le_bytes());
        v.extend_from_slice(&0u64.to_le_bytes());
        v.extend_from_slice(&1i32.to_le_bytes());
        v.extend_from_slice(&0i32.to_le_bytes());
        v.extend_from_slice(&ndim.to_le_bytes());
        v.push(code);
        v.push(bits);
        v.extend_from_slice(&lanes.to_le_bytes());
        for d in shape {
            v.extend_from_slice(&d.to_le_bytes());
        }
        v.extend_from_slice(&count.to_le_bytes());
        v.extend(std::iter::repeat_n(0u8, payload));
        v
    }

    /// A well-formed NDArray blob in base64, laid out like TVM's `SaveDLTensor`.
    fn ndarray(code: u8, bits: u8, lanes: u16, shape: &[i64]) -> String {
        let count = shape.iter().product::<i64>() * ((i64::from(bits) + 7) / 8);
        b64(&ndarray_raw(
            NDARRAY_MAGIC,
            shape.len() as i32,
            code,
            bits,
            lanes,
            shape,
            count,
            count as usize,
        ))
    }

    fn b64(bytes: &[u8]) -> String {
        base64::engine::general_purpose::STANDARD.encode(bytes)
    }

    /// A meta table of constants, one per blob, in the string-keyed map form.
    fn constants_json(blobs: &[String]) -> String {
        let n = blobs.len();
        let mut nodes = vec![
            json!({"type_key": ""}),
            json!({"type_key": "Map", "keys": ["relay.Constant"], "data": [2]}),
            json!({"type_key": "Array", "data": (3..3 + n).collect::<Vec<_>>()}),
        ];
        for i in 0..n {
            nodes.push(json!({"type_key": "relay.Constant",
                "attrs": {"_checked_type_": "0", "data": i.to_string(), "span": "0",
                          "virtual_device_": "0"}}));
        }
        json!({"root": 1, "nodes": nodes, "b64ndarrays": blobs,
               "attrs": {"tvm_version": "0.9.dev0"}})
        .to_string()
    }

    fn constants(table: &MetaTable) -> Vec<TensorType> {
        table.objects["relay.Constant"]
            .iter()
            .map(|o| match o {
                MetaObject::Constant(t) => t.clone(),
                other => panic!("not a constant: {other:?}"),
            })
            .collect()
    }

    fn err(json: &str) -> MetadataError {
        match parse_metadata(json) {
            Ok(t) => panic!("expected an error, got {t:?}"),
            Err(e) => e,
        }
    }

    #[test]
    fn reference_example_decodes_to_float32_of_2() {
        let table = parse_metadata(REFERENCE_EXAMPLE).unwrap();
        assert_eq!(table.objects.len(), 1);
        assert_eq!(constants(&table), vec![TensorType::new(&[2], DType::F32)]);
        assert_eq!(
            table.get("relay.Constant", 0),
            Some(&MetaObject::Constant(TensorType::new(&[2], DType::F32)))
        );
    }

    #[test]
    fn reference_blob_matches_helper() {
        let mut bytes = ndarray_raw(NDARRAY_MAGIC, 1, 2, 32, 1, &[2], 8, 0);
        bytes.extend_from_slice(&1f32.to_le_bytes());
        bytes.extend_from_slice(&2f32.to_le_bytes());
        assert_eq!(
            b64(&bytes),
            "P6G0lvBAXt0AAAAAAAAAAAEAAAAAAAAAAQAAAAIgAQACAAAAAAAAAAgAAAAAAAAAAACAPwAAAEA="
        );
    }

    #[test]
    fn constants_of_many_dtypes_and_ranks() {
        let blobs = vec![
            ndarray(2, 32, 1, &[2]),
            ndarray(2, 16, 1, &[8, 1, 5, 5]),
            ndarray(0, 64, 1, &[3]),
            ndarray(1, 1, 1, &[4]),
            ndarray(2, 32, 1, &[]),
            ndarray(4, 16, 1, &[2, 3]),
            ndarray(1, 8, 1, &[0, 7]),
            ndarray(0, 8, 4, &[5]),
        ];
        let table = parse_metadata(&constants_json(&blobs)).unwrap();
        let int8x4 = DType {
            code: DTypeCode::Int,
            bits: 8,
            lanes: 4,
        };
        assert_eq!(
            constants(&table),
            vec![
                TensorType::new(&[2], DType::F32),
                TensorType::new(&[8, 1, 5, 5], DType::F16),
                TensorType::new(&[3], DType::I64),
                TensorType::new(&[4], DType::BOOL),
                TensorType::scalar(DType::F32),
                TensorType::new(&[2, 3], DType::parse("bfloat16").unwrap()),
                TensorType::new(&[0, 7], DType::U8),
                TensorType::new(&[5], int8x4),
            ]
        );
        assert_eq!(
            constants(&table)[1].to_string(),
            "Tensor[(8, 1, 5, 5), float16]"
        );
    }

    #[test]
    fn lane_inclusive_byte_count_is_accepted() {
        let raw = ndarray_raw(NDARRAY_MAGIC, 1, 2, 32, 4, &[3], 48, 48);
        let table = parse_metadata(&constants_json(&[b64(&raw)])).unwrap();
        assert_eq!(
            constants(&table)[0].dtype,
            DType {
                code: DTypeCode::Float,
                bits: 32,
                lanes: 4
            }
        );
    }

    #[test]
    fn large_blob_spanning_many_chunks() {
        let blob = ndarray(2, 32, 1, &[64, 100]);
        assert!(blob.len() > 4 * B64_CHUNK);
        let table = parse_metadata(&constants_json(std::slice::from_ref(&blob))).unwrap();
        assert_eq!(
            constants(&table),
            vec![TensorType::new(&[64, 100], DType::F32)]
        );

        // A bad character far past the header is still caught.
        let mut bad = blob.clone().into_bytes();
        let k = bad.len() - 100;
        bad[k] = b'!';
        let e = err(&constants_json(&[String::from_utf8(bad).unwrap()]));
        assert_eq!(e.message, "b64ndarrays[0] is not valid base64");

        // Padding at an inner chunk boundary is rejected.
        let glued = format!("{}AA==AAAA", "A".repeat(B64_CHUNK - 4));
        let e = err(&constants_json(&[glued]));
        assert!(e.message.contains("not valid base64"), "{}", e.message);
    }

    #[test]
    fn shared_blob_and_meta_lookup() {
        let blob = ndarray(2, 16, 1, &[768]);
        let json = json!({"root": 1, "nodes": [
            {"type_key": ""},
            {"type_key": "Map", "keys": ["relay.Constant"], "data": [2]},
            {"type_key": "Array", "data": [3, 4, 3]},
            {"type_key": "relay.Constant", "attrs": {"data": "0", "span": "0"}},
            {"type_key": "relay.Constant", "attrs": {"data": "0", "span": "0"}},
        ], "b64ndarrays": [blob]})
        .to_string();
        let table = parse_metadata(&json).unwrap();
        assert_eq!(
            constants(&table),
            vec![TensorType::new(&[768], DType::F16); 3]
        );
    }

    /// The node list for a device table: CPU (1, 0, llvm), GPU (2, 0, cuda with host llvm,
    /// scope "global"), and an unconstrained device.
    fn devices_json() -> String {
        json!({"root": 1, "nodes": [
            {"type_key": ""},
            {"type_key": "Map", "keys": ["VirtualDevice"], "data": [2]},
            {"type_key": "Array", "data": [3, 8, 13]},
            // 3: CPU
            {"type_key": "VirtualDevice", "attrs": {"device_type_int": "1",
                "memory_scope": "4", "target": "5", "virtual_device_id": "0"}},
            {"type_key": "runtime.String"},
            {"type_key": "Target", "attrs": {"attrs": "7", "features": "7", "host": "0",
                "keys": "7", "kind": "6", "tag": "4"}},
            {"type_key": "TargetKind", "repr_str": "llvm"},
            {"type_key": "Map"},
            // 8: GPU
            {"type_key": "VirtualDevice", "attrs": {"device_type_int": "2",
                "memory_scope": "9", "target": "10", "virtual_device_id": "0"}},
            {"type_key": "runtime.String", "repr_str": "global"},
            {"type_key": "Target", "attrs": {"attrs": "7", "features": "7", "host": "12",
                "keys": "7", "kind": "11", "tag": "4"}},
            {"type_key": "TargetKind", "repr_str": "cuda"},
            {"type_key": "Target", "attrs": {"host": "null", "kind": "6", "tag": "4"}},
            // 13: unconstrained
            {"type_key": "VirtualDevice", "attrs": {"device_type_int": "-1",
                "memory_scope": "4", "target": "0", "virtual_device_id": "-1"}},
        ], "b64ndarrays": [], "attrs": {"tvm_version": "0.9.dev0"}})
        .to_string()
    }

    #[test]
    fn written_devices_read_back() {
        let dev = |t: Option<i32>, id: Option<i32>, target: Option<&str>, scope: Option<&str>| {
            VirtualDevice {
                device_type: t,
                virtual_device_id: id,
                target: target.map(str::to_string),
                memory_scope: scope.map(str::to_string),
            }
        };
        let devices = vec![
            dev(Some(2), Some(0), None, None),
            dev(Some(1), Some(0), Some("llvm"), None),
            dev(Some(2), Some(1), Some("cuda -host=llvm"), Some("global")),
            dev(None, None, None, Some("scope with \"quotes\" and \u{e9}")),
            dev(Some(16), None, Some("hexagon"), None),
        ];
        let json = write_devices(&devices);
        let table = parse_metadata(&json).unwrap();
        let read: Vec<MetaObject> = devices.iter().cloned().map(MetaObject::Device).collect();
        assert_eq!(table.objects["VirtualDevice"], read);
        assert_eq!(table.objects.len(), 1);
        // TVM's encoding: node 0 is null, the root map holds one array, unset fields are -1,
        // object fields are node indices, a non-printable scope is base64, targets name their kind.
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(v["root"], 1);
        assert_eq!(v["nodes"][0], json!({"type_key": ""}));
        assert_eq!(
            v["nodes"][1],
            json!({"type_key": "Map", "keys": ["VirtualDevice"], "data": [2]})
        );
        assert_eq!(v["attrs"]["tvm_version"], "0.19.0");
        assert_eq!(v["b64ndarrays"], json!([]));
        assert_eq!(
            v["nodes"][3],
            json!({"type_key": "VirtualDevice", "attrs": {"device_type_int": "2",
                "memory_scope": "4", "target": "0", "virtual_device_id": "0"}})
        );
        assert_eq!(v["nodes"][4], json!({"type_key": "runtime.String"}));
        assert!(json.contains(r#"{"type_key": "TargetKind", "repr_str": "cuda"}"#));
        assert!(json.contains(r#""type_key": "runtime.String", "repr_b64": ""#));
        let targets = v["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|n| n["type_key"] == "Target")
            .count();
        assert_eq!(targets, 4, "llvm, cuda with its llvm host, hexagon");
        // Options other than the host are not written, so they do not read back.
        let with_options = dev(Some(2), Some(0), Some("cuda -arch=sm_80 -host=llvm"), None);
        let table = parse_metadata(&write_devices(&[with_options])).unwrap();
        assert_eq!(
            table.get("VirtualDevice", 0),
            Some(&MetaObject::Device(dev(
                Some(2),
                Some(0),
                Some("cuda -host=llvm"),
                None
            )))
        );
    }

    #[test]
    fn virtual_devices() {
        let table = parse_metadata(&devices_json()).unwrap();
        let cpu = VirtualDevice {
            device_type: Some(1),
            virtual_device_id: Some(0),
            target: Some("llvm".to_string()),
            memory_scope: None,
        };
        let gpu = VirtualDevice {
            device_type: Some(2),
            virtual_device_id: Some(0),
            target: Some("cuda -host=llvm".to_string()),
            memory_scope: Some("global".to_string()),
        };
        assert_eq!(
            table.objects["VirtualDevice"],
            vec![
                MetaObject::Device(cpu),
                MetaObject::Device(gpu),
                MetaObject::Device(VirtualDevice::unconstrained()),
            ]
        );
    }

    #[test]
    fn old_device_type_name_and_kind_name_attr() {
        let json = json!({"root": 1, "nodes": [
            {"type_key": ""},
            {"type_key": "Map", "keys": ["VirtualDevice"], "data": [2]},
            {"type_key": "Array", "data": [3]},
            {"type_key": "VirtualDevice", "attrs": {"device_type": "2",
                "memory_scope": "0", "target": "4", "virtual_device_id": "1"}},
            {"type_key": "Target", "attrs": {"kind": "5"}},
            {"type_key": "TargetKind", "attrs": {"name": "6"}},
            {"type_key": "runtime.String", "repr_b64": b64(b"cuda")},
        ]})
        .to_string();
        let table = parse_metadata(&json).unwrap();
        assert_eq!(
            table.get("VirtualDevice", 0),
            Some(&MetaObject::Device(VirtualDevice {
                device_type: Some(2),
                virtual_device_id: Some(1),
                target: Some("cuda".to_string()),
                memory_scope: None,
            }))
        );
    }

    #[test]
    fn alternating_key_value_map_and_other_objects() {
        let json = json!({"root": 1, "nodes": [
            {"type_key": ""},
            {"type_key": "Map", "data": [2, 3, 5, 6]},
            {"type_key": "runtime.String", "repr_str": "relay.Constant"},
            {"type_key": "Array", "data": [4]},
            {"type_key": "relay.Constant", "attrs": {"data": "0"}},
            {"type_key": "runtime.String", "repr_str": "relay.attrs.Conv2DAttrs"},
            {"type_key": "Array", "data": [7, 7]},
            {"type_key": "relay.attrs.Conv2DAttrs", "attrs": {"channels": "null"}},
        ], "b64ndarrays": [ndarray(0, 32, 1, &[1, 2])]})
        .to_string();
        let table = parse_metadata(&json).unwrap();
        assert_eq!(
            table.objects.keys().collect::<Vec<_>>(),
            vec!["relay.Constant", "relay.attrs.Conv2DAttrs"]
        );
        assert_eq!(
            constants(&table),
            vec![TensorType::new(&[1, 2], DType::I32)]
        );
        assert_eq!(
            table.objects["relay.attrs.Conv2DAttrs"],
            vec![MetaObject::Other("relay.attrs.Conv2DAttrs".to_string()); 2]
        );
    }

    #[test]
    fn checked_type_fallback_with_symbolic_dim() {
        let json = json!({"root": 1, "nodes": [
            {"type_key": ""},
            {"type_key": "Map", "keys": ["relay.Constant", "tir.SizeVar"], "data": [2, 10]},
            {"type_key": "Array", "data": [3, 9]},
            {"type_key": "relay.Constant", "attrs": {"_checked_type_": "4", "span": "0"}},
            {"type_key": "relay.TensorType", "attrs": {"dtype": "float16", "shape": "5", "span": "0"}},
            {"type_key": "Array", "data": [6, 7, 11]},
            {"type_key": "IntImm", "attrs": {"dtype": "int32", "span": "0", "value": "8"}},
            {"type_key": "IntImm", "attrs": {"dtype": "int64", "span": "0", "value": "768"}},
            {"type_key": "relay.TensorType", "attrs": {"dtype": "bool", "shape": "8"}},
            {"type_key": "relay.Constant", "attrs": {"_checked_type_": "12", "data": "null"}},
            {"type_key": "Array", "data": [11]},
            {"type_key": "tir.SizeVar", "attrs": {"dtype": "int64", "name": "0"}},
            {"type_key": "relay.TensorType", "attrs": {"dtype": "bool", "shape": "13"}},
            {"type_key": "Array"},
        ], "b64ndarrays": []})
        .to_string();
        let table = parse_metadata(&json).unwrap();
        assert_eq!(
            constants(&table),
            vec![
                TensorType {
                    shape: vec![
                        Dim::Fixed(8),
                        Dim::Fixed(768),
                        Dim::Sym("meta[tir.SizeVar][0]".to_string())
                    ],
                    dtype: DType::F16
                },
                TensorType::scalar(DType::BOOL),
            ]
        );
        assert_eq!(
            table.objects["tir.SizeVar"],
            vec![MetaObject::Other("tir.SizeVar".to_string())]
        );
    }

    #[test]
    fn empty_map_is_an_empty_table() {
        let table =
            parse_metadata(r#"{"root": 1, "nodes": [{"type_key": ""}, {"type_key": "Map"}]}"#)
                .unwrap();
        assert!(table.is_empty());
    }

    /// Replaces node `idx` of `devices_json()`-style text built from a `json!` value.
    fn with_node(base: &str, idx: usize, node: serde_json::Value) -> String {
        let mut v: serde_json::Value = serde_json::from_str(base).unwrap();
        v["nodes"][idx] = node;
        v.to_string()
    }

    #[test]
    fn malformed_inputs_are_errors() {
        let good_blob = ndarray(2, 32, 1, &[2]);
        let good = constants_json(std::slice::from_ref(&good_blob));
        assert!(parse_metadata(&good).is_ok());

        // 1. invalid json
        let e = err("{\"root\": 1, \"nodes\": [");
        assert!(
            e.message.starts_with("invalid metadata json: "),
            "{}",
            e.message
        );
        assert!(e.offset.is_some());
        let text = "{\"root\": 1,\n \"nodes\": [}";
        let e = err(text);
        assert_eq!(e.offset, text.find('}'), "{e:?}");
        // not an object / empty
        assert_eq!(err("[1, [], []]").message, "metadata must be a json object");
        assert_eq!(err("   ").message, "metadata section is empty");
        // wrong field types
        assert!(err(r#"{"root": "1", "nodes": []}"#)
            .message
            .contains("invalid type"));
        assert!(err(r#"{"root": 1, "nodes": [{"attrs": {"a": 5}}]}"#)
            .message
            .contains("invalid type"));

        // 2. missing root
        assert_eq!(
            err(r#"{"nodes": [{"type_key": ""}]}"#).message,
            "metadata has no `root`"
        );
        assert_eq!(
            err(r#"{"root": 0}"#).message,
            "metadata has no `nodes` list"
        );

        // 3. root out of range
        assert_eq!(
            err(r#"{"root": 7, "nodes": [{"type_key": ""}, {"type_key": "Map"}]}"#).message,
            "root refers to node 7 but there are only 2 nodes"
        );

        // 4. non-map root
        let json = r#"{"root": 1, "nodes": [{"type_key": ""}, {"type_key": "Array", "data": []}]}"#;
        let e = err(json);
        assert_eq!(e.message, "root node 1 is a `Array`, not a map");
        assert_eq!(e.offset, json.find("{\"type_key\": \"Array\""));
        assert_eq!(
            err(r#"{"root": 0, "nodes": [{"type_key": ""}]}"#).message,
            "root node 0 is the null object, not a map"
        );

        // 5. bad base64
        let e = err(&constants_json(&["P6G0lvBAXt0*AAA".to_string()]));
        assert_eq!(e.message, "b64ndarrays[0] is not valid base64");
        let json = constants_json(&["P6G0lvBAXt0*AAA".to_string()]);
        assert_eq!(e.offset, json.find("\"P6G0"));
        let unpadded = good_blob.trim_end_matches('=').to_string();
        assert!(err(&constants_json(&[unpadded]))
            .message
            .contains("not valid base64"));

        // 6. wrong magic
        let raw = ndarray_raw(0x1234, 1, 2, 32, 1, &[2], 8, 8);
        let e = err(&constants_json(&[b64(&raw)]));
        assert!(
            e.message.contains("is not a serialized ndarray"),
            "{}",
            e.message
        );

        // 7. truncated header
        let raw = ndarray_raw(NDARRAY_MAGIC, 1, 2, 32, 1, &[2], 8, 8);
        let e = err(&constants_json(&[b64(&raw[..20])]));
        assert!(e.message.contains("is truncated"), "{}", e.message);
        let e = err(&constants_json(&[b64(&raw[..44])]));
        assert!(e.message.contains("is truncated"), "{}", e.message);
        // truncated payload
        let e = err(&constants_json(&[b64(&raw[..raw.len() - 1])]));
        assert_eq!(
            e.message,
            "b64ndarrays[0] is truncated: its header promises 8 data bytes but only 7 follow"
        );

        // 8. negative dim
        let raw = ndarray_raw(NDARRAY_MAGIC, 2, 2, 32, 1, &[2, -3], 8, 8);
        let e = err(&constants_json(&[b64(&raw)]));
        assert_eq!(
            e.message,
            "b64ndarrays[0] has negative dimension -3 (axis 1)"
        );

        // 9. huge ndim (and negative ndim)
        let raw = ndarray_raw(NDARRAY_MAGIC, 1_000_000, 2, 32, 1, &[2], 8, 8);
        let e = err(&constants_json(&[b64(&raw)]));
        assert!(e.message.contains("1000000 dimensions"), "{}", e.message);
        let raw = ndarray_raw(NDARRAY_MAGIC, -1, 2, 32, 1, &[2], 8, 8);
        assert!(err(&constants_json(&[b64(&raw)]))
            .message
            .contains("-1 dimensions"));

        // 10. byte count mismatch (and overflowing shape)
        let raw = ndarray_raw(NDARRAY_MAGIC, 1, 2, 32, 1, &[2], 9, 9);
        let e = err(&constants_json(&[b64(&raw)]));
        assert_eq!(
            e.message,
            "b64ndarrays[0] says its data is 9 bytes but Tensor[(2), float32] needs 8"
        );
        let raw = ndarray_raw(NDARRAY_MAGIC, 1, 2, 32, 1, &[2], -8, 0);
        assert!(err(&constants_json(&[b64(&raw)]))
            .message
            .contains("-8 bytes"));
        let big = i64::MAX;
        let raw = ndarray_raw(NDARRAY_MAGIC, 3, 2, 32, 1, &[big, big, big], 8, 8);
        let e = err(&constants_json(&[b64(&raw)]));
        assert!(e.message.contains("too large"), "{}", e.message);

        // 11. unknown dtype code, unsupported bits, zero lanes
        let raw = ndarray_raw(NDARRAY_MAGIC, 1, 6, 8, 1, &[2], 2, 2);
        assert_eq!(
            err(&constants_json(&[b64(&raw)])).message,
            "b64ndarrays[0] has unknown dtype code 6"
        );
        let raw = ndarray_raw(NDARRAY_MAGIC, 1, 2, 8, 1, &[2], 2, 2);
        assert!(err(&constants_json(&[b64(&raw)]))
            .message
            .contains("unsupported dtype float8"));
        let raw = ndarray_raw(NDARRAY_MAGIC, 1, 2, 32, 0, &[2], 8, 8);
        assert!(err(&constants_json(&[b64(&raw)]))
            .message
            .contains("unsupported dtype"));

        // 12. node index out of range
        let json = json!({"root": 1, "nodes": [
            {"type_key": ""},
            {"type_key": "Map", "keys": ["relay.Constant"], "data": [2]},
            {"type_key": "Array", "data": [99]},
        ]})
        .to_string();
        let e = err(&json);
        assert_eq!(
            e.message,
            "node 2 refers to node 99 but there are only 3 nodes"
        );
        let at = &json[e.offset.unwrap()..];
        assert!(at.starts_with('{'), "{at}");
        assert!(at[..at.find('}').unwrap()].contains("[99]"), "{at}");

        // data index out of b64ndarrays range
        let json = json!({"root": 1, "nodes": [
            {"type_key": ""},
            {"type_key": "Map", "keys": ["relay.Constant"], "data": [2]},
            {"type_key": "Array", "data": [3]},
            {"type_key": "relay.Constant", "attrs": {"data": "4"}},
        ], "b64ndarrays": [good_blob]})
        .to_string();
        assert_eq!(
            err(&json).message,
            "constant node 3 refers to b64ndarrays[4] but there is only 1 array"
        );
        // neither data nor checked type: typed by the reference's comment
        let json = with_node(&json, 3, json!({"type_key": "relay.Constant", "attrs": {}}));
        let table = parse_metadata(&json).unwrap();
        assert_eq!(
            table.get("relay.Constant", 0),
            Some(&MetaObject::UntypedConstant)
        );
        assert!(table.data.is_empty());

        // map shape problems
        let e = err(
            r#"{"root": 1, "nodes": [{"type_key": ""}, {"type_key": "Map", "keys": ["a", "b"], "data": [0]}]}"#,
        );
        assert_eq!(e.message, "map node 1 has 2 keys but 1 values");
        let e =
            err(r#"{"root": 1, "nodes": [{"type_key": ""}, {"type_key": "Map", "data": [0]}]}"#);
        assert!(e.message.contains("odd number"), "{}", e.message);
        let e =
            err(r#"{"root": 1, "nodes": [{"type_key": ""}, {"type_key": "Map", "data": [1, 1]}]}"#);
        assert_eq!(
            e.message,
            "node 1 refers to node 1, a `Map`, where a string is expected"
        );
        let e = err(
            r#"{"root": 1, "nodes": [{"type_key": ""}, {"type_key": "Map", "keys": ["x"], "data": [1]}]}"#,
        );
        assert_eq!(
            e.message,
            "meta table entry `x` is node 1, a `Map`, not an array"
        );
        let e = err(
            r#"{"root": 1, "nodes": [{"type_key": ""}, {"type_key": "Map", "keys": ["x", "x"], "data": [2, 2]}, {"type_key": "Array"}]}"#,
        );
        assert_eq!(e.message, "meta table key `x` appears twice");

        // device problems
        let devices = devices_json();
        let bad = with_node(
            &devices,
            3,
            json!({"type_key": "VirtualDevice", "attrs": {"device_type_int": "x1"}}),
        );
        assert_eq!(
            err(&bad).message,
            "node 3 has device_type_int=\"x1\", which is not an integer"
        );
        let bad = with_node(
            &devices,
            3,
            json!({"type_key": "VirtualDevice", "attrs": {"virtual_device_id": "-7"}}),
        );
        assert_eq!(err(&bad).message, "node 3 has invalid virtual_device_id -7");
        let bad = with_node(
            &devices,
            3,
            json!({"type_key": "VirtualDevice", "attrs": {"target": "4"}}),
        );
        assert_eq!(
            err(&bad).message,
            "node 3 refers to node 4, a `runtime.String`, where a target is expected"
        );
        let bad = with_node(
            &devices,
            3,
            json!({"type_key": "VirtualDevice", "attrs": {"memory_scope": "6"}}),
        );
        assert!(err(&bad).message.contains("where a string is expected"));
        let bad = with_node(&devices, 6, json!({"type_key": "TargetKind"}));
        assert_eq!(err(&bad).message, "target kind node 6 has no name");
        let bad = with_node(
            &devices,
            5,
            json!({"type_key": "Target", "attrs": {"kind": "500"}}),
        );
        assert_eq!(
            err(&bad).message,
            "node 5 refers to node 500 but there are only 14 nodes"
        );
    }

    #[test]
    fn cyclic_references_terminate() {
        // A target that is its own host, and a map that contains itself.
        let json = json!({"root": 1, "nodes": [
            {"type_key": ""},
            {"type_key": "Map", "keys": ["VirtualDevice", "Map"], "data": [2, 5]},
            {"type_key": "Array", "data": [3]},
            {"type_key": "VirtualDevice", "attrs": {"target": "4"}},
            {"type_key": "Target", "attrs": {"kind": "6", "host": "4"}},
            {"type_key": "Array", "data": [1, 5]},
            {"type_key": "TargetKind", "repr_str": "llvm"},
        ]})
        .to_string();
        let table = parse_metadata(&json).unwrap();
        assert_eq!(
            table.get("VirtualDevice", 0),
            Some(&MetaObject::Device(VirtualDevice {
                target: Some("llvm".to_string()),
                ..VirtualDevice::default()
            }))
        );
        assert_eq!(
            table.objects["Map"],
            vec![
                MetaObject::Other("Map".to_string()),
                MetaObject::Other("Array".to_string())
            ]
        );
    }

    #[test]
    fn deep_json_nesting_is_an_error_not_a_crash() {
        let deep = format!(
            "{{\"root\": {}{}}}",
            "[".repeat(100_000),
            "]".repeat(100_000)
        );
        assert!(parse_metadata(&deep).is_err());
        let deep = format!(
            "{{\"root\": 1, \"nodes\": [{{\"type_key\": {}}}]}}",
            "{\"a\":".repeat(50_000) + "1" + &"}".repeat(50_000)
        );
        assert!(parse_metadata(&deep).is_err());
    }

    #[test]
    fn element_offsets_scanner() {
        let json = r#" { "x": [1, {"nodes": [5]}], "nodes" : [ {"a": "]\"["}, [2, 3],"s", 7 ] } "#;
        let offs = member_element_offsets(json, "nodes");
        let starts: Vec<&str> = offs.iter().map(|&o| &json[o..o + 3]).collect();
        assert_eq!(starts, vec!["{\"a", "[2,", "\"s\"", "7 ]"]);
        assert!(member_element_offsets(json, "missing").is_empty());
        assert!(member_element_offsets("\"unterminated", "nodes").is_empty());
    }

    /// A constant entry with data.
    fn with_data(ty: TensorType, bytes: &[u8]) -> MetaEntry {
        MetaEntry::Constant {
            ty,
            data: Some(ConstData(bytes.to_vec().into())),
        }
    }

    /// The written meta table of one float32 constant [1, 2] is node for node, and byte for
    /// byte in its NDArray, the table of the reference example (TVM's layout).
    #[test]
    fn written_constant_is_tvms_encoding() {
        let mut bytes = 1f32.to_le_bytes().to_vec();
        bytes.extend_from_slice(&2f32.to_le_bytes());
        let entry = with_data(TensorType::new(&[2], DType::F32), &bytes);
        let json = write_metadata(&[("relay.Constant".to_string(), vec![entry])]);
        let ours: serde_json::Value = serde_json::from_str(&json).unwrap();
        let tvm: serde_json::Value = serde_json::from_str(REFERENCE_EXAMPLE).unwrap();
        assert_eq!(ours["root"], tvm["root"]);
        assert_eq!(ours["b64ndarrays"], tvm["b64ndarrays"]);
        // The reference example's int dims carry dtype int32 as TVM writes them.
        assert_eq!(ours["nodes"], tvm["nodes"], "{json}");
        assert_eq!(ours["attrs"]["tvm_version"], TVM_VERSION);
        let table = parse_metadata(&json).unwrap();
        assert_eq!(
            table.data[&("relay.Constant".to_string(), 0)].0.as_ref(),
            &bytes[..]
        );
    }

    /// Every blob TVM's layout produces (the test helper's) is written back unchanged.
    #[test]
    fn read_blobs_are_written_back_byte_for_byte() {
        let blobs = vec![
            ndarray(2, 32, 1, &[2]),
            ndarray(2, 16, 1, &[8, 1, 5, 5]),
            ndarray(0, 64, 1, &[3]),
            ndarray(1, 1, 1, &[4]),
            ndarray(2, 32, 1, &[]),
            ndarray(4, 16, 1, &[2, 3]),
            ndarray(1, 8, 1, &[0, 7]),
            ndarray(0, 8, 4, &[5]),
            b64(&ndarray_raw(NDARRAY_MAGIC, 1, 2, 32, 4, &[3], 48, 48)),
        ];
        let table = parse_metadata(&constants_json(&blobs)).unwrap();
        let entries: Vec<MetaEntry> = table.objects["relay.Constant"]
            .iter()
            .enumerate()
            .map(|(i, o)| match o {
                MetaObject::Constant(ty) => MetaEntry::Constant {
                    ty: ty.clone(),
                    data: table
                        .data
                        .get(&("relay.Constant".to_string(), i as u32))
                        .cloned(),
                },
                other => panic!("{other:?}"),
            })
            .collect();
        let json = write_metadata(&[("relay.Constant".to_string(), entries)]);
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(v["b64ndarrays"], json!(blobs));
        assert_eq!(parse_metadata(&json).unwrap(), table);
    }

    #[test]
    fn entries_without_data_shared_data_and_holes() {
        let f16 = TensorType::new(&[3], DType::F16);
        let shared = ConstData(vec![0u8, 60, 0, 64, 0, 66].into());
        let entries = vec![
            MetaEntry::Constant {
                ty: f16.clone(),
                data: Some(shared.clone()),
            },
            MetaEntry::Null,
            // No data: neither data nor a checked type is written.
            MetaEntry::Constant {
                ty: TensorType::new(&[4, 4], DType::F32),
                data: None,
            },
            MetaEntry::Constant {
                ty: f16.clone(),
                data: Some(shared.clone()),
            },
            // Data that does not fit its type is not written.
            with_data(TensorType::new(&[5], DType::F32), &[0; 19]),
            // Nor data of a type with a dynamic extent.
            MetaEntry::Constant {
                ty: TensorType {
                    shape: vec![Dim::Any],
                    dtype: DType::I8,
                },
                data: Some(ConstData(vec![1u8].into())),
            },
        ];
        let json = write_metadata(&[("relay.Constant".to_string(), entries)]);
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(v["b64ndarrays"].as_array().unwrap().len(), 1, "{json}");
        let table = parse_metadata(&json).unwrap();
        assert_eq!(
            table.objects["relay.Constant"],
            vec![
                MetaObject::Constant(f16.clone()),
                MetaObject::Other(String::new()),
                MetaObject::UntypedConstant,
                MetaObject::Constant(f16),
                MetaObject::UntypedConstant,
                MetaObject::UntypedConstant,
            ]
        );
        let keys: Vec<u32> = table.data.keys().map(|(_, i)| *i).collect();
        assert_eq!(keys, vec![0, 3]);
        assert_eq!(table.data[&("relay.Constant".to_string(), 3)], shared);
        // The array refers to the null node for the hole.
        assert_eq!(v["nodes"][2]["data"][1], 0);
    }

    #[test]
    fn devices_and_constants_share_one_section() {
        let cpu = VirtualDevice {
            device_type: Some(1),
            virtual_device_id: Some(0),
            target: Some("llvm".to_string()),
            memory_scope: None,
        };
        let json = write_metadata(&[
            (
                "VirtualDevice".to_string(),
                vec![MetaEntry::Device(cpu.clone())],
            ),
            (
                "relay.Constant".to_string(),
                vec![with_data(
                    TensorType::scalar(DType::I64),
                    &7i64.to_le_bytes(),
                )],
            ),
        ]);
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(
            v["nodes"][1]["keys"],
            json!(["VirtualDevice", "relay.Constant"])
        );
        let table = parse_metadata(&json).unwrap();
        assert_eq!(
            table.get("VirtualDevice", 0),
            Some(&MetaObject::Device(cpu))
        );
        assert_eq!(
            table.get("relay.Constant", 0),
            Some(&MetaObject::Constant(TensorType::scalar(DType::I64)))
        );
        assert_eq!(
            table.data[&("relay.Constant".to_string(), 0)].0.as_ref(),
            &7i64.to_le_bytes()
        );
        // An empty table is an empty map.
        let empty = write_metadata(&[]);
        assert!(parse_metadata(&empty).unwrap().is_empty());
    }

    /// A dtype of the property test, with its TVM code and bits.
    const PROP_DTYPES: [(DType, u8, u8); 5] = [
        (DType::F32, 2, 32),
        (DType::F16, 2, 16),
        (DType::I32, 0, 32),
        (DType::I64, 0, 64),
        (DType::BOOL, 1, 1),
    ];

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config {
            cases: 256,
            failure_persistence: None,
            ..Default::default()
        })]

        /// Random constants (float32, float16, int32, int64 and bool; scalars, zero-size and
        /// ordinary shapes; any bytes, NaN payloads included) survive writing and reading byte
        /// for byte, and each NDArray is laid out as TVM's SaveDLTensor lays it out.
        #[test]
        fn random_constants_round_trip(
            specs in proptest::collection::vec(
                (0usize..5, proptest::collection::vec(0i64..4, 0..4), proptest::prelude::any::<u64>()),
                1..6,
            ),
        ) {
            let mut entries = Vec::new();
            let mut expected = Vec::new();
            for (d, shape, seed) in &specs {
                let (dtype, code, bits) = PROP_DTYPES[*d];
                let n: i64 = shape.iter().product();
                let size = n as usize * usize::from(bits).div_ceil(8);
                let mut rng = Rng(seed | 1);
                let bytes: Vec<u8> = (0..size)
                    .map(|_| if dtype == DType::BOOL { (rng.next() & 1) as u8 } else { rng.next() as u8 })
                    .collect();
                let ty = TensorType::new(shape, dtype);
                let mut blob = ndarray_raw(NDARRAY_MAGIC, shape.len() as i32, code, bits, 1, shape, size as i64, 0);
                blob.extend_from_slice(&bytes);
                proptest::prop_assert_eq!(ndarray_blob(&ty, &bytes), Some(blob.clone()));
                expected.push((ty.clone(), bytes.clone(), b64(&blob)));
                entries.push(with_data(ty, &bytes));
            }
            let json = write_metadata(&[("relay.Constant".to_string(), entries)]);
            let table = parse_metadata(&json).unwrap();
            let v: serde_json::Value = serde_json::from_str(&json).unwrap();
            for (i, (ty, bytes, blob)) in expected.iter().enumerate() {
                proptest::prop_assert_eq!(
                    table.get("relay.Constant", i as u32),
                    Some(&MetaObject::Constant(ty.clone()))
                );
                let data = &table.data[&("relay.Constant".to_string(), i as u32)];
                proptest::prop_assert_eq!(data.0.as_ref(), &bytes[..]);
                proptest::prop_assert_eq!(v["b64ndarrays"][i].as_str(), Some(blob.as_str()));
            }
        }
    }

    /// xorshift64*.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }

        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    #[test]
    fn fuzzed_inputs_never_panic() {
        let blobs = vec![
            ndarray(2, 32, 1, &[2]),
            ndarray(2, 16, 1, &[8, 1, 5, 5]),
            ndarray(1, 1, 1, &[]),
        ];
        let mut bases = vec![
            REFERENCE_EXAMPLE.to_string(),
            constants_json(&blobs),
            devices_json(),
        ];
        // A combined table, so that mutated indices can land on every kind of node.
        let mut combined: serde_json::Value = serde_json::from_str(&devices_json()).unwrap();
        combined["b64ndarrays"] = json!(blobs);
        bases.push(combined.to_string());

        const ALPHABET: &[u8] = b"0123456789-\"{}[],:nul AP=/+";
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        let (mut ok, mut errs) = (0, 0);
        for round in 0..2000 {
            let mut bytes = bases[round % bases.len()].clone().into_bytes();
            for _ in 0..1 + rng.below(4) {
                let len = bytes.len();
                let pos = rng.below(len);
                match rng.below(5) {
                    0 => bytes[pos] = rng.next() as u8,
                    1 => bytes[pos] = ALPHABET[rng.below(ALPHABET.len())],
                    2 => {
                        bytes.remove(pos);
                    }
                    3 => bytes.insert(pos, ALPHABET[rng.below(ALPHABET.len())]),
                    _ => bytes.truncate(pos),
                }
                if bytes.is_empty() {
                    break;
                }
            }
            let text = String::from_utf8_lossy(&bytes);
            match std::panic::catch_unwind(|| parse_metadata(&text)) {
                Ok(Ok(_)) => ok += 1,
                Ok(Err(e)) => {
                    assert!(e.offset.is_none_or(|o| o <= text.len()), "{e:?}");
                    errs += 1;
                }
                Err(_) => panic!("parse_metadata panicked on round {round}: {text}"),
            }
        }
        assert_eq!(ok + errs, 2000);
        assert!(ok > 0 && errs > 0, "ok={ok} errs={errs}");
    }
}
