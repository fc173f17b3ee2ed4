//! Lowering from pest pairs to the AST: one function per construct.
//!
//! The grammar guarantees the shape of each pair, so the `expect_*` helpers only fail on a
//! grammar/lowering mismatch, which is reported as an internal error diagnostic instead of a
//! panic. Malformed items were captured by `bad_item`; each is re-parsed on its own with its item
//! rule to get pest's precise error, which becomes an E1001 diagnostic.

use super::ast::*;
use super::grammar::{rule_label, Rule, RulesParser};
use crate::diag::{Diagnostic, Diagnostics, E1001, E1002};
use crate::source::{FileId, Span};
use pest::iterators::Pair;
use pest::Parser;

type P<'i> = Pair<'i, Rule>;

/// Parses the text of a `.rules` file into its AST. Syntax errors are reported and the
/// offending items become [`ItemKind::Bad`].
pub fn parse_file(text: &str, file: FileId) -> (File, Diagnostics) {
    let mut lw = Lowerer {
        file,
        text,
        diags: Diagnostics::new(),
        depth: 0,
    };
    let items = match RulesParser::parse(Rule::file, text) {
        Ok(mut pairs) => {
            let file_pair = pairs.next();
            file_pair
                .map(|p| {
                    p.into_inner()
                        .filter(|p| p.as_rule() != Rule::EOI)
                        .map(|p| lw.item(p))
                        .collect()
                })
                .unwrap_or_default()
        }
        Err(e) => {
            lw.pest_error(e, 0);
            Vec::new()
        }
    };
    (File { file, items }, lw.diags)
}

struct Lowerer<'t> {
    file: FileId,
    text: &'t str,
    diags: Diagnostics,
    /// Current nesting of patterns, expressions, rules and values.
    depth: u32,
}

/// Deepest nesting the lowering accepts; deeper input is reported, so no later pass (checking,
/// dropping the tree) can exhaust the stack.
const MAX_NESTING: u32 = 256;

impl<'t> Lowerer<'t> {
    fn span(&self, p: &P<'_>) -> Span {
        let s = p.as_span();
        Span::new(self.file, s.start(), s.end())
    }

    /// The identifiers directly inside `p`, in order.
    fn idents(&self, p: P<'_>) -> Vec<Name> {
        p.into_inner()
            .filter(|x| x.as_rule() == Rule::ident)
            .map(|x| self.name(x))
            .collect()
    }

    fn name(&self, p: P<'_>) -> Name {
        Name {
            text: p.as_str().to_string(),
            span: self.span(&p),
        }
    }

    fn doc_before(&self, start: usize) -> Option<String> {
        let before = &self.text[..start];
        let mut lines: Vec<&str> = Vec::new();
        for line in before.lines().rev() {
            let t = line.trim();
            if let Some(d) = t.strip_prefix("///") {
                lines.push(d.strip_prefix(' ').unwrap_or(d));
            } else if t.is_empty() && lines.is_empty() {
                return None;
            } else {
                break;
            }
        }
        if lines.is_empty() {
            return None;
        }
        lines.reverse();
        Some(lines.join("\n"))
    }

    fn item(&mut self, p: P<'_>) -> Item {
        let span = self.span(&p);
        let doc = self.doc_before(p.as_span().start());
        let kind = match p.as_rule() {
            Rule::import_item => self.import(p),
            Rule::operator_item => self.operator(p),
            Rule::pattern_item => self.pattern_item(p),
            Rule::predicate_item => self.predicate_item(p),
            Rule::combiner_item => self.combiner_item(p),
            Rule::rule_item => self.rule_item(p),
            Rule::equiv_item | Rule::rewrite_item => self.equiv_or_rewrite(p),
            Rule::target_item => self.target(p),
            _ => {
                self.bad_item(&p);
                ItemKind::Bad(self.bad_item_name(&p))
            }
        };
        Item { kind, span, doc }
    }

    /// The name a malformed item seems to define: the word after its keyword.
    fn bad_item_name(&self, p: &P<'_>) -> Option<Name> {
        let text = p.as_str();
        let offset = p.as_span().start();
        let mut words = text.split(|c: char| c.is_whitespace() || c == '(' || c == '=' || c == '{');
        let kw = words.next()?;
        if !matches!(
            kw,
            "pattern" | "predicate" | "combiner" | "rule" | "target" | "operator"
        ) {
            return None;
        }
        let name = words.find(|w| !w.is_empty())?;
        let valid = name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
            && name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_');
        if !valid {
            return None;
        }
        let start = offset + text.find(name)?;
        Some(Name {
            text: name.to_string(),
            span: Span::new(self.file, start, start + name.len()),
        })
    }

