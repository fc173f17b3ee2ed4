//! The rules language front end: grammar, syntax tree and lowering from pest pairs.
//!
//! Input: the text of a `.rules` file. Output: its [`ast::File`] and syntax diagnostics. A
//! malformed item is reported and skipped, so one bad item does not hide errors after it.

pub mod ast;
pub mod grammar;
mod lower;

pub use lower::parse_file;
