r"""The wording of an arithmetic chain: its expression and its four solutions, one per method.

The generator (``curate.ingest.generate``) writes its ``arith`` problems and reference solutions with these, and the
teacher of ``curate.ingest.waste`` writes its traces with them, right or wrong, so that a right trace is the
generator's own text byte for byte. Both import this module and neither imports the other's private names.

A chain is a start value, left-to-right operations ``[(op, operand)]`` (``op`` one of ``+``, ``-``, ``*``) and the
running values it claims (``values[0] == start``, one more per operation; right or not, the text says them).

>>> print(steps(2, [("+", 3)], [2, 5]))
Start with $2$.
Add $3$: $2 + 3 = 5$.
The result is $\boxed{5}$.
>>> expression(2, [("+", 3), ("*", 4)])
'(2 + 3) \\times 4'
"""

from __future__ import annotations


def expression(start: int, ops: list[tuple[str, int]]) -> str:
    """The expression of a start value and left-to-right operations, as the problem writes it."""
    expr = str(start)
    for op, b in ops:
        expr = f"({expr}) \\times {b}" if op == "*" else f"{expr} {op} {b}"
    return expr


def steps(start: int, ops: list[tuple[str, int]], values: list[int]) -> str:
    """The step list (``Start with $v$.`` / ``Add $b$: ...`` / ``The result is ...``): the generator's first
    solution."""
    lines = [f"Start with ${start}$."]
    for (op, b), value, new in zip(ops, values[:-1], values[1:], strict=True):
        if op == "*":
            lines.append(f"Multiply by ${b}$: ${value} \\times {b} = {new}$.")
        else:
            lines.append(f"{'Add' if op == '+' else 'Subtract'} ${b}$: ${value} {op} {b} = {new}$.")
    lines.append(f"The result is $\\boxed{{{values[-1]}}}$.")
    return "\n".join(lines)


def alternatives(start: int, ops: list[tuple[str, int]], values: list[int]) -> list[str]:
    """The other three solutions, in the generator's order: a running total in words; the expression rewritten one
    operation at a time; one paragraph of sentences."""
    verbs = {"+": "Adding {b} gives {v}.", "-": "Taking away {b} leaves {v}.", "*": "Multiplying by {b} gives {v}."}
    total = ["Keep a running total, one operation at a time.", f"The total begins at {start}."]
    total += [verbs[op].format(b=b, v=v) for (op, b), v in zip(ops, values[1:], strict=True)]
    total.append(f"After the last operation the total is {values[-1]}, so the answer is $\\boxed{{{values[-1]}}}$.")
    chain = ["Evaluate the first operation and rewrite the expression, until one number is left:"]
    chain.append(f"${expression(start, ops)}$")
    chain += [f"$= {expression(values[i], ops[i:])}$" for i in range(1, len(ops) + 1)]
    chain.append(f"Hence $\\boxed{{{values[-1]}}}$.")
    said = {"+": "plus", "-": "minus", "*": "times"}
    clauses = [f"{v0} {said[op]} {b} is {v1}" for (op, b), v0, v1 in zip(ops, values[:-1], values[1:], strict=True)]
    prose = (
        "Reading the expression from left to right, as its parentheses require: "
        + "; then ".join(clauses)
        + f". The expression therefore equals $\\boxed{{{values[-1]}}}$."
    )
    return ["\n".join(total), "\n".join(chain), prose]