    /// Re-parses a malformed item with the rule its first word names, to report pest's error.
    fn bad_item(&mut self, p: &P<'_>) {
        let text = p.as_str();
        let offset = p.as_span().start();
        let first = text
            .split(|c: char| !c.is_ascii_alphanumeric() && c != '_')
            .next()
            .unwrap_or("");
        let rule = match first {
            "import" => Rule::import_item,
            "operator" => Rule::operator_item,
            "pattern" => Rule::pattern_item,
            "predicate" => Rule::predicate_item,
            "combiner" => Rule::combiner_item,
            "rule" => Rule::rule_item,
            "equiv" => Rule::equiv_item,
            "rewrite" => Rule::rewrite_item,
            "target" => Rule::target_item,
            _ => {
                let word_end = text.find(char::is_whitespace).unwrap_or(text.len()).max(1);
                let span = Span::new(self.file, offset, offset + word_end.min(text.len()));
                let d = Diagnostic::error(E1001, format!("expected an item, found `{}`", &text[..word_end.min(text.len())]))
                    .with_primary(span, "not the start of an item")
                    .with_note("items start with `import`, `operator`, `pattern`, `predicate`, `combiner`, `rule`, `equiv`, `rewrite` or `target`");
                self.diags.push(d);
                return;
            }
        };
        match RulesParser::parse(rule, text) {
            Err(e) => self.pest_error(e, offset),
            Ok(pairs) => {
                // The item parses on its own but not in place: it must be followed by junk.
                let end = pairs.last().map_or(0, |p| p.as_span().end());
                let span = Span::new(self.file, offset + end, offset + text.len());
                let d = Diagnostic::error(E1001, "unexpected text after the item")
                    .with_primary(span, "expected the next item");
                self.diags.push(d);
            }
        }
    }

    fn pest_error(&mut self, e: pest::error::Error<Rule>, offset: usize) {
        use pest::error::{ErrorVariant, InputLocation};
        let (start, end) = match e.location {
            InputLocation::Pos(p) => (p, p),
            InputLocation::Span((s, t)) => (s, t),
        };
        let (start, end) = (offset + start, offset + end);
        let tok_end = if end > start {
            end
        } else {
            let rest = &self.text[start.min(self.text.len())..];
            let n = rest
                .char_indices()
                .find(|&(i, c)| i > 0 && (c.is_whitespace() || !c.is_alphanumeric() && c != '_'))
                .map_or(rest.len(), |(i, _)| i);
            start + n.max(rest.chars().next().map_or(0, char::len_utf8))
        };
        let found = self.text.get(start..tok_end).unwrap_or("");
        let found = if found.is_empty() {
            "end of file".to_string()
        } else {
            format!("`{found}`")
        };
        let message = match e.variant {
            ErrorVariant::ParsingError { positives, .. } => {
                let mut labels: Vec<&str> = positives
                    .iter()
                    .copied()
                    .filter(|r| !matches!(r, Rule::WHITESPACE | Rule::COMMENT))
                    .map(rule_label)
                    .collect();
                labels.sort();
                labels.dedup();
                match labels.len() {
                    0 => format!("unexpected {found}"),
                    1 => format!("expected {}, found {found}", labels[0]),
                    _ => {
                        let last = labels.pop().unwrap_or_default();
                        format!("expected {} or {last}, found {found}", labels.join(", "))
                    }
                }
            }
            ErrorVariant::CustomError { message } => message,
        };
        let span = Span::new(self.file, start, tok_end.max(start));
        self.diags
            .push(Diagnostic::error(E1001, message).with_primary(span, "syntax error here"));
    }

    /// One level deeper; false (and reported once per item) past [`MAX_NESTING`].
    fn enter(&mut self, p: &P<'_>) -> bool {
        self.depth += 1;
        if self.depth == MAX_NESTING + 1 {
            let span = self.span(p);
            let span = Span::new(
                self.file,
                span.start as usize,
                (span.start as usize + 1).min(span.end as usize),
            );
            self.diags.push(
                Diagnostic::error(E1001, format!("nested more than {MAX_NESTING} levels deep"))
                    .with_primary(span, "too deeply nested")
                    .with_note("split the definition into named patterns, predicates or rules"),
            );
        }
        self.depth <= MAX_NESTING
    }

    // ----- items -----

    fn import(&mut self, p: P<'_>) -> ItemKind {
        let span = self.span(&p);
        match p.into_inner().find(|c| c.as_rule() == Rule::string) {
            Some(s) => ItemKind::Import(self.string(s)),
            None => ItemKind::Import(Str {
                value: String::new(),
                span,
            }),
        }
    }

