//! Diagnostics: the one user-facing error type of every phase.
//!
//! Each phase keeps its own small internal error type and converts it into a [`Diagnostic`] at its
//! boundary. A diagnostic has a severity, a stable [`Code`] (listed in `docs/diagnostics.md`), a
//! lowercase message, a primary label on the offending span, optional secondary labels (for example
//! "first defined here") and notes. This is the only module that talks to `codespan-reporting`.

mod codes;

pub use codes::*;

use crate::source::{FileId, SourceMap, Span};
use codespan_reporting::diagnostic as cs;
use codespan_reporting::term;
use std::ops::Range;

/// A stable diagnostic code such as `E0201`, with a short title.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Code {
    /// The code itself, e.g. `"E0201"`.
    pub id: &'static str,
    /// A short, lowercase title for the documentation index.
    pub title: &'static str,
}

/// How serious a diagnostic is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    /// Stops the phase from producing a result.
    Error,
    /// Reported, but the result is still produced.
    Warning,
}

/// A labelled span.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Label {
    /// The range the label points at.
    pub span: Span,
    /// Text shown next to the caret (may be empty).
    pub message: String,
    /// Whether this is the primary label (exactly one per diagnostic, when it has a span).
    pub primary: bool,
}

/// One message for the user.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    /// Error or warning.
    pub severity: Severity,
    /// Stable code.
    pub code: Code,
    /// Lowercase message without a trailing period.
    pub message: String,
    /// Primary label first, then secondary labels.
    pub labels: Vec<Label>,
    /// Free-form notes and help lines.
    pub notes: Vec<String>,
    /// Where in a model without source text (an ONNX file) the problem is, when it has no span.
    pub place: Option<Box<ModelPlace>>,
}

/// A place in a model file that has no text to point into: the file, and the node or tensor
/// concerned. Rendered as the first note of the diagnostic.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ModelPlace {
    /// The model file as given by the user (or a description such as `<bytes>`).
    pub file: String,
    /// The node: its position in the file's node list, its name (may be empty) and operator.
    pub node: Option<NodePlace>,
    /// The tensor or value concerned, when the problem is about one.
    pub tensor: Option<String>,
    /// The operator set version in force for the node's domain, when known.
    pub opset: Option<i64>,
}

/// A node of a model file, as named in a [`ModelPlace`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodePlace {
    /// Position in the file's node list, from 0.
    pub index: usize,
    /// The node's name (ONNX names are optional, so it may be empty).
    pub name: String,
    /// The operator type, such as `Gemm`.
    pub op_type: String,
}

impl std::fmt::Display for ModelPlace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "in {}", self.file)?;
        if let Some(n) = &self.node {
            write!(f, ", node #{} ", n.index)?;
            if !n.name.is_empty() {
                write!(f, "`{}` ", n.name)?;
            }
            write!(f, "({})", n.op_type)?;
        }
        if let Some(t) = &self.tensor {
            write!(f, ", value `{t}`")?;
        }
        if let Some(v) = self.opset {
            write!(f, ", opset {v}")?;
        }
        Ok(())
    }
}

impl Diagnostic {
    /// A new error with the given code and message and no labels yet.
    pub fn error(code: Code, message: impl Into<String>) -> Diagnostic {
        Diagnostic {
            severity: Severity::Error,
            code,
            message: message.into(),
            labels: Vec::new(),
            notes: Vec::new(),
            place: None,
        }
    }

    /// A new warning with the given code and message and no labels yet.
    pub fn warning(code: Code, message: impl Into<String>) -> Diagnostic {
        Diagnostic {
            severity: Severity::Warning,
            ..Diagnostic::error(code, message)
        }
    }

    /// Adds the primary label.
    pub fn with_primary(mut self, span: Span, message: impl Into<String>) -> Diagnostic {
        self.labels.insert(
            0,
            Label {
                span,
                message: message.into(),
                primary: true,
            },
        );
        self
    }

