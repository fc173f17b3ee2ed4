//! Source files and byte spans.
//!
//! Every file the tool reads (models, rules, fixtures) is registered in a [`SourceMap`] and
//! identified by a [`FileId`]. A [`Span`] is a half-open byte range inside one file. Spans are kept
//! beside IR nodes (never inside the node payloads) so that structural comparisons ignore them.

use std::fmt;

/// Identifies one file in a [`SourceMap`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct FileId(pub u32);

/// A half-open byte range `start..end` inside one file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Span {
    /// The file the range belongs to.
    pub file: FileId,
    /// First byte of the range.
    pub start: u32,
    /// One past the last byte of the range.
    pub end: u32,
}

impl Span {
    /// Creates a span from byte offsets.
    pub fn new(file: FileId, start: usize, end: usize) -> Span {
        Span {
            file,
            start: start.min(u32::MAX as usize) as u32,
            end: end.min(u32::MAX as usize) as u32,
        }
    }

    /// The smallest span covering both `self` and `other` (which must be in the same file).
    pub fn to(self, other: Span) -> Span {
        Span {
            file: self.file,
            start: self.start.min(other.start),
            end: self.end.max(other.end),
        }
    }

    /// The byte range as `usize`s, for slicing.
    pub fn range(self) -> std::ops::Range<usize> {
        self.start as usize..self.end as usize
    }

    /// Number of bytes covered.
    pub fn len(self) -> usize {
        (self.end - self.start) as usize
    }

    /// Whether the span covers no bytes.
    pub fn is_empty(self) -> bool {
        self.start == self.end
    }
}

impl fmt::Display for Span {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}..{}", self.start, self.end)
    }
}

/// One source file: its display name, its text and the byte offsets of its line starts.
#[derive(Clone, Debug)]
pub struct SourceFile {
    /// Name used in diagnostics (usually the path as given on the command line).
    pub name: String,
    /// The complete text.
    pub text: String,
    line_starts: Vec<u32>,
    /// For the node listing of a model without source text (an ONNX file), the node each line
    /// describes; empty for a text file.
    pub nodes: Vec<ListedNode>,
}

/// A node of a model file without source text, as a line of its node listing describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListedNode {
    /// Position in the file's node list, from 0.
    pub index: usize,
    /// The node's name (may be empty).
    pub name: String,
    /// The operator type, such as `Conv`.
    pub op_type: String,
}

impl SourceFile {
    fn new(name: String, text: String) -> SourceFile {
        let mut line_starts = vec![0u32];
        line_starts.extend(
            text.bytes()
                .enumerate()
                .filter(|&(_, b)| b == b'\n')
                .map(|(i, _)| (i + 1) as u32),
        );
        SourceFile {
            name,
            text,
            line_starts,
            nodes: Vec::new(),
        }
    }

    /// 1-based line and column (in bytes) of a byte offset.
    pub fn line_col(&self, offset: u32) -> (usize, usize) {
        let line = match self.line_starts.binary_search(&offset) {
            Ok(i) => i,
            Err(i) => i - 1,
        };
        (line + 1, (offset - self.line_starts[line]) as usize + 1)
    }

    /// Byte offsets at which lines start (always begins with 0).
    pub fn line_starts(&self) -> &[u32] {
        &self.line_starts
    }
}

/// All files known to one run of the tool.
#[derive(Clone, Debug, Default)]
pub struct SourceMap {
    files: Vec<SourceFile>,
}

impl SourceMap {
    /// An empty map.
    pub fn new() -> SourceMap {
        SourceMap::default()
    }

    /// Registers a file and returns its id.
    pub fn add(&mut self, name: impl Into<String>, text: impl Into<String>) -> FileId {
        let id = FileId(self.files.len() as u32);
        self.files.push(SourceFile::new(name.into(), text.into()));
        id
    }

    /// Registers the node listing of a model without source text: line `i` of `text`
    /// describes `nodes[i]`.
    pub fn add_listing(
        &mut self,
        name: impl Into<String>,
        text: impl Into<String>,
        nodes: Vec<ListedNode>,
    ) -> FileId {
        let id = self.add(name, text);
        self.files[id.0 as usize].nodes = nodes;
        id
    }

    /// The model node a span of a node listing points at (`None` for a text file).
    pub fn listed_node(&self, span: Span) -> Option<&ListedNode> {
        let file = self.files.get(span.file.0 as usize)?;
        if file.nodes.is_empty() {
            return None;
        }
        let (line, _) = file.line_col(span.start);
        file.nodes.get(line - 1)
    }

    /// The file with the given id.
    ///
    /// # Panics
    /// Panics if the id does not come from this map (a programming error, never user input).
    pub fn get(&self, id: FileId) -> &SourceFile {
        &self.files[id.0 as usize]
    }

    /// The text of a file.
    pub fn text(&self, id: FileId) -> &str {
        &self.get(id).text
    }

    /// The text covered by a span.
    pub fn slice(&self, span: Span) -> &str {
        self.text(span.file).get(span.range()).unwrap_or("")
    }