    fn operator(&mut self, p: P<'_>) -> ItemKind {
        let mut name = None;
        let mut args = Vec::new();
        let mut kind = None;
        for c in p.into_inner() {
            match c.as_rule() {
                Rule::op_name => name = Some(self.name(c)),
                Rule::arg_names => args = self.idents(c),
                Rule::ident => kind = Some(self.name(c)),
                _ => {}
            }
        }
        ItemKind::Operator {
            name: name.unwrap_or_else(|| self.missing()),
            args,
            kind: kind.unwrap_or_else(|| self.missing()),
        }
    }

    fn pattern_item(&mut self, p: P<'_>) -> ItemKind {
        let mut name = None;
        let mut params = Vec::new();
        let mut body = None;
        for c in p.into_inner() {
            match c.as_rule() {
                Rule::ident => name = Some(self.name(c)),
                Rule::pattern_params => params = self.idents(c),
                Rule::pattern => body = Some(self.pattern(c)),
                _ => {}
            }
        }
        ItemKind::Pattern {
            name: name.unwrap_or_else(|| self.missing()),
            params,
            body: body.unwrap_or_else(|| self.missing_pat()),
        }
    }

    fn predicate_item(&mut self, p: P<'_>) -> ItemKind {
        let mut name = None;
        let mut params = Vec::new();
        let mut body = None;
        for c in p.into_inner() {
            match c.as_rule() {
                Rule::ident => name = Some(self.name(c)),
                Rule::capture_list => {
                    params = c
                        .into_inner()
                        .filter(|x| x.as_rule() == Rule::predicate_param)
                        .map(|x| {
                            let mut inner = x.into_inner();
                            let cap = inner
                                .next()
                                .map(|n| self.name(n))
                                .unwrap_or_else(|| self.missing());
                            let ops = inner
                                .filter(|o| o.as_rule() == Rule::op_name)
                                .map(|o| self.name(o))
                                .collect();
                            (cap, ops)
                        })
                        .collect()
                }
                Rule::expr => body = Some(self.expr(c)),
                _ => {}
            }
        }
        ItemKind::Predicate {
            name: name.unwrap_or_else(|| self.missing()),
            params,
            body: body.unwrap_or_else(|| self.missing_expr()),
        }
    }

    fn combiner_item(&mut self, p: P<'_>) -> ItemKind {
        let mut name = None;
        let mut body = None;
        for c in p.into_inner() {
            match c.as_rule() {
                Rule::ident => name = Some(self.name(c)),
                Rule::combiner => body = Some(self.combiner(c)),
                _ => {}
            }
        }
        ItemKind::Combiner {
            name: name.unwrap_or_else(|| self.missing()),
            body: body.unwrap_or(Comb {
                terms: Vec::new(),
                span: Span::default(),
            }),
        }
    }

    fn rule_item(&mut self, p: P<'_>) -> ItemKind {
        let mut name = None;
        let mut body = None;
        for c in p.into_inner() {
            match c.as_rule() {
                Rule::ident => name = Some(self.name(c)),
                Rule::rule_expr => body = Some(self.rule_expr(c)),
                _ => {}
            }
        }
        let name = name.unwrap_or_else(|| self.missing());
        let body = body.unwrap_or_else(|| RuleExpr {
            kind: RuleKind::Union(Vec::new()),
            span: name.span,
        });
        ItemKind::Rule { name, body }
    }

    fn equiv_or_rewrite(&mut self, p: P<'_>) -> ItemKind {
        let is_equiv = p.as_rule() == Rule::equiv_item;
        let mut pats: Vec<Pat> = p
            .into_inner()
            .filter(|c| c.as_rule() == Rule::pattern)
            .map(|c| self.pattern(c))
            .collect();
        let rhs = pats.pop().unwrap_or_else(|| self.missing_pat());
        let lhs = pats.pop().unwrap_or_else(|| self.missing_pat());
        if is_equiv {
            ItemKind::Equiv { lhs, rhs }
        } else {
            ItemKind::Rewrite { lhs, rhs }
        }
    }

    fn target(&mut self, p: P<'_>) -> ItemKind {
        let mut name = None;
        let mut entries = Vec::new();
        for c in p.into_inner() {
            match c.as_rule() {
                Rule::ident => name = Some(self.name(c)),
                Rule::target_entry => {
                    if let Some(e) = c.into_inner().next() {
                        entries.push(self.target_entry(e));
                    }
                }
                _ => {}
            }
        }
        ItemKind::Target {
            name: name.unwrap_or_else(|| self.missing()),
            entries,
        }
    }

