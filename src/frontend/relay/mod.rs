//! The RelayScript front end: lexer, parser, metadata section and printer.
//!
//! Input: the text of a module in TVM's Relay text format. Output: a [`Module`] (see
//! [`crate::ir`]), or diagnostics with spans and stable codes. [`parse`] builds the IR;
//! [`load`] also runs type inference, which every later phase relies on.

pub mod lexer;
pub mod metadata;
pub mod number;
mod parser;
pub mod print;
mod print_scopes;

/// The parser's nesting limit: the IR's bound.
pub use crate::ir::MAX_DEPTH;

use crate::diag::Diagnostics;
use crate::ir::Module;
use crate::source::{FileId, SourceMap};

/// Parses a module (no type inference).
pub fn parse(sources: &SourceMap, file: FileId) -> Result<Module, Diagnostics> {
    parser::parse_module(sources.text(file), file)
}

/// Parses a module and infers the type of every expression.
pub fn load(sources: &SourceMap, file: FileId) -> Result<Module, Diagnostics> {
    let mut m = parse(sources, file)?;
    crate::analysis::typeck::check(&mut m)?;
    Ok(m)
}

/// [`load`] for unit tests: the text must load; otherwise panics with the diagnostics and the
/// text.
#[cfg(test)]
pub(crate) fn load_text(text: &str) -> Module {
    let mut sources = SourceMap::new();
    let file = sources.add("test.relay", text);
    match load(&sources, file) {
        Ok(m) => m,
        Err(d) => panic!("{}\n{text}", d.render_plain(&sources)),
    }
}