    /// Adds a secondary label.
    pub fn with_secondary(mut self, span: Span, message: impl Into<String>) -> Diagnostic {
        self.labels.push(Label {
            span,
            message: message.into(),
            primary: false,
        });
        self
    }

    /// Adds a note.
    pub fn with_note(mut self, note: impl Into<String>) -> Diagnostic {
        self.notes.push(note.into());
        self
    }

    /// Sets the place in a model file without text (for diagnostics that have no span).
    pub fn with_place(mut self, place: ModelPlace) -> Diagnostic {
        self.place = Some(Box::new(place));
        self
    }

    /// The span of the primary label, if any.
    pub fn primary_span(&self) -> Option<Span> {
        self.labels.iter().find(|l| l.primary).map(|l| l.span)
    }

    /// Whether this diagnostic is an error.
    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }
}

/// The diagnostic for a file that is not UTF-8 ([`crate::source::ReadError::NotUtf8`]):
/// registers the readable prefix `text` under `path` and points at the first invalid byte, at
/// offset `at` (shown as the replacement character).
pub fn not_utf8(
    sources: &mut SourceMap,
    path: &std::path::Path,
    text: String,
    at: usize,
    code: Code,
) -> Diagnostic {
    let end = (at + char::REPLACEMENT_CHARACTER.len_utf8()).min(text.len());
    let file = sources.add(path.display().to_string(), text);
    Diagnostic::error(code, "the file is not valid UTF-8")
        .with_primary(Span::new(file, at, end), "invalid byte sequence here")
}

/// An ordered collection of diagnostics produced by one or more phases.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Diagnostics {
    items: Vec<Diagnostic>,
}

impl Diagnostics {
    /// No diagnostics.
    pub fn new() -> Diagnostics {
        Diagnostics::default()
    }

    /// Appends one diagnostic.
    pub fn push(&mut self, d: Diagnostic) {
        self.items.push(d);
    }

    /// Appends all diagnostics of another collection.
    pub fn extend(&mut self, other: Diagnostics) {
        self.items.extend(other.items);
    }

    /// Whether any diagnostic is an error.
    pub fn has_errors(&self) -> bool {
        self.items.iter().any(Diagnostic::is_error)
    }

    /// Number of diagnostics.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The diagnostics in the order they were reported.
    pub fn iter(&self) -> std::slice::Iter<'_, Diagnostic> {
        self.items.iter()
    }

    /// Sorts by file, then position, keeping the report order for equal positions.
    pub fn sort_by_position(&mut self) {
        self.items
            .sort_by_key(|d| d.primary_span().map(|s| (s.file, s.start, s.end)));
    }

    /// Renders all diagnostics as plain text (no colours), as used in snapshots.
    pub fn render_plain(&self, sources: &SourceMap) -> String {
        let files = Files::new(sources);
        let mut out = String::new();
        for d in &self.items {
            out.push_str(&render_with(&files, d, sources));
        }
        out
    }
}

impl From<Diagnostic> for Diagnostics {
    fn from(d: Diagnostic) -> Diagnostics {
        Diagnostics { items: vec![d] }
    }
}

impl IntoIterator for Diagnostics {
    type Item = Diagnostic;
    type IntoIter = std::vec::IntoIter<Diagnostic>;
    fn into_iter(self) -> Self::IntoIter {
        self.items.into_iter()
    }
}

impl<'a> IntoIterator for &'a Diagnostics {
    type Item = &'a Diagnostic;
    type IntoIter = std::slice::Iter<'a, Diagnostic>;
    fn into_iter(self) -> Self::IntoIter {
        self.items.iter()
    }
}

/// Whether `c` would act on a terminal rather than show: C0 controls other than tab, line
/// feed and carriage return, DEL and the C1 controls (ESC starts escape sequences; `\u{9b}` is
/// a one-character CSI), and the bidirectional embeddings, overrides and isolates
/// (U+202A-U+202E, U+2066-U+2069), which reorder what follows them on the line.
fn is_control(c: char) -> bool {
    (c.is_control() && !matches!(c, '\t' | '\n' | '\r')) || is_bidi(c)
}

