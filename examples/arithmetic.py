"""The examples' calculator tool: an arithmetic expression evaluated from its syntax tree, never
with ``eval``; numbers, + - * / % and powers of at most :data:`MAX_EXPONENT` (a model's
``9**9**9`` would run for ever)."""

from __future__ import annotations

import ast
import operator

MAX_EXPONENT = 100
_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
        ast.Pow: operator.pow, ast.USub: operator.neg, ast.Mod: operator.mod}


def _value(node):
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        left, right = _value(node.left), _value(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT:
            raise ValueError(f"exponent over {MAX_EXPONENT}")
        return _OPS[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_value(node.operand))
    raise ValueError("not arithmetic")


def evaluate(expression: str) -> str:
    """The value of ``expression`` as text, or ``error: ...``."""
    try:
        return str(_value(ast.parse(str(expression), mode="eval").body))
    except (ValueError, SyntaxError, ZeroDivisionError, TypeError, OverflowError, RecursionError) as exc:
        return f"error: {exc}"
