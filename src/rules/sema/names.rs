//! Definitions, scopes and the checker's shared state.
//!
//! Each file sees its own definitions and those of every file it imports, directly or not. One
//! namespace holds patterns, predicates, combiners, rules and targets; defining a name twice in
//! one scope is an error that shows both definitions. Custom operators live with the registry's
//! operators.

use super::load::Loaded;
use crate::diag::*;
use crate::rules::dsl::ast::{self, ItemKind};
use crate::rules::ruletree::{Combiner, Program, Rule};
use crate::source::Span;
use std::collections::{BTreeMap, HashMap, HashSet};

/// What a name stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DefKind {
    Pattern,
    Predicate,
    Combiner,
    Rule,
    Target,
}

impl DefKind {
    pub(crate) fn noun(self) -> &'static str {
        match self {
            DefKind::Pattern => "a pattern",
            DefKind::Predicate => "a predicate",
            DefKind::Combiner => "a combiner",
            DefKind::Rule => "a rule",
            DefKind::Target => "a target",
        }
    }
}

/// One definition.
pub(crate) struct Def {
    pub kind: DefKind,
    pub name: String,
    pub name_span: Span,
    /// (file index, item index)
    pub at: (usize, usize),
}

/// Index into [`Checker::defs`].
pub(crate) type DefId = usize;

/// The checker's state.
pub(crate) struct Checker<'f> {
    pub files: &'f [Loaded],
    pub defs: Vec<Def>,
    /// Visible names per file.
    pub scopes: Vec<HashMap<String, DefId>>,
    pub used: HashSet<DefId>,
    diags: Diagnostics,
    /// While > 0, diagnostics are dropped (re-expansion of already checked bodies).
    pub mute: u32,
    /// Diagnostics already reported (code, message, primary span).
    reported: HashSet<(Code, String, Option<Span>)>,
    /// Pattern uses being expanded, innermost last: the use site and the pattern's name.
    pub expansions: Vec<(Span, String)>,
    /// Patterns with parameters that have been expanded at least once.
    pub expanded: HashSet<DefId>,
    /// Definitions being compiled, for cycle detection.
    pub in_progress: Vec<DefId>,
    pub rule_memo: HashMap<DefId, Option<Rule>>,
    pub combiner_memo: HashMap<DefId, Option<Vec<Combiner>>>,
    /// The file whose items are being compiled.
    pub current_file: usize,
    pub program: Program,
    /// Target names to their index in `program.targets` (filled as targets compile).
    pub target_index: BTreeMap<String, usize>,
    /// Names defined by items that did not parse: their uses are not reported as undefined.
    pub poisoned: HashSet<String>,
    /// Per file: whether its scope is incomplete (an import failed, directly or not).
    pub incomplete: Vec<bool>,
    /// Per file: whether it declares a target.
    pub has_targets: Vec<bool>,
    /// Per file: the custom operators declared in its scope (it and its imports).
    pub custom_in_scope: Vec<HashSet<String>>,
    /// The definition made by each (file, item).
    def_at: HashMap<(usize, usize), DefId>,
}

impl<'f> Checker<'f> {
    pub fn new(files: &'f [Loaded]) -> Checker<'f> {
        Checker {
            files,
            defs: Vec::new(),
            scopes: vec![HashMap::new(); files.len()],
            used: HashSet::new(),
            diags: Diagnostics::new(),
            mute: 0,
            reported: HashSet::new(),
            expansions: Vec::new(),
            expanded: HashSet::new(),
            in_progress: Vec::new(),
            rule_memo: HashMap::new(),
            combiner_memo: HashMap::new(),
            current_file: 0,
            program: Program::default(),
            target_index: BTreeMap::new(),
            poisoned: files
                .iter()
                .flat_map(|f| f.ast.items.iter())
                .filter_map(|i| match &i.kind {
                    ItemKind::Bad(Some(n)) => Some(n.text.clone()),
                    _ => None,
                })
                .collect(),
            incomplete: vec![false; files.len()],
            custom_in_scope: vec![HashSet::new(); files.len()],
            def_at: HashMap::new(),
            has_targets: files
                .iter()
                .map(|f| {
                    f.ast
                        .items
                        .iter()
                        .any(|i| matches!(i.kind, ItemKind::Target { .. }))
                })
                .collect(),
        }
    }

    /// Reports a diagnostic unless muted or already reported (pattern bodies with parameters
    /// are checked at every use, so the same problem can come up more than once). Inside the
    /// expansion of a pattern use, the use site is added as a secondary label.
    pub fn report(&mut self, mut d: Diagnostic) {
        if self.mute > 0 {
            return;
        }
        let key = (d.code, d.message.clone(), d.primary_span());
        if !self.reported.insert(key) {
            return;
        }
        if let (Some(&(site, ref name)), Some(primary)) = (self.expansions.last(), d.primary_span())
        {
            let inside =
                primary.file == site.file && primary.start >= site.start && primary.end <= site.end;
            if !inside {
                d = d.with_secondary(site, format!("in this use of pattern `{name}`"));
            }
        }
        self.diags.push(d);
    }

    pub fn take_diags(&mut self) -> Diagnostics {
        std::mem::take(&mut self.diags)
    }

    pub fn item(&self, at: (usize, usize)) -> &'f ast::Item {
        &self.files[at.0].ast.items[at.1]
    }