/// The bidirectional formatting characters that change the order text is shown in.
fn is_bidi(c: char) -> bool {
    matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `text` with every character `escape` picks written as a visible escape such as `\u{1b}`.
fn escape_with(text: &str, escape: impl Fn(char) -> bool) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(&escape) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if escape(c) {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// `text` with every terminal control character (see [`is_control`]), carriage return and
/// line feed written as a visible escape such as `\u{1b}`, so user text in a message (a string
/// attribute, a name, a file name) cannot move the cursor, recolour or retitle the terminal,
/// overwrite its line (`\r`) or start a line that looks like another diagnostic (`\n`). Every
/// diagnostic's message, labels, model place and file names go through it when rendered;
/// notes go through [`escape_note`].
pub fn escape_controls(text: &str) -> std::borrow::Cow<'_, str> {
    escape_with(text, |c| is_control(c) || matches!(c, '\n' | '\r'))
}

/// A note as [`escape_controls`] writes it, but keeping its line feeds: a note may hold
/// several lines (a tool's output), which the renderer indents under its `= `, so none can
/// pass for a diagnostic of its own. Carriage returns are escaped.
pub fn escape_note(text: &str) -> std::borrow::Cow<'_, str> {
    escape_with(text, |c| is_control(c) || c == '\r')
}

/// `text` with each control character, and each carriage return not ending a line, replaced
/// by `?` repeated to its UTF-8 length, so the source lines shown under a diagnostic keep
/// their byte offsets but carry no terminal controls.
fn blank_controls(text: &str) -> std::borrow::Cow<'_, str> {
    let lone_cr = |i: usize, c: char| c == '\r' && text.as_bytes().get(i + 1) != Some(&b'\n');
    if !text
        .char_indices()
        .any(|(i, c)| is_control(c) || lone_cr(i, c))
    {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    for (i, c) in text.char_indices() {
        if is_control(c) || lone_cr(i, c) {
            out.extend(std::iter::repeat_n('?', c.len_utf8()));
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// The source map as codespan sees it: names and texts without terminal controls (cleaned
/// once per rendering, only for files that have any).
type Clean<'a> = (std::borrow::Cow<'a, str>, std::borrow::Cow<'a, str>);

struct Files<'a> {
    map: &'a SourceMap,
    clean: Vec<std::cell::OnceCell<Clean<'a>>>,
}

impl<'a> Files<'a> {
    fn new(map: &'a SourceMap) -> Files<'a> {
        let clean = map.files().map(|_| std::cell::OnceCell::new()).collect();
        Files { map, clean }
    }

    fn clean(&self, id: FileId) -> &Clean<'a> {
        self.clean[id.0 as usize].get_or_init(|| {
            let f = self.map.get(id);
            (escape_controls(&f.name), blank_controls(&f.text))
        })
    }
}

impl<'a> codespan_reporting::files::Files<'a> for Files<'a> {
    type FileId = FileId;
    type Name = &'a str;
    type Source = &'a str;

    fn name(&'a self, id: FileId) -> Result<&'a str, codespan_reporting::files::Error> {
        Ok(&self.clean(id).0)
    }

    fn source(&'a self, id: FileId) -> Result<&'a str, codespan_reporting::files::Error> {
        Ok(&self.clean(id).1)
    }

    fn line_index(
        &'a self,
        id: FileId,
        byte_index: usize,
    ) -> Result<usize, codespan_reporting::files::Error> {
        let starts = self.map.get(id).line_starts();
        Ok(match starts.binary_search(&(byte_index as u32)) {
            Ok(i) => i,
            Err(i) => i - 1,
        })
    }

    fn line_range(
        &'a self,
        id: FileId,
        line_index: usize,
    ) -> Result<Range<usize>, codespan_reporting::files::Error> {
        let file = self.map.get(id);
        let starts = file.line_starts();
        let start =
            *starts
                .get(line_index)
                .ok_or(codespan_reporting::files::Error::LineTooLarge {
                    given: line_index,
                    max: starts.len() - 1,
                })? as usize;
        let end = starts
            .get(line_index + 1)
            .map(|&e| e as usize)
            .unwrap_or(file.text.len());
        Ok(start..end)
    }
}

fn to_codespan(d: &Diagnostic, sources: &SourceMap) -> cs::Diagnostic<FileId> {
    let severity = match d.severity {
        Severity::Error => cs::Severity::Error,
        Severity::Warning => cs::Severity::Warning,
    };
    let labels = d
        .labels
        .iter()
        .map(|l| {
            let len = sources.get(l.span.file).text.len();
            let start = (l.span.start as usize).min(len);
            let end = (l.span.end as usize).clamp(start, len);
            let style = if l.primary {
                cs::LabelStyle::Primary
            } else {
                cs::LabelStyle::Secondary
            };
            cs::Label::new(style, l.span.file, start..end)
                .with_message(escape_controls(&l.message).into_owned())
        })
        .collect();
    cs::Diagnostic::new(severity)
        .with_code(d.code.id)
        .with_message(escape_controls(&d.message).into_owned())
        .with_labels(labels)
        .with_notes(
            d.place
                .iter()
                .map(|p| escape_controls(&p.to_string()).into_owned())
                .chain(d.notes.iter().map(|n| escape_note(n).into_owned()))
                .collect(),
        )
}

/// Renders one diagnostic as plain text (file, line and column, caret span, code, notes).
pub fn render_plain(d: &Diagnostic, sources: &SourceMap) -> String {
    render_with(&Files::new(sources), d, sources)
}

fn render_with<'a>(files: &'a Files<'a>, d: &Diagnostic, sources: &SourceMap) -> String {
    let config = term::Config::default();
    term::emit_into_string(&config, files, &to_codespan(d, sources)).unwrap_or_else(|_| {
        format!(
            "{}[{}]: {}\n",
            severity_word(d),
            d.code.id,
            escape_controls(&d.message)
        )
    })
}

fn severity_word(d: &Diagnostic) -> &'static str {
    match d.severity {
        Severity::Error => "error",
        Severity::Warning => "warning",
    }
}

/// A diagnostic as it was emitted while [`capture`] held the emissions of its thread: the code,
/// the severity, the message and the text standard error would have shown (uncoloured).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Emitted {
    /// Error or warning.
    pub severity: Severity,
    /// The stable code.
    pub code: Code,
    /// The message alone.
    pub message: String,
    /// The whole rendered diagnostic: position, source line, labels and notes.
    pub rendered: String,
}