    fn target_entry(&mut self, p: P<'_>) -> TargetEntry {
        let span = self.span(&p);
        match p.as_rule() {
            Rule::patterns_field => {
                let entries = p
                    .into_inner()
                    .filter(|c| c.as_rule() == Rule::pattern_entry)
                    .map(|c| {
                        let mut inner = c.into_inner();
                        let s = inner.find(|x| x.as_rule() == Rule::string);
                        let pat = inner.find(|x| x.as_rule() == Rule::pattern);
                        let s = s.map(|s| self.string(s)).unwrap_or(Str {
                            value: String::new(),
                            span,
                        });
                        let pat = pat
                            .map(|x| self.pattern(x))
                            .unwrap_or_else(|| self.missing_pat());
                        (s, pat)
                    })
                    .collect();
                TargetEntry::Patterns(entries, span)
            }
            Rule::rule_field => {
                let r = p.into_inner().find(|c| c.as_rule() == Rule::rule_expr);
                let r = r.map(|r| self.rule_expr(r)).unwrap_or(RuleExpr {
                    kind: RuleKind::Union(Vec::new()),
                    span,
                });
                TargetEntry::Rule(r, span)
            }
            Rule::cost_block => {
                let mut fields = Vec::new();
                let mut efficiency = Vec::new();
                for c in p.into_inner() {
                    match c.as_rule() {
                        Rule::field => fields.push(self.field(c)),
                        Rule::efficiency_block => {
                            for e in c
                                .into_inner()
                                .filter(|x| x.as_rule() == Rule::efficiency_entry)
                            {
                                let mut inner = e.into_inner();
                                let n = inner.find(|x| x.as_rule() == Rule::op_name);
                                let v = inner.find(|x| x.as_rule() == Rule::value);
                                if let (Some(n), Some(v)) = (n, v) {
                                    efficiency.push((self.name(n), self.value(v)));
                                }
                            }
                        }
                        _ => {}
                    }
                }
                TargetEntry::Cost {
                    fields,
                    efficiency,
                    span,
                }
            }
            Rule::transition_block => {
                let fields = p
                    .into_inner()
                    .filter(|c| c.as_rule() == Rule::field)
                    .map(|c| self.field(c))
                    .collect();
                TargetEntry::Transition(fields, span)
            }
            _ => TargetEntry::Field(self.field(p)),
        }
    }

    fn field(&mut self, p: P<'_>) -> ConfigEntry {
        self.config_entry(p)
    }

    fn config_entry(&mut self, p: P<'_>) -> ConfigEntry {
        let span = self.span(&p);
        let mut key = None;
        let mut value = None;
        for c in p.into_inner() {
            match c.as_rule() {
                Rule::ident | Rule::config_key => key = Some(self.name(c)),
                Rule::value => value = Some(self.value(c)),
                _ => {}
            }
        }
        ConfigEntry {
            key: key.unwrap_or_else(|| self.missing()),
            value: value.unwrap_or(Value {
                kind: ValueKind::Name(String::new()),
                span,
            }),
        }
    }

    // ----- values -----

    fn value(&mut self, p: P<'_>) -> Value {
        if !self.enter(&p) {
            self.depth -= 1;
            return Value {
                kind: ValueKind::Name(String::new()),
                span: self.span(&p),
            };
        }
        let r = self.value_inner(p);
        self.depth -= 1;
        r
    }

    fn value_inner(&mut self, p: P<'_>) -> Value {
        let span = self.span(&p);
        let inner = p.into_inner().next();
        let kind = match inner {
            None => ValueKind::Name(String::new()),
            Some(c) => match c.as_rule() {
                Rule::quantity => {
                    let mut q = c.into_inner();
                    let num = q.next().map(|n| self.float(&n)).unwrap_or(0.0);
                    let unit = q
                        .next()
                        .map(|u| self.name(u))
                        .unwrap_or_else(|| self.missing());
                    ValueKind::Quantity(num, unit)
                }
                Rule::number => self.number(&c),
                Rule::string => ValueKind::Str(self.string(c).value),
                Rule::boolean => ValueKind::Bool(c.as_str() == "true"),
                Rule::device_literal => ValueKind::Device(
                    c.into_inner()
                        .filter(|x| x.as_rule() == Rule::config_entry)
                        .map(|x| self.config_entry(x))
                        .collect(),
                ),
                Rule::call_value => {
                    let mut inner = c.into_inner();
                    let name = inner
                        .next()
                        .map(|n| self.name(n))
                        .unwrap_or_else(|| self.missing());
                    let args = inner
                        .filter(|x| x.as_rule() == Rule::value)
                        .map(|x| self.value(x))
                        .collect();
                    ValueKind::Call(name, args)
                }
                Rule::list_value => ValueKind::List(
                    c.into_inner()
                        .filter(|x| x.as_rule() == Rule::value)
                        .map(|x| self.value(x))
                        .collect(),
                ),
                _ => ValueKind::Name(c.as_str().to_string()),
            },
        };
        Value { kind, span }
    }

