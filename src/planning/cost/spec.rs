//! The `--costs` specification: parsed once, where the command line is read, into a [`Spec`];
//! [`super::from_spec`] then builds its estimator chain.
//!
//! Items joined by `+` are tried in order (`table:m.json+analytic`): `analytic`, `measure`,
//! `mock:FILE.json`, `table:FILE.json` and `cmd:COMMAND`. A `cmd:` item takes the rest of the
//! specification, `+` included, and loses one pair of surrounding single quotes
//! (`cmd:'./measure.sh --gpu 0'`). Parsing checks the form only; the files of `mock:` and
//! `table:` items are read when the chain is built.

use super::SpecError;
use std::fmt;
use std::path::PathBuf;

/// One item of a cost specification.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Item {
    /// The roofline model of the targets' `cost` blocks.
    Analytic,
    /// The measuring estimator, which the command opens and hands to the chain.
    Measure,
    /// TVM's mock estimator, read from a JSON file.
    Mock(String),
    /// A table of measured costs, read from a JSON file.
    Table(String),
    /// An external measurer: a shell command.
    Cmd(String),
}

/// A parsed `--costs` specification: its items in order, and the text it was given as.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Spec {
    text: String,
    items: Vec<Item>,
}

impl Spec {
    /// Parses a specification; an error is the text of E2104 after `invalid `--costs`: `.
    pub fn parse(spec: &str) -> Result<Spec, SpecError> {
        let mut items = Vec::new();
        let mut rest = spec.trim();
        while !rest.is_empty() {
            if let Some(command) = rest.strip_prefix("cmd:") {
                let command = command.trim();
                let command = command
                    .strip_prefix('\'')
                    .and_then(|c| c.strip_suffix('\''))
                    .unwrap_or(command);
                if command.trim().is_empty() {
                    return Err(SpecError("`cmd:` needs a command".into()));
                }
                items.push(Item::Cmd(command.to_string()));
                break;
            }
            let (item, tail) = match rest.find('+') {
                Some(p) => (&rest[..p], &rest[p + 1..]),
                None => (rest, ""),
            };
            let item = item.trim();
            if item.is_empty() || (rest.contains('+') && tail.trim().is_empty()) {
                return Err(SpecError(format!(
                    "empty item in the cost specification `{spec}`"
                )));
            }
            rest = tail.trim();
            let (kind, arg) = match item.split_once(':') {
                Some((k, a)) => (k, Some(a)),
                None => (item, None),
            };
            items.push(match (kind, arg) {
                ("analytic", None) => Item::Analytic,
                ("measure", None) => Item::Measure,
                ("mock", Some(path)) => Item::Mock(path.to_string()),
                ("table", Some(path)) => Item::Table(path.to_string()),
                ("mock" | "table", None) => {
                    return Err(SpecError(format!(
                        "`{kind}` needs a file: `{kind}:FILE.json`"
                    )))
                }
                _ => {
                    return Err(SpecError(format!(
                        "unknown cost estimator `{item}`; expected `analytic`, `measure`, \
                         `mock:FILE.json`, `table:FILE.json` or `cmd:COMMAND`"
                    )))
                }
            });
        }
        if items.is_empty() {
            return Err(SpecError("the cost specification is empty".into()));
        }
        Ok(Spec {
            text: spec.to_string(),
            items,
        })
    }

    /// The items, in order.
    pub fn items(&self) -> &[Item] {
        &self.items
    }

    /// Whether the specification has a `measure` item.
    pub fn uses_measure(&self) -> bool {
        self.items.contains(&Item::Measure)
    }

    /// The files the specification reads (its `mock:` and `table:` items), in order.
    pub fn files(&self) -> Vec<PathBuf> {
        self.items
            .iter()
            .filter_map(|i| match i {
                Item::Mock(f) | Item::Table(f) => Some(PathBuf::from(f)),
                _ => None,
            })
            .collect()
    }

    /// The specification as it was given.
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

impl fmt::Display for Spec {
    /// The specification as it was given.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_parse_in_order() {
        let s = Spec::parse(" table:t.json + analytic+mock:dir/m.json").unwrap();
        assert_eq!(
            s.items(),
            [
                Item::Table("t.json".into()),
                Item::Analytic,
                Item::Mock("dir/m.json".into())
            ]
        );
        assert_eq!(s.to_string(), " table:t.json + analytic+mock:dir/m.json");
        let s = Spec::parse("measure+cmd:'echo 1 + 2'").unwrap();
        assert_eq!(s.items(), [Item::Measure, Item::Cmd("echo 1 + 2".into())]);
    }

    #[test]
    fn malformed_specs_say_why() {
        let err = |s: &str| Spec::parse(s).unwrap_err().0;
        assert_eq!(err(""), "the cost specification is empty");
        assert_eq!(err("  "), "the cost specification is empty");
        assert_eq!(err("cmd: "), "`cmd:` needs a command");
        assert_eq!(err("cmd:''"), "`cmd:` needs a command");
        assert_eq!(
            err("analytic+"),
            "empty item in the cost specification `analytic+`"
        );
        assert_eq!(
            err("analytic++mock:m.json"),
            "empty item in the cost specification `analytic++mock:m.json`"
        );
        assert_eq!(err("table"), "`table` needs a file: `table:FILE.json`");
        assert!(err("analytic:x").starts_with("unknown cost estimator `analytic:x`;"));
    }
}
