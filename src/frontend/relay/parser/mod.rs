//! Recursive-descent parser from RelayScript tokens to a [`Module`].
//!
//! Syntax errors stop the parse (the first one is reported); name, attribute and constant errors
//! are collected and parsing goes on, so one run reports as many of them as possible. Nesting is
//! limited to [`MAX_DEPTH`] levels, so no input can exhaust the stack.

mod attrs;
mod expr;
mod types;

use super::lexer::{lex, LexError, Tok, Token};
use crate::diag::*;
use crate::ir::*;
use crate::source::{FileId, Span};
use std::collections::HashMap;

/// Local variables in scope: a log of names in binding order (for truncation at scope exit)
/// and, per name, the stack of variables bound to it (for constant-time lookup).
#[derive(Default)]
pub(crate) struct Locals {
    log: Vec<Box<str>>,
    by_name: HashMap<Box<str>, Vec<VarId>>,
}

impl Locals {
    pub(crate) fn len(&self) -> usize {
        self.log.len()
    }

    fn push(&mut self, name: Box<str>, v: VarId) {
        self.by_name.entry(name.clone()).or_default().push(v);
        self.log.push(name);
    }

    pub(crate) fn truncate(&mut self, mark: usize) {
        while self.log.len() > mark {
            if let Some(name) = self.log.pop() {
                if let Some(stack) = self.by_name.get_mut(&name) {
                    stack.pop();
                    if stack.is_empty() {
                        self.by_name.remove(&name);
                    }
                }
            }
        }
    }

    fn lookup(&self, name: &str) -> Option<VarId> {
        self.by_name.get(name).and_then(|s| s.last()).copied()
    }

    /// Names in scope, innermost binding first (deterministic).
    fn names(&self) -> impl Iterator<Item = &str> {
        self.log.iter().rev().map(|n| &**n)
    }
}

/// Marker for "a fatal diagnostic has been pushed; unwind".
#[derive(Debug)]
pub(crate) struct Fatal;

pub(crate) type PResult<T> = Result<T, Fatal>;

/// A graph binding in scope: the expression and the span of its `%N`.
type GraphScope = HashMap<Box<str>, (ExprId, Span)>;

/// A meta constant already seen: its expression and the type comment it was first given.
type SeenConstant = (ExprId, Option<(TensorType, Span)>);

pub(crate) struct Parser<'s> {
    src: &'s str,
    file: FileId,
    toks: Vec<Token>,
    pos: usize,
    type_comments: HashMap<u32, (u32, u32)>,
    pub(crate) m: Module,
    pub(crate) diags: Diagnostics,
    depth: u32,
    graph_scopes: Vec<GraphScope>,
    locals: Locals,
    meta_consts: HashMap<(String, u32), SeenConstant>,
    global_ids: HashMap<String, GlobalId>,
    /// Whether the metadata section failed to parse (its references are then not reported).
    pub(crate) metadata_failed: bool,
}

/// Parses a whole module.
pub fn parse_module(src: &str, file: FileId) -> Result<Module, Diagnostics> {
    let lexed = lex(src);
    let mut p = Parser {
        src,
        file,
        toks: lexed.tokens,
        pos: 0,
        type_comments: lexed
            .type_comments
            .iter()
            .map(|&(i, s, e)| (i, (s, e)))
            .collect(),
        m: Module::new(),
        diags: Diagnostics::new(),
        depth: 0,
        graph_scopes: Vec::new(),
        locals: Locals::default(),
        meta_consts: HashMap::new(),
        global_ids: HashMap::new(),
        metadata_failed: false,
    };
    if let Some((s, e)) = lexed.metadata {
        p.read_metadata(s, e);
    }
    let result = p.module();
    if let Some(problem) = lexed.problem {
        // The token stream ended early; the lexing problem explains why.
        let span = Span::new(file, problem.start as usize, problem.end as usize);
        let (code, msg, label) = match problem.error {
            LexError::InvalidChar => (
                E0101,
                format!("invalid character `{}`", src[span.range()].escape_debug()),
                "not valid here",
            ),
            LexError::UnterminatedComment => (
                E0103,
                "unterminated block comment".to_string(),
                "this comment is never closed",
            ),
            LexError::MalformedMeta => (
                E0107,
                "malformed meta reference".to_string(),
                "expected `meta[key][index]`",
            ),
        };
        let mut diags = p.diags;
        diags.push(Diagnostic::error(code, msg).with_primary(span, label));
        return Err(only_first_fatal(diags, span));
    }
    match result {
        Ok(()) if !p.diags.has_errors() => Ok(p.m),
        _ => Err(p.diags),
    }
}