    fn number(&mut self, p: &P<'_>) -> ValueKind {
        let s = p.as_str();
        if s.contains(['.', 'e', 'E']) {
            ValueKind::Float(self.float(p))
        } else {
            match s.parse::<i64>() {
                Ok(v) => ValueKind::Int(v),
                Err(_) => {
                    let d =
                        Diagnostic::error(E1002, format!("integer `{s}` does not fit in 64 bits"))
                            .with_primary(self.span(p), "too large");
                    self.diags.push(d);
                    ValueKind::Int(0)
                }
            }
        }
    }

    fn float(&mut self, p: &P<'_>) -> f64 {
        match p.as_str().parse::<f64>() {
            Ok(v) if v.is_finite() => v,
            _ => {
                let d =
                    Diagnostic::error(E1002, format!("number `{}` is out of range", p.as_str()))
                        .with_primary(self.span(p), "not a finite number");
                self.diags.push(d);
                0.0
            }
        }
    }

    fn string(&mut self, p: P<'_>) -> Str {
        let span = self.span(&p);
        let raw = p.as_str();
        let inner = &raw[1..raw.len().saturating_sub(1).max(1)];
        let mut out = String::with_capacity(inner.len());
        let mut chars = inner.chars();
        while let Some(c) = chars.next() {
            if c != '\\' {
                out.push(c);
                continue;
            }
            match chars.next() {
                Some('"') => out.push('"'),
                Some('\\') => out.push('\\'),
                Some('n') => out.push('\n'),
                Some('t') => out.push('\t'),
                other => {
                    let d = Diagnostic::error(
                        E1002,
                        format!(
                            "invalid escape `\\{}` in string",
                            other.map(String::from).unwrap_or_default()
                        ),
                    )
                    .with_primary(span, "in this string")
                    .with_note("valid escapes are \\\" \\\\ \\n \\t");
                    self.diags.push(d);
                }
            }
        }
        Str { value: out, span }
    }

    // ----- patterns -----

    fn pattern(&mut self, p: P<'_>) -> Pat {
        if !self.enter(&p) {
            self.depth -= 1;
            return self.missing_pat();
        }
        let r = self.pattern_inner(p);
        self.depth -= 1;
        r
    }

    fn pattern_inner(&mut self, p: P<'_>) -> Pat {
        let span = self.span(&p);
        let mut inner = p.into_inner();
        let alt = inner
            .next()
            .map(|a| self.pat_alt(a))
            .unwrap_or_else(|| self.missing_pat());
        let guard = inner.find(|c| c.as_rule() == Rule::expr);
        match guard {
            Some(e) => Pat {
                kind: PatKind::Where(Box::new(alt), self.expr(e)),
                span,
            },
            None => alt,
        }
    }

    fn pat_alt(&mut self, p: P<'_>) -> Pat {
        let span = self.span(&p);
        let mut alts: Vec<Pat> = p
            .into_inner()
            .filter(|c| c.as_rule() == Rule::pat_as)
            .map(|c| self.pat_as(c))
            .collect();
        if alts.len() == 1 {
            alts.pop().unwrap_or_else(|| self.missing_pat())
        } else {
            Pat {
                kind: PatKind::Alt(alts),
                span,
            }
        }
    }

    fn pat_as(&mut self, p: P<'_>) -> Pat {
        let span = self.span(&p);
        let mut inner = p.into_inner();
        let base = inner
            .next()
            .map(|b| self.pat_postfix(b))
            .unwrap_or_else(|| self.missing_pat());
        match inner.find(|c| c.as_rule() == Rule::capture) {
            Some(c) => Pat {
                kind: PatKind::As(Box::new(base), self.name(c)),
                span,
            },
            None => base,
        }
    }

    fn pat_postfix(&mut self, p: P<'_>) -> Pat {
        let mut inner = p.into_inner();
        let mut pat = inner
            .next()
            .map(|b| self.pat_primary(b))
            .unwrap_or_else(|| self.missing_pat());
        for c in inner {
            let span = pat.span.to(self.span(&c));
            pat = match c.as_rule() {
                Rule::projection => {
                    let idx = c.into_inner().find(|x| x.as_rule() == Rule::index_lit);
                    let n = idx.map(|i| self.index(&i)).unwrap_or(0);
                    Pat {
                        kind: PatKind::Proj(Box::new(pat), n),
                        span,
                    }
                }
                _ => {
                    let cspan = self.span(&c);
                    let tc = self.type_constraint(c);
                    Pat {
                        kind: PatKind::Constraint(Box::new(pat), tc, cspan),
                        span,
                    }
                }
            };
        }
        pat
    }

