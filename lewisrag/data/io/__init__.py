"""Reading and writing records: JSON Lines, JSON, Parquet and Hugging Face datasets.

Every reader yields `(line, record)` pairs so that a bad record can be reported by file, line and
field. Problems raise `InputError`, which the CLI turns into one line on stderr and exit code 2.
Writers are atomic: they write a temporary file beside the target and rename it, so an
interrupted or failed run never leaves a half-written output.

A module per concern: `errors` (`InputError`, `LewisragWarning`, `one_line`), `files` (the check
before a file is opened), `json_text` (strict JSON with its lines, `read_json`), `readers`
(`iter_records`, `load_hf`), `arrow_text` (Arrow strings that are not UTF-8), `fields` (the checks
of a record's fields, record ids), `writing` (the atomic writers) and `host` (/proc/cpuinfo).
Import from here: `from lewisrag.data.io import InputError`.
"""

from lewisrag.data.io.arrow_text import arrow_text_problem, is_string_type, string_binary_types
from lewisrag.data.io.errors import InputError, LewisragWarning, first_line, one_line
from lewisrag.data.io.fields import (decoded, derived_id, expect, get_path, given_once, is_count, is_finite_number,
                                     is_number, optional_str, record_id, require_str, require_str_list, shown_value)
from lewisrag.data.io.files import GZIP_MAGIC, existing_file
from lewisrag.data.io.host import cpuinfo
from lewisrag.data.io.json_text import json_item_lines, read_json, read_json_list_lines
from lewisrag.data.io.readers import iter_records, load_hf
from lewisrag.data.io.writing import (_umask, atomic_path, make_parents, owner_tag, remove_if_empty, write_json,
                                      write_jsonl, write_text)

# The error types keep the name they are known by, in tracebacks and in the docstring examples that
# show one (`lewisrag.data.io.InputError: ...`), not that of the module that defines them.
InputError.__module__ = LewisragWarning.__module__ = __name__

# Re-exported though private: `_umask` (data/outputs/replace.py and its tests). The other private
# helpers are not: the code reads each in its own module, so patch a name there (`monkeypatch.setattr(
# io.writing, "owner_tag", ...)` reaches `atomic_path`; a name patched here reaches only the callers
# that import it from here at call time).

__all__ = ["GZIP_MAGIC", "InputError", "LewisragWarning", "arrow_text_problem", "atomic_path", "cpuinfo", "decoded",
           "derived_id", "existing_file", "expect", "first_line", "get_path", "given_once", "is_count",
           "is_finite_number", "is_number", "is_string_type", "iter_records", "json_item_lines", "load_hf",
           "make_parents", "one_line", "optional_str", "owner_tag", "read_json", "read_json_list_lines", "record_id",
           "remove_if_empty", "require_str", "require_str_list", "shown_value", "string_binary_types",
           "write_json", "write_jsonl", "write_text"]