    /// Collects every definition and builds each file's scope.
    pub fn declare_all(&mut self) {
        let mut own: Vec<Vec<DefId>> = vec![Vec::new(); self.files.len()];
        for (fi, f) in self.files.iter().enumerate() {
            for (ii, item) in f.ast.items.iter().enumerate() {
                let (kind, name) = match &item.kind {
                    ItemKind::Pattern { name, .. } => (DefKind::Pattern, name),
                    ItemKind::Predicate { name, .. } => (DefKind::Predicate, name),
                    ItemKind::Combiner { name, .. } => (DefKind::Combiner, name),
                    ItemKind::Rule { name, .. } => (DefKind::Rule, name),
                    ItemKind::Target { name, .. } => (DefKind::Target, name),
                    _ => continue,
                };
                if name.text.is_empty() {
                    continue;
                }
                if kind == DefKind::Pattern && crate::ops::registry().lookup(&name.text).is_some() {
                    let d = Diagnostic::error(E1203, format!("`{}` is an operator name", name.text))
                        .with_primary(name.span, "a pattern of this name could never be used")
                        .with_note("uses of the name would call the operator; choose another name for the pattern");
                    self.diags.push(d);
                }
                own[fi].push(self.defs.len());
                self.def_at.insert((fi, ii), self.defs.len());
                self.defs.push(Def {
                    kind,
                    name: name.text.clone(),
                    name_span: name.span,
                    at: (fi, ii),
                });
            }
        }
        for fi in 0..self.files.len() {
            let visible = self.visible_files(fi);
            self.incomplete[fi] = visible.iter().any(|&v| self.files[v].broken);
            self.custom_in_scope[fi] = visible
                .iter()
                .flat_map(|&v| self.files[v].ast.items.iter())
                .filter_map(|i| match &i.kind {
                    ItemKind::Operator { name, .. } => Some(name.text.clone()),
                    _ => None,
                })
                .collect();
            let mut scope: HashMap<String, DefId> = HashMap::new();
            for vf in visible {
                for &d in &own[vf] {
                    let name = self.defs[d].name.clone();
                    match scope.get(&name) {
                        Some(&prev) if prev != d => {
                            // Report each clash once, in the file that sees both.
                            let (a, b) = if self.defs[prev].at < self.defs[d].at {
                                (prev, d)
                            } else {
                                (d, prev)
                            };
                            if vf == fi
                                || self.defs[a].at.0 == fi
                                || self.defs[b].at.0 == fi
                                || !self.reported_clash(a, b)
                            {
                                let diag = Diagnostic::error(
                                    E1202,
                                    format!("`{name}` is defined more than once"),
                                )
                                .with_primary(
                                    self.defs[b].name_span,
                                    format!("redefined here as {}", self.defs[b].kind.noun()),
                                )
                                .with_secondary(
                                    self.defs[a].name_span,
                                    format!("first defined here as {}", self.defs[a].kind.noun()),
                                );
                                if !self.diags.iter().any(|x| *x == diag) {
                                    self.report(diag);
                                }
                            }
                        }
                        _ => {
                            scope.insert(name, d);
                        }
                    }
                }
            }
            self.scopes[fi] = scope;
        }
        let mut targets: HashMap<String, DefId> = HashMap::new();
        for (d, def) in self.defs.iter().enumerate() {
            if def.kind == DefKind::Target {
                if let Some(&prev) = targets.get(&def.name) {
                    if self.defs[prev].at.0 != def.at.0
                        && !self.scopes[def.at.0].contains_key(&def.name)
                    {
                        continue;
                    }
                    let diag = Diagnostic::error(
                        E1202,
                        format!("target `{}` is defined more than once", def.name),
                    )
                    .with_primary(def.name_span, "redefined here")
                    .with_secondary(self.defs[prev].name_span, "first defined here");
                    if !self.diags.iter().any(|x| *x == diag) {
                        self.diags.push(diag);
                    }
                } else {
                    targets.insert(def.name.clone(), d);
                }
            }
        }
    }