    fn index(&mut self, p: &P<'_>) -> u32 {
        match p.as_str().parse() {
            Ok(v) => v,
            Err(_) => {
                let d = Diagnostic::error(E1002, format!("index `{}` is too large", p.as_str()))
                    .with_primary(self.span(p), "too large");
                self.diags.push(d);
                0
            }
        }
    }

    fn type_constraint(&mut self, p: P<'_>) -> TypeConstraint {
        let Some(c) = p.into_inner().find(|x| x.as_rule() != Rule::colon) else {
            return TypeConstraint::Shape(Vec::new());
        };
        match c.as_rule() {
            Rule::dtype_constraint => TypeConstraint::DType(self.idents(c)),
            Rule::rank_constraint => {
                let n = c.into_inner().find(|x| x.as_rule() == Rule::number);
                let v = match n.as_ref().map(|n| self.number(n)) {
                    Some(ValueKind::Int(v)) => v,
                    _ => -1,
                };
                TypeConstraint::Rank(v)
            }
            _ => TypeConstraint::Shape(
                c.into_inner()
                    .filter(|x| x.as_rule() == Rule::shape_dim)
                    .map(|d| {
                        let inner = d.into_inner().next();
                        match inner.as_ref().map(|i| (i.as_rule(), i)) {
                            Some((Rule::number, n)) => match self.number(n) {
                                ValueKind::Int(v) => Some(v),
                                _ => Some(-1),
                            },
                            _ => None,
                        }
                    })
                    .collect(),
            ),
        }
    }

    fn pat_primary(&mut self, p: P<'_>) -> Pat {
        let span = self.span(&p);
        let Some(c) = p.into_inner().next() else {
            return self.missing_pat();
        };
        let kind = match c.as_rule() {
            Rule::wildcard => PatKind::Wildcard,
            Rule::kw_const => PatKind::Const,
            Rule::capture => PatKind::Capture(self.name(c)),
            Rule::any_tuple => PatKind::AnyTuple,
            Rule::alt_call | Rule::named => self.call_pat(c),
            _ => {
                // paren_pat: one pattern without a comma is grouping; otherwise a tuple.
                let has_comma = c.clone().into_inner().any(|x| x.as_rule() == Rule::comma);
                let mut items: Vec<Pat> = c
                    .into_inner()
                    .filter(|x| x.as_rule() == Rule::pattern)
                    .map(|x| self.pattern(x))
                    .collect();
                if items.len() == 1 && !has_comma {
                    return items.pop().unwrap_or_else(|| self.missing_pat());
                }
                PatKind::Tuple(items)
            }
        };
        Pat { kind, span }
    }

    fn call_pat(&mut self, p: P<'_>) -> PatKind {
        let mut callee = Vec::new();
        let mut optional = false;
        let mut attrs = Vec::new();
        let mut args = None;
        for c in p.into_inner() {
            match c.as_rule() {
                Rule::op_name => callee.push(self.name(c)),
                Rule::question => optional = true,
                Rule::attr_constraints => {
                    for a in c.into_inner().filter(|x| x.as_rule() == Rule::attr_eq) {
                        attrs.push(self.config_entry(a));
                    }
                }
                Rule::pat_args => {
                    args = Some(
                        c.into_inner()
                            .filter(|x| x.as_rule() == Rule::pattern)
                            .map(|x| self.pattern(x))
                            .collect(),
                    )
                }
                _ => {}
            }
        }
        PatKind::Call {
            callee,
            optional,
            attrs,
            args,
        }
    }

    // ----- expressions -----

    fn expr(&mut self, p: P<'_>) -> Expr {
        if !self.enter(&p) {
            self.depth -= 1;
            return self.missing_expr();
        }
        let r = self.expr_inner(p);
        self.depth -= 1;
        r
    }

    fn expr_inner(&mut self, p: P<'_>) -> Expr {
        match p.as_rule() {
            Rule::expr => match p.into_inner().next() {
                Some(c) => self.expr(c),
                None => self.missing_expr(),
            },
            Rule::or_expr | Rule::and_expr | Rule::add_expr | Rule::mul_expr | Rule::cmp_expr => {
                self.binary_chain(p)
            }
            Rule::unary_expr => self.unary(p),
            Rule::postfix_expr => self.postfix(p),
            Rule::atom => self.atom(p),
            _ => self.missing_expr(),
        }
    }

