//! The pest parser generated from `grammar/rules.pest`, and human names for its rules.

#![allow(missing_docs)]

use pest_derive::Parser;

/// The generated parser for `.rules` files.
#[derive(Parser)]
#[grammar = "../grammar/rules.pest"]
pub struct RulesParser;

/// The name of a grammar rule as users should read it in "expected ..." messages.
pub fn rule_label(r: Rule) -> &'static str {
    match r {
        Rule::WHITESPACE => "whitespace",
        Rule::COMMENT => "a comment",
        Rule::ident_char => "a letter, digit or `_`",
        Rule::item => "an item (`import`, `operator`, `pattern`, `predicate`, `combiner`, `rule`, `equiv`, `rewrite` or `target`)",
        Rule::braced => "a `{ ... }` block",
        Rule::semi => "`;`",
        Rule::comma => "`,`",
        Rule::eq => "`=`",
        Rule::eqeq => "`==`",
        Rule::fat_arrow => "`=>`",
        Rule::arrow => "`->`",
        Rule::lparen => "`(`",
        Rule::rparen => "`)`",
        Rule::lbracket => "`[`",
        Rule::rbracket => "`]`",
        Rule::lbrace => "`{`",
        Rule::rbrace => "`}`",
        Rule::colon => "`:`",
        Rule::dot => "`.`",
        Rule::bar => "`|`",
        Rule::question => "`?`",
        Rule::plus => "`+`",
        Rule::dotdot => "`..`",
        Rule::ident => "a name",
        Rule::op_name => "an operator name",
        Rule::capture => "a capture such as `$x`",
        Rule::keyword => "a keyword",
        Rule::kw_import => "`import`",
        Rule::kw_operator => "`operator`",
        Rule::kw_pattern => "`pattern`",
        Rule::kw_predicate => "`predicate`",
        Rule::kw_combiner => "`combiner`",
        Rule::kw_rule => "`rule`",
        Rule::kw_equiv => "`equiv`",
        Rule::kw_rewrite => "`rewrite`",
        Rule::kw_target => "`target`",
        Rule::kw_where => "`where`",
        Rule::kw_as => "`as`",
        Rule::kw_const => "`const`",
        Rule::kw_true => "`true`",
        Rule::kw_false => "`false`",
        Rule::kw_in => "`in`",
        Rule::number => "a number",
        Rule::string => "a string",
        Rule::boolean => "`true` or `false`",
        Rule::quantity => "a quantity such as `5 us`",
        Rule::unit => "a unit (`tflops`, `gflops`, `tbps`, `gbps`, `ns`, `us`, `ms`, `s`)",
        Rule::file | Rule::EOI => "end of file",
        Rule::bad_item => "an item",
        Rule::import_item => "an import",
        Rule::operator_item => "an operator declaration",
        Rule::arg_names => "argument names",
        Rule::pattern_item => "a pattern definition",
        Rule::pattern_params => "pattern parameters",
        Rule::predicate_item => "a predicate definition",
        Rule::capture_list => "predicate parameters",
        Rule::predicate_param => "a parameter such as `$x` or `$conv: nn.conv2d`",
        Rule::combiner_item => "a combiner definition",
        Rule::rule_item => "a rule definition",
        Rule::equiv_item => "an equivalence",
        Rule::rewrite_item => "a rewrite",
        Rule::target_item => "a target",
        Rule::pattern | Rule::pat_alt | Rule::pat_as | Rule::pat_postfix | Rule::pat_primary => "a pattern",
        Rule::projection => "a projection `.N`",
        Rule::index_lit => "a field index",
        Rule::type_constraint => "a type constraint",
        Rule::dtype_constraint => "`dtype(...)`",
        Rule::rank_constraint => "`rank(...)`",
        Rule::shape_constraint => "`shape(...)`",
        Rule::shape_dim => "a dimension or `_`",
        Rule::wildcard => "`_`",
        Rule::any_tuple => "`tuple(..)`",
        Rule::alt_call => "an operator alternative such as `(add | multiply)(...)`",
        Rule::named => "an operator or pattern name",
        Rule::attr_constraints => "attribute constraints `[name = value]`",
        Rule::attr_eq => "`name = value`",
        Rule::pat_args => "arguments `(...)`",
        Rule::paren_pat => "a parenthesised pattern or a tuple",
        Rule::expr | Rule::or_expr | Rule::and_expr | Rule::cmp_expr | Rule::add_expr
        | Rule::mul_expr | Rule::unary_expr | Rule::postfix_expr | Rule::atom => "an expression",
        Rule::or_op => "`||`",
        Rule::and_op => "`&&`",
        Rule::cmp_op => "a comparison",
        Rule::add_op => "`+` or `-`",
        Rule::mul_op => "`*`, `/` or `%`",
        Rule::unary_op => "`!` or `-`",
        Rule::field_access => "a field such as `.dtype`",
        Rule::index_access => "an index `[i]`",
        Rule::call_args => "arguments `(...)`",
        Rule::list_expr => "a list `[...]`",
        Rule::paren_expr => "a parenthesised expression",
        Rule::combiner | Rule::combiner_term => "a combiner",
        Rule::by_kind => "`by_kind(...)`",
        Rule::kind_pair => "a kind pair such as `A -> B`",
        Rule::rule_expr => "a partition rule",
        Rule::pattern_rule => "`pattern(...)`",
        Rule::ops_rule => "`ops(...)`",
        Rule::ops_entry => "an operator or an option",
        Rule::composite_rule => "`composite(...)`",
        Rule::primitive_rule => "`primitive(...)`",
        Rule::union_rule => "`union(...)`",
        Rule::combine_rule => "`combine(...)`",
        Rule::only_valid_rule => "`only_valid(...)`",
        Rule::config_entry => "an option `name = value`",
        Rule::config_key => "an option name",
        Rule::target_entry => "a target field",
        Rule::patterns_field => "`patterns = [...]`",
        Rule::pattern_entry => "a pattern entry `\"name\" = PATTERN`",
        Rule::rule_field => "`rule = ...`",
        Rule::field => "a field `name = value;`",
        Rule::cost_block => "a `cost { ... }` block",
        Rule::efficiency_block => "an `efficiency { ... }` block",
        Rule::efficiency_entry => "an efficiency entry",
        Rule::transition_block => "a `transition { ... }` block",
        Rule::value => "a value",
        Rule::device_literal => "a virtual device",
        Rule::call_value => "a value such as `cuda(0)`",
        Rule::list_value => "a list",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pest::Parser;

    fn parses(rule: Rule, text: &str) -> bool {
        match RulesParser::parse(rule, text) {
            Ok(mut pairs) => pairs
                .next()
                .is_some_and(|p| p.as_str().len() == text.trim_end().len()),
            Err(_) => false,
        }
    }

    #[test]
    fn patterns_parse() {
        for p in [
            "_",
            "$x",
            "nn.dense($lhs, $rhs)",
            "(add | nn.bias_add)(nn.dense(_, _), _)",
            "nn.relu?(bias(conv_nhwc))",
            "nn.conv2d[data_layout = \"NHWC\", groups = 1]($d, $w) as $conv",
            "nn.batch_norm(_, const, const, const, const).0",
            "$x : dtype(float16 | float32) : rank(4)",
            "$x : shape(1, _, _, 64)",
            "(_, _)",
            "tuple(..)",
            "nn.dense($a, $b) where $a.dtype == float16 && $b.shape[0] % 8 == 0",
            "concatenate(tuple(..))",
        ] {
            assert!(parses(Rule::pattern, p), "{p}");
        }
    }

    #[test]
    fn items_parse() {
        let file = r#"
            import "prelude.rules";
            operator my.scale(data) : elemwise;
            pattern bias(x) = (add | nn.bias_add)(x, _);
            predicate gemm($a, $b) = $a.dtype == $b.dtype && $a.dtype in [float16, float32];
            combiner fuse_ops = by_kind(A -> B, B -> R, I -> I) + tuple_arg + tuple_proj;
            rule tvm = only_valid(combine(op_call_by_kind, fuse_ops), max_exits = 1, taps = false);
            equiv add($a, $b) == add($b, $a);
            rewrite nn.bias_add($x, $b) => add($x, $b);
            target cutlass {
                compiler = "cutlass";
                device = cuda(0);
                fusion = none;
                patterns = [ "cutlass.dense" = nn.dense(_, _), ];
                cost { peak = 19.5 tflops; launch = 5 us; efficiency { nn.dense = 0.7; default = 0.3; } }
                transition { latency = 10 us; bandwidth = 12 gbps; }
            }
        "#;
        let pairs = RulesParser::parse(Rule::file, file).unwrap();
        let items: Vec<_> = pairs
            .flatten()
            .filter(|p| p.as_rule() == Rule::bad_item)
            .collect();
        assert!(items.is_empty(), "{items:?}");
    }

    #[test]
    fn bad_items_recover() {
        let file = "pattern a = ;\npattern b = _;\ntarget t { oops }\nrule r = x;";
        let pairs = RulesParser::parse(Rule::file, file).unwrap();
        let kinds: Vec<_> = pairs
            .flatten()
            .filter(|p| {
                matches!(
                    p.as_rule(),
                    Rule::bad_item | Rule::pattern_item | Rule::rule_item
                )
            })
            .map(|p| p.as_rule())
            .collect();
        assert_eq!(
            kinds,
            [
                Rule::bad_item,
                Rule::pattern_item,
                Rule::bad_item,
                Rule::rule_item
            ]
        );
    }
}