    fn reported_clash(&self, a: DefId, b: DefId) -> bool {
        self.diags.iter().any(|d| {
            d.code == E1202
                && d.primary_span() == Some(self.defs[b].name_span)
                && d.labels.iter().any(|l| l.span == self.defs[a].name_span)
        })
    }

    /// The file itself and everything it imports, transitively, in a fixed order.
    fn visible_files(&self, fi: usize) -> Vec<usize> {
        let mut seen = vec![false; self.files.len()];
        let mut order = Vec::new();
        let mut stack = vec![fi];
        while let Some(f) = stack.pop() {
            if seen[f] {
                continue;
            }
            seen[f] = true;
            order.push(f);
            for &i in self.files[f].imports.iter().rev() {
                stack.push(i);
            }
        }
        order.sort();
        order
    }

    /// Looks up a name in the current file's scope and marks it used.
    pub fn lookup(&mut self, name: &str) -> Option<DefId> {
        let d = self.scopes.get(self.current_file)?.get(name).copied()?;
        self.used.insert(d);
        Some(d)
    }

    /// Looks up a name that must be of `kind`; reports E1201/E1203 otherwise.
    pub fn lookup_kind(&mut self, name: &ast::Name, kind: DefKind) -> Option<DefId> {
        match self.lookup(&name.text) {
            Some(d) if self.defs[d].kind == kind => Some(d),
            Some(d) => {
                let other = self.defs[d].kind;
                let mut diag = Diagnostic::error(
                    E1203,
                    format!("`{}` is {}, not {}", name.text, other.noun(), kind.noun()),
                )
                .with_primary(name.span, format!("expected {}", kind.noun()))
                .with_secondary(
                    self.defs[d].name_span,
                    format!("defined here as {}", other.noun()),
                );
                if other == DefKind::Pattern && kind == DefKind::Rule {
                    diag = diag.with_note(format!(
                        "help: turn a pattern into a rule with `pattern({})`",
                        name.text
                    ));
                }
                self.report(diag);
                None
            }
            None => {
                self.undefined(name, kind.noun());
                None
            }
        }
    }

    /// Whether an unresolved name may be explained by an earlier error (an item that did not
    /// parse, or an import that failed), so reporting it would only add noise.
    pub fn unresolved_is_explained(&self, name: &str) -> bool {
        self.poisoned.contains(name)
            || self
                .incomplete
                .get(self.current_file)
                .copied()
                .unwrap_or(false)
    }

    /// Reports an undefined name with a suggestion.
    pub fn undefined(&mut self, name: &ast::Name, what: &str) {
        if self.unresolved_is_explained(&name.text) {
            return;
        }
        let mut candidates: Vec<&str> = self
            .scopes
            .get(self.current_file)
            .map(|s| s.keys().map(String::as_str).collect())
            .unwrap_or_default();
        candidates.extend([
            "tuple_arg",
            "tuple_proj",
            "constant",
            "op_call_by_kind",
            "host",
        ]);
        candidates.sort();
        let mut d = Diagnostic::error(E1201, format!("undefined name `{}`", name.text))
            .with_primary(name.span, format!("expected {what}"));
        if let Some(s) = crate::util::closest(&name.text, candidates.into_iter()) {
            d = d.with_note(format!("help: did you mean `{s}`?"));
        }
        self.report(d);
    }

    /// Compiles every item of every file, in order.
    pub fn compile_all(&mut self) -> Program {
        for fi in 0..self.files.len() {
            self.current_file = fi;
            for ii in 0..self.files[fi].ast.items.len() {
                self.compile_item(fi, ii);
            }
        }
        self.check_unexpanded_patterns();
        self.warn_unused();
        std::mem::take(&mut self.program)
    }

