"""`FunctionJudge`: any Python rule `fn(premise, hypothesis) -> bool | None` as a judge."""

from __future__ import annotations

from collections.abc import Callable

from lewisrag.eval.judges.base import Verdict, digest
from lewisrag.eval.stats.checks import is_mark


class FunctionJudge:
    """Wrap `fn(premise, hypothesis) -> bool | None` as a judge: None is an undecided verdict, any
    value but True, False (numpy's too, or the ints 1 and 0) or None a TypeError.

    >>> FunctionJudge(lambda p, h: h in p).judge([("登录返回 422", "422"), ("ok", "toast")])
    [Verdict(supported=True, reason=''), Verdict(supported=False, reason='')]
    """

    name = "function"

    def __init__(self, fn: Callable[[str, str], bool | None], label: str | None = None):
        """`label` names the rule in the fingerprint: give a new one when the rule changes. Without it, the
        rule is known by its code (`rule_identity`): every lambda is "<lambda>", so two different rules had
        one fingerprint and the gate read a changed rule as the system's regression."""
        self.fn = fn
        self.label = label or getattr(fn, "__qualname__", type(fn).__name__)
        self._identity = label if label else rule_identity(fn)

    @property
    def fingerprint(self) -> str:
        return digest("FunctionJudge", self._identity, {}, "")

    def judge(self, pairs: list[tuple[str, str]]) -> list[Verdict]:
        out = []
        for premise, hypothesis in pairs:
            v = self.fn(premise, hypothesis)
            if v is None:
                out.append(Verdict(None, "function returned None"))
            elif is_mark(v):  # True or False (numpy's too), or 1 or 0: ALCE's NLI check returns ints
                out.append(Verdict(bool(v)))
            else:  # bool() of "no", a score of 0.3 or a match object is True: every statement would be supported
                raise TypeError(f"FunctionJudge {self.label}: fn must return True, False or None, got {v!r}")
        return out



_PLAIN = (str, int, float, bool, type(None), bytes)


def rule_identity(fn) -> str:
    """What a rule without a label is known by: its module and name, its code (bytecode, constants and
    names, nested functions' too), its defaults and the plain values it closes over; a callable object by
    its class and plain attributes. Objects that print their memory address are named by their type, so
    the identity is the same in every process (on one Python version: bytecode differs across versions).

    >>> rule_identity(lambda p, h: h in p) == rule_identity(lambda p, h: h in p)
    True
    >>> rule_identity(lambda p, h: h in p) == rule_identity(lambda p, h: p in h)
    False
    """
    code = getattr(fn, "__code__", None)
    if code is None:
        kind = type(fn)
        state = sorted((k, _plain(v)) for k, v in getattr(fn, "__dict__", {}).items())
        return f"{kind.__module__}.{kind.__qualname__}{state}"
    cells = [_plain(c.cell_contents) for c in fn.__closure__ or ()]
    return "\x00".join([fn.__module__ or "", fn.__qualname__, _code_text(code), _plain(fn.__defaults__),
                        _plain(fn.__kwdefaults__), repr(cells)])


def _code_text(code) -> str:
    consts = [_code_text(c) if hasattr(c, "co_code") else _plain(c) for c in code.co_consts]
    return f"{code.co_code.hex()}|{consts}|{code.co_names}"


def _plain(value) -> str:
    """repr of a plain value (and of tuples, lists, sets and dicts of them); another object's type name."""
    if isinstance(value, _PLAIN):
        return repr(value)
    if isinstance(value, (tuple, list)):
        return f"{type(value).__name__}({[_plain(v) for v in value]})"
    if isinstance(value, (set, frozenset)):
        return f"{type(value).__name__}({sorted(_plain(v) for v in value)})"
    if isinstance(value, dict):
        return f"dict({sorted((_plain(k), _plain(v)) for k, v in value.items())})"
    return f"<{type(value).__module__}.{type(value).__qualname__}>"