    /// All files, in registration order.
    pub fn files(&self) -> impl Iterator<Item = (FileId, &SourceFile)> {
        self.files
            .iter()
            .enumerate()
            .map(|(i, f)| (FileId(i as u32), f))
    }

    /// 1-based line of the start of a span.
    pub fn line_of(&self, span: Span) -> usize {
        self.get(span.file).line_col(span.start).0
    }
}

/// The default limit on the size of one input file (model, rules file, cost table): 1 GiB.
pub const DEFAULT_MAX_INPUT_BYTES: u64 = 1 << 30;

/// The largest limit that can be set: spans are 32-bit byte offsets.
pub const MAX_INPUT_BYTES_CEILING: u64 = u32::MAX as u64;

static MAX_INPUT_BYTES: std::sync::atomic::AtomicU64 =
    std::sync::atomic::AtomicU64::new(DEFAULT_MAX_INPUT_BYTES);

/// Sets the process-wide limit on the size of one input file (`--max-input-size`), clamped to
/// [`MAX_INPUT_BYTES_CEILING`].
pub fn set_max_input_bytes(limit: u64) {
    MAX_INPUT_BYTES.store(
        limit.min(MAX_INPUT_BYTES_CEILING),
        std::sync::atomic::Ordering::Relaxed,
    );
}

/// The process-wide limit on the size of one input file.
pub fn max_input_bytes() -> u64 {
    MAX_INPUT_BYTES.load(std::sync::atomic::Ordering::Relaxed)
}

/// Why an input file could not be read as text.
#[derive(Debug)]
pub enum ReadError {
    /// The file system said no.
    Io(std::io::Error),
    /// The file holds more than the input limit (the limit is given).
    TooLarge(u64),
    /// The bytes are not UTF-8: the text up to a little past the first bad byte (decoded
    /// lossily, for showing it) and the offset of that byte.
    NotUtf8 {
        /// The prefix of the file, lossily decoded.
        text: String,
        /// Offset of the first invalid byte.
        at: usize,
    },
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadError::Io(e) => write!(f, "{e}"),
            ReadError::TooLarge(limit) => write!(
                f,
                "the file is larger than the input limit of {} (raise it with `--max-input-size`)",
                human_bytes(*limit)
            ),
            ReadError::NotUtf8 { at, .. } => {
                write!(
                    f,
                    "the file is not valid UTF-8 (invalid byte at offset {at})"
                )
            }
        }
    }
}

/// Bytes as `1 GiB`, `512 MiB`, `3 KiB` or `17 bytes`: the largest unit that divides them, else
/// bytes.
pub fn human_bytes(n: u64) -> String {
    for (shift, unit) in [(30, "GiB"), (20, "MiB"), (10, "KiB")] {
        if n >= 1 << shift && n.is_multiple_of(1 << shift) {
            return format!("{} {unit}", n >> shift);
        }
    }
    format!("{n} bytes")
}

/// Reads a file as UTF-8 text, reading at most the input limit ([`max_input_bytes`]): a larger
/// file, or an endless one such as `/dev/zero`, stops with [`ReadError::TooLarge`] once the limit
/// is passed, without buffering more.
pub fn read_text(path: &std::path::Path) -> Result<String, ReadError> {
    let bytes = read_bytes(path)?;
    String::from_utf8(bytes).map_err(|e| {
        let at = e.utf8_error().valid_up_to();
        let mut text = String::from_utf8_lossy(e.as_bytes()).into_owned();
        text.truncate(text.floor_char_boundary(at + 3));
        ReadError::NotUtf8 { text, at }
    })
}

/// Reads a file's bytes under the same input limit as [`read_text`] (binary inputs such as
/// `.npy` files).
pub fn read_bytes(path: &std::path::Path) -> Result<Vec<u8>, ReadError> {
    use std::io::Read;
    let limit = max_input_bytes();
    let file = std::fs::File::open(path).map_err(ReadError::Io)?;
    // Regular files say their size: refuse at once rather than after reading a gigabyte.
    if let Ok(meta) = file.metadata() {
        if meta.is_dir() {
            return Err(ReadError::Io(std::io::Error::other("it is a directory")));
        }
        if meta.is_file() && meta.len() > limit {
            return Err(ReadError::TooLarge(limit));
        }
    }
    let mut bytes = Vec::new();
    file.take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(ReadError::Io)?;
    if bytes.len() as u64 > limit {
        return Err(ReadError::TooLarge(limit));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_col_counts_from_one() {
        let mut sm = SourceMap::new();
        let f = sm.add("a", "ab\ncd\n\nx");
        let file = sm.get(f);
        assert_eq!(file.line_col(0), (1, 1));
        assert_eq!(file.line_col(1), (1, 2));
        assert_eq!(file.line_col(3), (2, 1));
        assert_eq!(file.line_col(6), (3, 1));
        assert_eq!(file.line_col(7), (4, 1));
    }

    #[test]
    fn span_union_covers_both() {
        let a = Span::new(FileId(0), 3, 5);
        let b = Span::new(FileId(0), 1, 4);
        assert_eq!(a.to(b), Span::new(FileId(0), 1, 5));
    }
}