/// When lexing stopped early, a syntax error at the end of the shortened token stream is a
/// consequence of the lexing problem, so drop errors reported at or after it.
fn only_first_fatal(diags: Diagnostics, lex_span: Span) -> Diagnostics {
    let mut out = Diagnostics::new();
    for d in diags {
        let at_or_after = d
            .primary_span()
            .is_some_and(|s| s.start >= lex_span.start && s != lex_span);
        if !at_or_after {
            out.push(d);
        }
    }
    out
}

impl<'s> Parser<'s> {
    // ----- tokens -----

    pub(crate) fn peek(&self) -> Tok {
        self.toks[self.pos].kind
    }

    pub(crate) fn peek_at(&self, n: usize) -> Tok {
        self.toks.get(self.pos + n).map_or(Tok::Eof, |t| t.kind)
    }

    pub(crate) fn tok(&self) -> Token {
        self.toks[self.pos]
    }

    pub(crate) fn bump(&mut self) -> Token {
        let t = self.toks[self.pos];
        if t.kind != Tok::Eof {
            self.pos += 1;
        }
        t
    }

    pub(crate) fn eat(&mut self, kind: Tok) -> bool {
        if self.peek() == kind {
            self.bump();
            true
        } else {
            false
        }
    }

    pub(crate) fn expect(&mut self, kind: Tok, what: &str) -> PResult<Token> {
        if self.peek() == kind {
            Ok(self.bump())
        } else {
            Err(self.unexpected(what))
        }
    }

