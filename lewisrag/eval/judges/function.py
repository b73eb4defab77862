"""`FunctionJudge`: any Python rule `fn(premise, hypothesis) -> bool | None` as a judge."""

from __future__ import annotations

import functools
import inspect
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


def rule_identity(fn, _seen: frozenset = frozenset()) -> str:
    """What a rule without a label is known by, the same in every process on one Python version (bytecode
    differs across versions): a function by its module, name, code (bytecode, constants and names, nested
    functions' too), defaults and what it closes over, a function closed over known the same way; a bound
    method by its function and its object; a `functools.partial` by its function and arguments; a builtin
    (`operator.contains`, `str.startswith`) by its module and name; another callable object by its class,
    its `__call__` and its attributes. Values are known by their repr where it is plain, else by their
    type (never a memory address); the globals a function reads are not followed.

    >>> rule_identity(lambda p, h: h in p) == rule_identity(lambda p, h: h in p)
    True
    >>> rule_identity(lambda p, h: h in p) == rule_identity(lambda p, h: p in h)
    False
    >>> import operator
    >>> rule_identity(operator.contains) == rule_identity(operator.eq)
    False
    """
    if id(fn) in _seen:  # a rule that closes over itself
        return "<recursion>"
    seen = _seen | {id(fn)}
    if isinstance(fn, functools.partial):
        return f"partial({rule_identity(fn.func, seen)}, {_value(fn.args, seen)}, {_value(fn.keywords, seen)})"
    if inspect.ismethod(fn):
        return f"method({rule_identity(fn.__func__, seen)}, {_value(fn.__self__, seen)})"
    code = getattr(fn, "__code__", None)
    if code is None:
        name = f"{getattr(fn, '__module__', None)}.{getattr(fn, '__qualname__', None)}"
        if inspect.isbuiltin(fn) or inspect.ismethoddescriptor(fn) or isinstance(fn, type):
            return name
        call = getattr(type(fn), "__call__", None)  # a callable object
        return f"{_value(fn, _seen)}:{rule_identity(call, seen) if call is not None else ''}"
    cells = []
    for cell in fn.__closure__ or ():
        try:
            cells.append(_value(cell.cell_contents, seen))
        except ValueError:  # a name closed over but not yet assigned
            cells.append("<empty>")
    return "\x00".join([fn.__module__ or "", fn.__qualname__, _code_text(code), _value(fn.__defaults__, seen),
                        _value(fn.__kwdefaults__, seen), repr(cells)])


def _code_text(code) -> str:
    consts = [_code_text(c) if hasattr(c, "co_code") else _value(c) for c in code.co_consts]
    return f"{code.co_code.hex()}|{consts}|{code.co_names}"


def _value(value, seen: frozenset = frozenset()) -> str:
    """A value a rule holds: repr of a plain one (and of tuples, lists, sets and dicts of them), a function's
    `rule_identity`, another object's type and plain attributes."""
    if isinstance(value, _PLAIN):
        return repr(value)
    if isinstance(value, (tuple, list)):
        return f"{type(value).__name__}({[_value(v, seen) for v in value]})"
    if isinstance(value, (set, frozenset)):
        return f"{type(value).__name__}({sorted(_value(v, seen) for v in value)})"
    if isinstance(value, dict):
        return f"dict({sorted((_value(k, seen), _value(v, seen)) for k, v in value.items())})"
    if callable(value) and (hasattr(value, "__code__") or isinstance(value, functools.partial) or inspect.ismethod(value)):
        return rule_identity(value, seen)
    kind = type(value)
    state = getattr(value, "__dict__", None)
    if id(value) in seen or not isinstance(state, dict):
        return f"<{kind.__module__}.{kind.__qualname__}>"
    seen = seen | {id(value)}
    return f"<{kind.__module__}.{kind.__qualname__} {sorted((k, _value(v, seen)) for k, v in state.items())}>"