    fn binary_chain(&mut self, p: P<'_>) -> Expr {
        let mut inner = p.into_inner();
        let mut lhs = match inner.next() {
            Some(c) => self.expr(c),
            None => return self.missing_expr(),
        };
        let mut operands = 1u32;
        while let Some(op) = inner.next() {
            let Some(rhs_pair) = inner.next() else { break };
            operands += 1;
            if operands > MAX_NESTING {
                let span = self.span(&op);
                self.diags.push(
                    Diagnostic::error(
                        E1001,
                        format!(
                            "more than {MAX_NESTING} operands in one chain of `{}`",
                            op.as_str()
                        ),
                    )
                    .with_primary(span, "chain too long")
                    .with_note("split it with named predicates"),
                );
                return self.missing_expr();
            }
            let rhs = self.expr(rhs_pair);
            let op = match op.as_str() {
                "||" => BinOp::Or,
                "&&" => BinOp::And,
                "==" => BinOp::Eq,
                "!=" => BinOp::Ne,
                "<" => BinOp::Lt,
                "<=" => BinOp::Le,
                ">" => BinOp::Gt,
                ">=" => BinOp::Ge,
                "in" => BinOp::In,
                "+" => BinOp::Add,
                "-" => BinOp::Sub,
                "*" => BinOp::Mul,
                "/" => BinOp::Div,
                _ => BinOp::Rem,
            };
            let span = lhs.span.to(rhs.span);
            lhs = Expr {
                kind: ExprKind::Binary(op, Box::new(lhs), Box::new(rhs)),
                span,
            };
        }
        lhs
    }

    fn unary(&mut self, p: P<'_>) -> Expr {
        let span = self.span(&p);
        let mut ops = Vec::new();
        let mut operand = None;
        for c in p.into_inner() {
            match c.as_rule() {
                Rule::unary_op => ops.push(if c.as_str() == "!" {
                    UnOp::Not
                } else {
                    UnOp::Neg
                }),
                _ => operand = Some(self.expr(c)),
            }
        }
        if ops.len() > MAX_NESTING as usize {
            self.diags.push(
                Diagnostic::error(
                    E1001,
                    format!("more than {MAX_NESTING} prefix operators in a row"),
                )
                .with_primary(span, "too deeply nested"),
            );
            return self.missing_expr();
        }
        let mut e = operand.unwrap_or_else(|| self.missing_expr());
        for op in ops.into_iter().rev() {
            e = Expr {
                kind: ExprKind::Unary(op, Box::new(e)),
                span,
            };
        }
        e
    }

    fn postfix(&mut self, p: P<'_>) -> Expr {
        let mut inner = p.into_inner();
        let mut e = match inner.next() {
            Some(a) => self.expr(a),
            None => return self.missing_expr(),
        };
        for c in inner {
            let span = e.span.to(self.span(&c));
            let kind = match c.as_rule() {
                Rule::field_access => {
                    let n = c.into_inner().find(|x| x.as_rule() == Rule::ident);
                    let n = n.map(|n| self.name(n)).unwrap_or_else(|| self.missing());
                    ExprKind::Field(Box::new(e), n)
                }
                Rule::index_access => {
                    let i = c.into_inner().find(|x| x.as_rule() == Rule::expr);
                    let i = i
                        .map(|i| self.expr(i))
                        .unwrap_or_else(|| self.missing_expr());
                    ExprKind::Index(Box::new(e), Box::new(i))
                }
                _ => {
                    let args = c
                        .into_inner()
                        .filter(|x| x.as_rule() == Rule::expr)
                        .map(|x| self.expr(x))
                        .collect();
                    ExprKind::Call(Box::new(e), args)
                }
            };
            e = Expr { kind, span };
        }
        e
    }

    fn atom(&mut self, p: P<'_>) -> Expr {
        let span = self.span(&p);
        let Some(c) = p.into_inner().next() else {
            return self.missing_expr();
        };
        let kind = match c.as_rule() {
            Rule::number => match self.number(&c) {
                ValueKind::Int(v) => ExprKind::Int(v),
                ValueKind::Float(v) => ExprKind::Float(v),
                _ => ExprKind::Int(0),
            },
            Rule::string => ExprKind::Str(self.string(c).value),
            Rule::boolean => ExprKind::Bool(c.as_str() == "true"),
            Rule::capture => ExprKind::Capture(self.name(c)),
            Rule::list_expr => ExprKind::List(
                c.into_inner()
                    .filter(|x| x.as_rule() == Rule::expr)
                    .map(|x| self.expr(x))
                    .collect(),
            ),
            Rule::paren_expr => {
                let inner = c.into_inner().find(|x| x.as_rule() == Rule::expr);
                return inner
                    .map(|x| self.expr(x))
                    .unwrap_or_else(|| self.missing_expr());
            }
            _ => ExprKind::Ident(self.name(c)),
        };
        Expr { kind, span }
    }