    pub(crate) fn text(&self, t: Token) -> &'s str {
        &self.src[t.start as usize..t.end as usize]
    }

    pub(crate) fn span(&self, t: Token) -> Span {
        Span::new(self.file, t.start as usize, t.end as usize)
    }

    pub(crate) fn here(&self) -> Span {
        self.span(self.tok())
    }

    /// The span from the start of `start` to the end of the previous token.
    pub(crate) fn since(&self, start: Span) -> Span {
        let end = if self.pos > 0 {
            self.toks[self.pos - 1].end
        } else {
            start.end
        };
        Span {
            file: self.file,
            start: start.start,
            end: end.max(start.start),
        }
    }

    fn describe(&self, t: Token) -> String {
        match t.kind {
            Tok::Eof => "end of input".to_string(),
            Tok::UnterminatedStr => "an unterminated string".to_string(),
            _ => {
                let text = self.text(t);
                if text.len() > 40 {
                    format!("`{}…`", &text[..text.floor_char_boundary(40)])
                } else {
                    format!("`{text}`")
                }
            }
        }
    }

    // ----- diagnostics -----

    pub(crate) fn report(&mut self, d: Diagnostic) {
        self.diags.push(d);
    }

    pub(crate) fn fatal(&mut self, d: Diagnostic) -> Fatal {
        self.diags.push(d);
        Fatal
    }

    pub(crate) fn unexpected(&mut self, what: &str) -> Fatal {
        let t = self.tok();
        if t.kind == Tok::UnterminatedStr {
            let d = Diagnostic::error(E0102, "unterminated string")
                .with_primary(self.span(t), "this string is never closed");
            return self.fatal(d);
        }
        let msg = format!("expected {what}, found {}", self.describe(t));
        let d =
            Diagnostic::error(E0201, msg).with_primary(self.span(t), format!("expected {what}"));
        self.fatal(d)
    }

    pub(crate) fn unsupported(&mut self, what: &str) -> Fatal {
        let span = self.here();
        let d = Diagnostic::error(E0205, format!("{what} are not supported"))
            .with_primary(span, "unsupported construct")
            .with_note("collage partitions dataflow programs; ADTs, match, references and free variables are outside its Relay subset");
        self.fatal(d)
    }

    pub(crate) fn enter(&mut self) -> PResult<()> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            let span = self.here();
            let d = Diagnostic::error(E0204, format!("nesting deeper than {MAX_DEPTH} levels"))
                .with_primary(span, "too deeply nested")
                .with_note("bind inner expressions to `%N` graph variables to flatten the program");
            return Err(self.fatal(d));
        }
        Ok(())
    }

    pub(crate) fn leave(&mut self) {
        self.depth -= 1;
    }

    // ----- module structure -----

    fn module(&mut self) -> PResult<()> {
        self.version_header()?;
        loop {
            match self.peek() {
                Tok::Def => self.def()?,
                Tok::Type | Tok::Extern => return Err(self.unsupported("type definitions")),
                Tok::Eof => return Ok(()),
                Tok::Hash => {
                    let t = self.tok();
                    let d = Diagnostic::error(E0108, format!("unexpected module attribute {}", self.describe(t)))
                        .with_primary(self.span(t), "only `#[version = \"0.0.5\"]` (first) and `#[metadata]` (last) are allowed");
                    return Err(self.fatal(d));
                }
                _ => return Err(self.unexpected("`def` or end of input")),
            }
        }
    }

    fn version_header(&mut self) -> PResult<()> {
        let t = self.tok();
        if t.kind != Tok::Hash {
            let d = Diagnostic::error(E0202, "missing version header")
                .with_primary(self.span(t), "expected `#[version = \"0.0.5\"]` here")
                .with_note("every RelayScript module starts with `#[version = \"0.0.5\"]`");
            return Err(self.fatal(d));
        }
        let text = self.text(t);
        let inner = text.trim_start_matches("#[").trim_end_matches(']').trim();
        let Some(rest) = inner.strip_prefix("version") else {
            let d = Diagnostic::error(E0108, format!("unknown module attribute `{text}`"))
                .with_primary(self.span(t), "expected `#[version = \"0.0.5\"]`");
            return Err(self.fatal(d));
        };
        let value = rest.trim_start().strip_prefix('=').map(str::trim);
        if value != Some("\"0.0.5\"") {
            let d = Diagnostic::error(E0203, format!("unsupported version header `{text}`"))
                .with_primary(self.span(t), "only version \"0.0.5\" is supported");
            return Err(self.fatal(d));
        }
        self.bump();
        Ok(())
    }

    fn intern_global(&mut self, name: &str, span: Span) -> GlobalId {
        if let Some(&g) = self.global_ids.get(name) {
            return g;
        }
        let g = GlobalId(self.m.globals.len() as u32);
        self.m.globals.push(Global {
            name: name.to_string(),
            def: None,
            span,
        });
        self.global_ids.insert(name.to_string(), g);
        g
    }

    fn def(&mut self) -> PResult<()> {
        let start = self.bump();
        let name_tok = self.expect(Tok::Global, "a global name such as `@main`")?;
        let name_span = self.span(name_tok);
        let name = &self.text(name_tok)[1..];
        let g = self.intern_global(name, name_span);
        let func = self.function(self.span(start))?;
        let global = &mut self.m.globals[g.index()];
        if global.def.is_some() {
            let prev_span = global.span;
            let d = Diagnostic::error(E0304, format!("`@{name}` is defined more than once"))
                .with_primary(name_span, "redefined here")
                .with_secondary(prev_span, "first defined here");
            self.report(d);
        } else {
            global.def = Some(func);
            global.span = name_span;
            self.m.defs.push((g, func));
        }
        Ok(())
    }

    /// Parses `[params] -> ret { body }` after `def @name` or `fn`.
    pub(crate) fn function(&mut self, start: Span) -> PResult<FuncId> {
        self.enter()?;
        let first_expr = ExprId(self.m.exprs.len() as u32);
        if self.peek() == Tok::LBracket {
            return Err(self.unsupported("generic functions (type parameters)"));
        }
        self.expect(Tok::LParen, "`(` to start the parameter list")?;
        let locals_mark = self.locals.len();
        self.graph_scopes.push(GraphScope::new());
        let mut params: Vec<VarId> = Vec::new();
        let mut param_names: HashMap<String, VarId> = HashMap::new();
        let mut fn_attrs = Vec::new();
        let mut result_device = VirtualDevice::unconstrained();
        loop {
            if self.peek() == Tok::RParen {
                break;
            }
            if self.at_attr_start() {
                let list = self.attr_list(Tok::RParen)?;
                for a in list {
                    if a.key == "virtual_device" {
                        if let Some(d) = self.device_value(a.value, a.value_span) {
                            result_device = d;
                        }
                    } else {
                        fn_attrs.push((a.key, a.value));
                    }
                }
                break;
            }
            let v = self.param()?;
            let name = self.m.vars[v.index()].name.clone();
            if let Some(&prev) = param_names.get(&name) {
                let d = Diagnostic::error(E0307, format!("parameter `%{name}` is declared twice"))
                    .with_primary(self.m.vars[v.index()].span, "declared again here")
                    .with_secondary(self.m.vars[prev.index()].span, "first declared here");
                self.report(d);
            } else {
                param_names.insert(name, v);
            }
            params.push(v);
            if !self.eat(Tok::Comma) {
                break;
            }
        }
        self.expect(Tok::RParen, "`)` or `,` in the parameter list")?;
        let ret_start = self.here();
        let ret_type = if self.eat_arrow() {
            Some(self.ty()?)
        } else {
            None
        };
        let ret_span = ret_type.as_ref().map(|_| self.since(ret_start));
        self.expect(Tok::LBrace, "`{` to start the function body")?;
        let body = self.expr()?;
        self.expect(Tok::RBrace, "`}` to end the function body")?;
        self.graph_scopes.pop();
        self.locals.truncate(locals_mark);
        let id = FuncId(self.m.funcs.len() as u32);
        let span = self.since(start);
        self.m.funcs.push(Function {
            params,
            ret_type,
            ret_span,
            attrs: fn_attrs,
            result_device,
            body,
            first_expr,
            span,
        });
        self.leave();
        Ok(id)
    }

    fn eat_arrow(&mut self) -> bool {
        if self.eat(Tok::Arrow) {
            return true;
        }
        if self.peek() == Tok::Minus && self.peek_at(1) == Tok::Gt {
            self.bump();
            self.bump();
            return true;
        }
        false
    }

    /// A binder: `%x`, optionally `{virtual_device=...}` before or after `: T`.
    fn param(&mut self) -> PResult<VarId> {
        let t = self.expect(Tok::Local, "a parameter such as `%x`")?;
        let (ann, device) = self.binder_rest()?;
        Ok(self.new_var(t, ann, device))
    }

    /// The optional parts after a binder's name: device braces and/or `: T`.
    pub(crate) fn binder_rest(&mut self) -> PResult<(Option<Type>, VirtualDevice)> {
        let mut device = None;
        if self.peek() == Tok::LBrace {
            device = Some(self.device_braces()?);
        }
        let ann = if self.eat(Tok::Colon) {
            Some(self.ty()?)
        } else {
            None
        };
        if self.peek() == Tok::LBrace && device.is_none() && ann.is_some() {
            device = Some(self.device_braces()?);
        }
        Ok((ann, device.unwrap_or_default()))
    }

    /// `{virtual_device=...}` on a binder.
    fn device_braces(&mut self) -> PResult<VirtualDevice> {
        let open = self.bump();
        let list = self.attr_list(Tok::RBrace)?;
        self.expect(Tok::RBrace, "`}` to close the binder's attributes")?;
        let mut device = VirtualDevice::unconstrained();
        for a in list {
            if a.key == "virtual_device" {
                if let Some(d) = self.device_value(a.value, a.value_span) {
                    device = d;
                }
            } else {
                let d = Diagnostic::error(E0406, format!("unknown binder attribute `{}`", a.key))
                    .with_primary(a.key_span, "only `virtual_device` may appear here")
                    .with_secondary(self.span(open), "in these braces");
                self.report(d);
            }
        }
        Ok(device)
    }

    /// Creates a variable and its single `Var` expression and brings it into scope.
    pub(crate) fn new_var(&mut self, t: Token, ann: Option<Type>, device: VirtualDevice) -> VarId {
        let name = self.text(t)[1..].to_string();
        self.new_named_var(name, self.span(t), ann, device)
    }

    pub(crate) fn new_named_var(
        &mut self,
        name: String,
        span: Span,
        ann: Option<Type>,
        device: VirtualDevice,
    ) -> VarId {
        let v = VarId(self.m.vars.len() as u32);
        let expr = self.m.push(Expr::Var(v), span);
        self.m.vars.push(Var {
            name: name.clone(),
            annotation: ann,
            device,
            span,
            expr,
        });
        if !name.is_empty() {
            self.locals.push(name.into_boxed_str(), v);
        }
        v
    }

    pub(crate) fn lookup_local(&self, name: &str) -> Option<VarId> {
        self.locals.lookup(name)
    }

    pub(crate) fn lookup_graph(&self, name: &str) -> Option<ExprId> {
        self.graph_scopes
            .iter()
            .rev()
            .find_map(|s| s.get(name))
            .map(|&(e, _)| e)
    }

    pub(crate) fn bind_graph(&mut self, name: &str, span: Span, e: ExprId) {
        let Some(scope) = self.graph_scopes.last_mut() else {
            return;
        };
        if let Some(&(_, prev)) = scope.get(name) {
            let d = Diagnostic::error(E0303, format!("`%{name}` is bound more than once"))
                .with_primary(span, "bound again here")
                .with_secondary(prev, "first bound here");
            self.report(d);
            return;
        }
        scope.insert(name.into(), (e, span));
        let slot = &mut self.m.bindings[e.index()];
        if slot.is_none() {
            *slot = Some(name.into());
        }
    }

    pub(crate) fn local_names(&self) -> impl Iterator<Item = &str> {
        self.locals.names()
    }

    /// The `%N` names in scope, most recently bound first (suggestions must not depend on
    /// hash order, and the latest binding is the likeliest one meant).
    pub(crate) fn graph_names(&self) -> Vec<&str> {
        let mut names: Vec<(ExprId, &str)> = self
            .graph_scopes
            .iter()
            .flat_map(|s| s.iter().map(|(k, &(e, _))| (e, &**k)))
            .collect();
        names.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(b.1)));
        names.into_iter().map(|(_, n)| n).collect()
    }

    pub(crate) fn type_comment_for(&self, tok_index: usize) -> Option<(u32, u32)> {
        self.type_comments.get(&(tok_index as u32)).copied()
    }

    pub(crate) fn pos(&self) -> usize {
        self.pos
    }

    /// Runs `f` over the tokens of a sub-text (a type comment), then restores the main stream.
    pub(crate) fn with_subtext<T>(
        &mut self,
        start: u32,
        end: u32,
        f: impl FnOnce(&mut Self) -> PResult<T>,
    ) -> Option<T> {
        let text = &self.src[start as usize..end as usize];
        let sub = lex(text);
        if sub.problem.is_some() {
            return None;
        }
        let toks: Vec<Token> = sub
            .tokens
            .into_iter()
            .map(|t| Token {
                kind: t.kind,
                start: t.start + start,
                end: t.end + start,
            })
            .collect();
        let saved_toks = std::mem::replace(&mut self.toks, toks);
        let saved_pos = std::mem::replace(&mut self.pos, 0);
        let saved_diags = std::mem::take(&mut self.diags);
        let result = f(self).ok();
        let ok = result.is_some() && self.peek() == Tok::Eof;
        self.toks = saved_toks;
        self.pos = saved_pos;
        self.diags = saved_diags;
        if ok {
            result
        } else {
            None
        }
    }

    fn read_metadata(&mut self, start: u32, end: u32) {
        let json = &self.src[start as usize..end as usize];
        match super::metadata::parse_metadata(json) {
            Ok(table) => self.m.meta = table,
            Err(e) => {
                self.metadata_failed = true;
                let mut at = start as usize + e.offset.unwrap_or(0).min(json.len());
                while !self.src.is_char_boundary(at) {
                    at -= 1;
                }
                let width = self.src[at..end as usize]
                    .chars()
                    .next()
                    .map_or(0, char::len_utf8);
                let span = Span::new(self.file, at, at + width);
                let d =
                    Diagnostic::error(E0601, format!("malformed metadata section: {}", e.message))
                        .with_primary(span, "here");
                self.report(d);
            }
        }
    }
}