    fn compile_item(&mut self, fi: usize, ii: usize) {
        let item = &self.files[fi].ast.items[ii];
        match &item.kind {
            ItemKind::Import(_) | ItemKind::Bad(_) => {}
            ItemKind::Operator { name, args, kind } => self.declare_operator(name, args, kind),
            ItemKind::Pattern { name, params, body } => {
                // A pattern with parameters is checked where it is used (its parameters decide
                // what its captures are); unused ones are checked on their own at the end.
                if params.is_empty() {
                    let d = self.lookup_quiet(&name.text, (fi, ii));
                    self.in_progress.extend(d);
                    self.check_pattern_def(params, body);
                    if d.is_some() {
                        self.in_progress.pop();
                    }
                }
            }
            ItemKind::Predicate { name, params, body } => {
                let d = self.lookup_quiet(&name.text, (fi, ii));
                self.in_progress.extend(d);
                self.check_predicate_def(params, body);
                if d.is_some() {
                    self.in_progress.pop();
                }
            }
            ItemKind::Combiner { name, .. } => {
                if let Some(d) = self.lookup_quiet(&name.text, (fi, ii)) {
                    let _ = self.combiner_def(d);
                }
            }
            ItemKind::Rule { name, .. } => {
                if let Some(d) = self.lookup_quiet(&name.text, (fi, ii)) {
                    let _ = self.rule_def(d);
                }
            }
            ItemKind::Equiv { lhs, rhs } => self.equivalence(lhs, rhs, true, item.span),
            ItemKind::Rewrite { lhs, rhs } => self.equivalence(lhs, rhs, false, item.span),
            ItemKind::Target { name, entries } => self.target(name, entries, item.span),
        }
    }

    /// Checks, on their own, the patterns with parameters that no use expanded.
    fn check_unexpanded_patterns(&mut self) {
        for d in 0..self.defs.len() {
            if self.defs[d].kind != DefKind::Pattern || self.expanded.contains(&d) {
                continue;
            }
            let at = self.defs[d].at;
            let item = self.item(at);
            if let ItemKind::Pattern { params, body, .. } = &item.kind {
                if !params.is_empty() {
                    self.current_file = at.0;
                    self.check_pattern_def(params, body);
                }
            }
        }
    }

    /// The definition made by item `at`, without marking it used.
    fn lookup_quiet(&self, name: &str, at: (usize, usize)) -> Option<DefId> {
        self.def_at
            .get(&at)
            .copied()
            .filter(|&d| self.defs[d].name == name)
    }

    /// Unused definitions in files that declare targets are warnings; files without targets
    /// are libraries, whose definitions are there for importers.
    fn warn_unused(&mut self) {
        for (d, def) in self.defs.iter().enumerate() {
            if def.kind == DefKind::Target || self.used.contains(&d) {
                continue;
            }
            if !self.has_targets[def.at.0] {
                continue;
            }
            let w = Diagnostic::warning(
                W1204,
                format!("{} `{}` is never used", def.kind.noun(), def.name),
            )
            .with_primary(def.name_span, "defined here")
            .with_note("remove it, or use it from a target");
            self.diags.push(w);
        }
    }

    /// Runs `f` with diagnostics muted.
    pub fn muted<T>(&mut self, f: impl FnOnce(&mut Self) -> T) -> T {
        self.mute += 1;
        let r = f(self);
        self.mute -= 1;
        r
    }

    /// Starts compiling a definition; reports a cycle if it is already being compiled.
    pub fn enter_def(&mut self, d: DefId, use_span: Span) -> bool {
        if let Some(pos) = self.in_progress.iter().position(|&x| x == d) {
            let chain: Vec<String> = self.in_progress[pos..]
                .iter()
                .map(|&x| format!("`{}`", self.defs[x].name))
                .collect();
            let diag =
                Diagnostic::error(E1205, format!("`{}` refers to itself", self.defs[d].name))
                    .with_primary(use_span, "this use closes the cycle")
                    .with_secondary(self.defs[d].name_span, "defined here")
                    .with_note(format!(
                        "cycle: {} -> `{}`",
                        chain.join(" -> "),
                        self.defs[d].name
                    ));
            // Reported even while re-expanding a checked body: a cycle through several
            // definitions is only visible from inside an expansion.
            let saved = std::mem::replace(&mut self.mute, 0);
            self.report(diag);
            self.mute = saved;
            return false;
        }
        self.in_progress.push(d);
        true
    }

    pub fn leave_def(&mut self) {
        self.in_progress.pop();
    }
}