std::thread_local! {
    /// The diagnostics emitted on this thread inside [`capture`] (`None`: not capturing).
    static CAPTURED: std::cell::RefCell<Option<Vec<Emitted>>> =
        const { std::cell::RefCell::new(None) };
}

/// Runs `f` with the diagnostics this thread emits ([`emit_stderr`], [`emit_alone`]) collected
/// instead of written to standard error, and returns them beside `f`'s result, in the order they
/// were emitted. Used by callers that report diagnostics their own way (the Python extension
/// raises them as exceptions and warnings). Captures nest: an inner capture takes what is
/// emitted while it runs.
pub fn capture<R>(f: impl FnOnce() -> R) -> (R, Vec<Emitted>) {
    struct Restore(Option<Vec<Emitted>>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let outer = self.0.take();
            CAPTURED.with(|c| *c.borrow_mut() = outer);
        }
    }
    let outer = CAPTURED.with(|c| c.borrow_mut().replace(Vec::new()));
    let restore = Restore(outer);
    let r = f();
    let emitted = CAPTURED.with(|c| c.borrow_mut().take()).unwrap_or_default();
    drop(restore);
    (r, emitted)
}

/// Records `diags` when this thread is inside [`capture`]; false when it is not.
fn captured(diags: &Diagnostics, sources: &SourceMap) -> bool {
    CAPTURED.with(|c| {
        let mut c = c.borrow_mut();
        let Some(list) = c.as_mut() else {
            return false;
        };
        let files = Files::new(sources);
        list.extend(diags.iter().map(|d| Emitted {
            severity: d.severity,
            code: d.code,
            message: escape_controls(&d.message).into_owned(),
            rendered: render_with(&files, d, sources),
        }));
        true
    })
}

