"""The mutation operators: cosmic-ray's own, plus the two kinds it lacks, written as cosmic-ray operators
so its engine (cosmic_ray.mutating.mutate_code, one occurrence at a time) applies them all alike."""

from __future__ import annotations

import parso.python.tree
from cosmic_ray.operators.operator import Example, Operator
from cosmic_ray.plugins import get_operator


class ReplaceReturnValue(Operator):
    """`return EXPR` becomes `return None` (cosmic-ray has no replaced-return-value operator)."""

    def mutation_positions(self, node):
        if node.type == "return_stmt" and len(node.children) == 2 and node.children[1].get_code().strip() != "None":
            yield (node.start_pos, node.end_pos)

    def mutate(self, node, index):
        value = node.children[1]
        prefix = value.get_first_leaf().prefix or " "
        node.children[1] = parso.python.tree.Keyword("None", value.start_pos, prefix=prefix)
        return node

    @classmethod
    def examples(cls):
        return (Example("def f():\n    return 1\n", "def f():\n    return None\n"),)


class DeleteStatement(Operator):
    """A call statement or an augmented assignment becomes `pass` (cosmic-ray has no statement deletion)."""

    def mutation_positions(self, node):
        if node.type != "simple_stmt" or len(node.children) != 2:
            return
        stmt = node.children[0]
        is_call = stmt.type == "atom_expr" and stmt.children[-1].type == "trailer" and \
            stmt.children[-1].children[0].value == "("
        is_aug = stmt.type == "expr_stmt" and len(stmt.children) == 3 and stmt.children[1].type == "operator" \
            and stmt.children[1].value.endswith("=") and stmt.children[1].value != "="
        if is_call or is_aug:
            yield (stmt.start_pos, stmt.end_pos)

    def mutate(self, node, index):
        stmt = node.children[0]
        node.children[0] = parso.python.tree.Keyword("pass", stmt.start_pos, prefix=stmt.get_first_leaf().prefix)
        return node

    @classmethod
    def examples(cls):
        return (Example("x.append(1)\n", "pass\n"), Example("n += 1\n", "pass\n"))


COSMIC_RAY = (
    # comparison operator replacement
    "ReplaceComparisonOperator_Eq_NotEq", "ReplaceComparisonOperator_NotEq_Eq", "ReplaceComparisonOperator_Lt_LtE",
    "ReplaceComparisonOperator_LtE_Lt", "ReplaceComparisonOperator_Gt_GtE", "ReplaceComparisonOperator_GtE_Gt",
    "ReplaceComparisonOperator_Is_IsNot", "ReplaceComparisonOperator_IsNot_Is",
    # arithmetic operator replacement
    "ReplaceBinaryOperator_Add_Sub", "ReplaceBinaryOperator_Sub_Add", "ReplaceBinaryOperator_Mul_Add",
    "ReplaceBinaryOperator_FloorDiv_Mul", "ReplaceBinaryOperator_Mod_FloorDiv", "ReplaceUnaryOperator_USub_UAdd",
    # boolean replacement
    "ReplaceTrueWithFalse", "ReplaceFalseWithTrue", "ReplaceAndWithOr", "ReplaceOrWithAnd",
    "ReplaceUnaryOperator_Delete_Not",
    # a changed constant, loop and control changes
    "NumberReplacer", "ReplaceBreakWithContinue", "ZeroIterationForLoop",
)
OURS: dict[str, type[Operator]] = {"ReplaceReturnValue": ReplaceReturnValue, "DeleteStatement": DeleteStatement}
OPERATOR_NAMES = (*COSMIC_RAY, *OURS)


def operator(name: str) -> Operator:
    return OURS[name]() if name in OURS else get_operator("core/" + name)()