    // ----- combiners and rules -----

    fn combiner(&mut self, p: P<'_>) -> Comb {
        let span = self.span(&p);
        let terms = p
            .into_inner()
            .filter(|c| c.as_rule() == Rule::combiner_term)
            .filter_map(|t| t.into_inner().next())
            .map(|t| match t.as_rule() {
                Rule::by_kind => {
                    let tspan = self.span(&t);
                    let pairs = t
                        .into_inner()
                        .filter(|x| x.as_rule() == Rule::kind_pair)
                        .map(|k| {
                            let mut names = k
                                .into_inner()
                                .filter(|x| x.as_rule() == Rule::ident)
                                .map(|x| self.name(x));
                            let a = names.next().unwrap_or_else(|| self.missing());
                            let b = names.next().unwrap_or_else(|| self.missing());
                            (a, b)
                        })
                        .collect();
                    CombTerm::ByKind(pairs, tspan)
                }
                _ => CombTerm::Named(self.name(t)),
            })
            .collect();
        Comb { terms, span }
    }

    fn rule_expr(&mut self, p: P<'_>) -> RuleExpr {
        if !self.enter(&p) {
            self.depth -= 1;
            return RuleExpr {
                kind: RuleKind::Union(Vec::new()),
                span: self.span(&p),
            };
        }
        let r = self.rule_expr_inner(p);
        self.depth -= 1;
        r
    }

    fn rule_expr_inner(&mut self, p: P<'_>) -> RuleExpr {
        let span = self.span(&p);
        let Some(c) = p.into_inner().next() else {
            return RuleExpr {
                kind: RuleKind::Union(Vec::new()),
                span,
            };
        };
        let rule = c.as_rule();
        if rule == Rule::ident {
            return RuleExpr {
                kind: RuleKind::Ref(self.name(c)),
                span,
            };
        }
        let mut rules = Vec::new();
        let mut options = Vec::new();
        let mut pat = None;
        let mut comb = None;
        let mut string = None;
        let mut entries = Vec::new();
        let mut ident = None;
        for x in c.into_inner() {
            match x.as_rule() {
                Rule::rule_expr => rules.push(self.rule_expr(x)),
                Rule::config_entry => options.push(self.config_entry(x)),
                Rule::pattern => pat = Some(self.pattern(x)),
                Rule::combiner => comb = Some(self.combiner(x)),
                Rule::string => string = Some(self.string(x)),
                Rule::ident => ident = Some(self.name(x)),
                Rule::ops_entry => {
                    let mut inner = x.into_inner();
                    match inner.next() {
                        Some(e) if e.as_rule() == Rule::config_entry => {
                            options.push(self.config_entry(e))
                        }
                        Some(e) => {
                            let name = self.name(e);
                            let guard = inner
                                .find(|g| g.as_rule() == Rule::expr)
                                .map(|g| self.expr(g));
                            entries.push((name, guard));
                        }
                        None => {}
                    }
                }
                _ => {}
            }
        }
        let mut first_rule = || {
            Box::new(if rules.is_empty() {
                RuleExpr {
                    kind: RuleKind::Union(Vec::new()),
                    span,
                }
            } else {
                rules.remove(0)
            })
        };
        let kind = match rule {
            Rule::pattern_rule => RuleKind::Pattern(pat.unwrap_or_else(|| self.missing_pat())),
            Rule::ops_rule => RuleKind::Ops { entries, options },
            Rule::composite_rule => {
                let inner = first_rule();
                RuleKind::Composite(
                    string.unwrap_or(Str {
                        value: String::new(),
                        span,
                    }),
                    inner,
                )
            }
            Rule::primitive_rule => RuleKind::Primitive(first_rule()),
            Rule::union_rule => RuleKind::Union(rules),
            Rule::combine_rule => {
                let inner = first_rule();
                RuleKind::Combine(
                    inner,
                    comb.unwrap_or(Comb {
                        terms: Vec::new(),
                        span,
                    }),
                    options,
                )
            }
            Rule::only_valid_rule => RuleKind::OnlyValid(first_rule(), options),
            _ => RuleKind::Ref(ident.unwrap_or_else(|| self.missing())),
        };
        RuleExpr { kind, span }
    }

    // ----- placeholders for grammar/lowering mismatches (never expected) -----

    fn missing(&self) -> Name {
        Name {
            text: String::new(),
            span: Span::default(),
        }
    }

    fn missing_pat(&self) -> Pat {
        Pat {
            kind: PatKind::Wildcard,
            span: Span::default(),
        }
    }

    fn missing_expr(&self) -> Expr {
        Expr {
            kind: ExprKind::Bool(false),
            span: Span::default(),
        }
    }
}