/// Writes diagnostics to standard error, coloured when standard error is a terminal (or hands
/// them to the [`capture`] running on this thread).
pub fn emit_stderr(diags: &Diagnostics, sources: &SourceMap) {
    use std::io::IsTerminal;
    if captured(diags, sources) {
        return;
    }
    let config = term::Config::default();
    let files = Files::new(sources);
    if std::io::stderr().is_terminal() {
        let stream = term::termcolor::StandardStream::stderr(term::termcolor::ColorChoice::Auto);
        let styles = term::Styles::default();
        let mut lock = stream.lock();
        let mut writer = term::StylesWriter::new(&mut lock, &styles);
        for d in diags {
            let _ =
                term::emit_to_write_style(&mut writer, &config, &files, &to_codespan(d, sources));
        }
    } else {
        let mut err = std::io::stderr().lock();
        for d in diags {
            let _ = term::emit_to_io_write(&mut err, &config, &files, &to_codespan(d, sources));
        }
    }
}

/// Writes one diagnostic that points at no source (a flag, a file as a whole, the machine) to
/// standard error, as [`emit_stderr`] does: `error[E0950]: message` and its notes.
pub fn emit_alone(d: Diagnostic) {
    emit_stderr(&d.into(), &SourceMap::new());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_rendering_shows_code_position_and_caret() {
        let mut sm = SourceMap::new();
        let f = sm.add("m.relay", "abc\ndef ghi\n");
        let d = Diagnostic::error(E0201, "expected an expression")
            .with_primary(Span::new(f, 8, 11), "here");
        let text = render_plain(&d, &sm);
        assert!(
            text.contains("error[E0201]: expected an expression"),
            "{text}"
        );
        assert!(text.contains("m.relay:2:5"), "{text}");
        assert!(text.contains("^^^"), "{text}");
    }

    /// Terminal controls in user text (a message quoting an attribute, a file name, the source
    /// line under the caret) are shown, never sent raw.
    #[test]
    fn terminal_controls_are_escaped() {
        let mut sm = SourceMap::new();
        let f = sm.add("m\u{1b}]0;t\u{7}.relay", "%x\u{1b}[2J = 1;\u{9b}31m\n");
        let d = Diagnostic::error(E0201, "bad `\u{1b}[31mred`")
            .with_primary(Span::new(f, 0, 6), "name \u{1b}[1m")
            .with_note("note \u{9b}2J");
        let text = render_plain(&d, &sm);
        assert!(!text.chars().any(is_control), "{text:?}");
        assert!(text.contains("bad `\\u{1b}[31mred`"), "{text}");
        assert!(text.contains("name \\u{1b}[1m"), "{text}");
        assert!(text.contains("note \\u{9b}2J"), "{text}");
        assert!(text.contains("m\\u{1b}]0;t\\u{7}.relay:1:1"), "{text}");
        // The source line keeps its columns: the control is one `?` per byte.
        assert!(text.contains("%x?[2J = 1;??31m"), "{text}");
        assert_eq!(escape_controls("plain\ttext"), "plain\ttext");
        assert_eq!(escape_note("two\nlines"), "two\nlines");
    }

    /// A carriage return or line feed in user text cannot overwrite the line or fake another
    /// diagnostic, and bidirectional overrides cannot reorder what is shown.
    #[test]
    fn line_breaks_and_bidi_overrides_are_escaped() {
        let mut sm = SourceMap::new();
        let f = sm.add("m\n.relay", "%x = 1;\r\u{202e}ab\r\n");
        let d = Diagnostic::error(E0201, "node `x\rerror: ok`\nerror[E0000]: fake")
            .with_primary(Span::new(f, 0, 2), "label\r\u{2066}x\u{2069}")
            .with_note("note\rnote \u{202a}y\u{202c}\nsecond line")
            .with_place(ModelPlace {
                file: "m\r.onnx".into(),
                node: Some(NodePlace {
                    index: 0,
                    name: "n\nerror: fake".into(),
                    op_type: "Add".into(),
                }),
                tensor: None,
                opset: None,
            });
        let text = render_plain(&d, &sm);
        assert!(!text.contains('\r'), "{text:?}");
        assert!(!text.chars().any(is_bidi), "{text:?}");
        assert!(
            text.contains("node `x\\u{d}error: ok`\\u{a}error[E0000]: fake"),
            "{text}"
        );
        assert!(text.contains("label\\u{d}\\u{2066}x\\u{2069}"), "{text}");
        assert!(text.contains("m\\u{a}.relay"), "{text}");
        assert!(text.contains("m\\u{d}.onnx"), "{text}");
        assert!(text.contains("n\\u{a}error: fake"), "{text}");
        assert!(
            text.contains("note\\u{d}note \\u{202a}y\\u{202c}"),
            "{text}"
        );
        // Every line that starts a diagnostic is the real one; the note's second line is
        // indented under it.
        let starts: Vec<&str> = text.lines().filter(|l| l.starts_with("error")).collect();
        assert_eq!(starts.len(), 1, "{text}");
        assert!(
            text.lines()
                .any(|l| l.starts_with(' ') && l.ends_with("second line")),
            "{text}"
        );
        // The source line keeps its columns: a lone `\r` is one `?`, an override three.
        assert!(text.contains("%x = 1;????ab"), "{text}");
    }

    #[test]
    fn a_model_place_is_rendered_as_the_first_note() {
        let sm = SourceMap::new();
        let d = Diagnostic::error(E0201, "bad node")
            .with_note("later note")
            .with_place(ModelPlace {
                file: "m.onnx".into(),
                node: Some(NodePlace {
                    index: 3,
                    name: "Add_3".into(),
                    op_type: "Add".into(),
                }),
                tensor: Some("x".into()),
                opset: Some(13),
            });
        let text = render_plain(&d, &sm);
        let place = text
            .find("in m.onnx, node #3 `Add_3` (Add), value `x`, opset 13")
            .expect(&text);
        assert!(place < text.find("later note").unwrap(), "{text}");
    }

    /// Inside `capture`, emitted diagnostics are returned in order, rendered as on standard
    /// error; captures nest, and nothing is held once they end.
    #[test]
    fn capture_collects_emitted_diagnostics() {
        let mut sm = SourceMap::new();
        let f = sm.add("m.relay", "abc\n");
        let ((), outer) = capture(|| {
            emit_alone(Diagnostic::warning(W2107, "first"));
            let ((), inner) = capture(|| {
                emit_alone(Diagnostic::error(E0901, "inner"));
            });
            assert_eq!(inner.len(), 1);
            assert_eq!(inner[0].code, E0901);
            let d =
                Diagnostic::error(E0201, "bad \u{1b}[1m").with_primary(Span::new(f, 0, 3), "here");
            emit_stderr(&d.into(), &sm);
        });
        assert_eq!(outer.len(), 2);
        assert_eq!(
            (outer[0].code, outer[0].severity, outer[0].message.as_str()),
            (W2107, Severity::Warning, "first")
        );
        assert_eq!(outer[1].code, E0201);
        assert_eq!(outer[1].message, "bad \\u{1b}[1m");
        assert!(
            outer[1].rendered.contains("error[E0201]"),
            "{}",
            outer[1].rendered
        );
        assert!(
            outer[1].rendered.contains("m.relay:1:1"),
            "{}",
            outer[1].rendered
        );
        assert!(CAPTURED.with(|c| c.borrow().is_none()));
    }

    #[test]
    fn every_code_is_unique() {
        let mut ids: Vec<_> = ALL_CODES.iter().map(|c| c.id).collect();
        ids.sort();
        let n = ids.len();
        ids.dedup();
        assert_eq!(n, ids.len(), "duplicate diagnostic code");
    }
}
