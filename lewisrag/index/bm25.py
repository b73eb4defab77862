"""Sparse BM25 index through bm25s, with a tokenizer that handles English and Chinese alike.

bm25s' own tokenizer keeps a run of CJK characters as one "word", so a Chinese passage would be
a handful of sentence-long tokens; ours lowercases (NFKC), keeps latin words and digits whole,
drops English stopwords, and splits CJK text into characters and pairs of adjacent characters (as
Lucene's CJK analyzer does). Characters alone match too loosely: the Chinese world's made-up names
share a small set of characters, so 瓦尔多 matches every passage with 瓦, 尔 and 多 anywhere, while
the pair 瓦尔 does not (recall@5 of its test questions, 2,000 entities, seeds 0-4: 0.91-0.94 with
characters alone, 0.999-1.0 with the pairs too; recall@1 0.71-0.77, 0.66-0.71 with tokenizer /2).

Tokenizer /2 added the pairs. /3 ends a latin word or number at a CJK character: /1 and /2 ran it
on through the CJK text after it ("580万人生活在卡温拉斯" was one word), and every Chinese world
passage has such a word ("1302年建国"). An index of /1 or /2 whose words hold no CJK character (an
English one) is tokenized as /3 would tokenize it and keeps working; one with CJK is refused on
load (a question's 1302, 年 and 建国 never meet its word 1302年建国): build it again.

/4 reads a dotted capital I as i: Python lowercases İ to i and a combining dot (U+0307), which is no
word character, so /1 to /3 split "İzmir" into i and zmir, and a question's "Izmir" never met it. An
index of /1 to /3 whose passages hold no such word is tokenized as /4 would tokenize it and keeps
working; one whose passages do is refused on load (`check_dotted_i`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import unicodedata
from collections.abc import Sequence
from pathlib import Path

import bm25s
import numpy as np

from lewisrag.data.io import InputError, first_line
from lewisrag.data.outputs import check_out_dir, exclusive
from lewisrag.data.records import Passage
from lewisrag.index import store

# CJK ideographs (extensions B-F and the compatibility ones too), 々〆〇, kana but for its two
# punctuation marks (゠ and ・, which end a run as 、 does) and hangul syllables. They match \w, so the
# latin branch excludes them: else a word begun by a digit or letter ran on through them
_CJK = ("\u3005-\u3007\u3040-\u309f\u30a1-\u30fa\u30fc-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af"
        "\uf900-\ufaff\U00020000-\U0002fa1f")
_TOKEN = re.compile(rf"(?P<cjk>[{_CJK}]+)|[^\W_{_CJK}]+")
TOKENIZER = "lewisrag.index.bm25.tokenize/4"  # recorded in the manifest
# /1 and /2 differ from /3 only on text with a character either counts as CJK (all of kana, for them);
# /1 to /3 from /4 only on text with a dotted capital I (İ, or I or i and U+0307: `_DOTTED`)
_OLD_TOKENIZERS = ("lewisrag.index.bm25.tokenize/1", "lewisrag.index.bm25.tokenize/2", "lewisrag.index.bm25.tokenize/3")
_DOTTED = re.compile("[\u0130\u0307]")  # what NFKC and lower() turn into i and U+0307, and nothing else does
_EVER_CJK = re.compile(f"[{_CJK}\u3040-\u30ff]")
_STOPWORDS = frozenset(
    "a an and are as at be by for from has have he in is it its of on or that the this to was were what "
    "which who whom whose will with does did do how when where why".split()
)


def tokenize(text: str) -> list[str]:
    """Lowercased word tokens for English, stopwords dropped; for CJK, each character and each pair
    of adjacent characters (a run ends at punctuation, a space, a latin word or a number, and a
    latin word or number ends at a CJK character). NFKC first: full-width digits and letters are
    ASCII ones, half-width katakana full-width; and the i and combining dot that lowercasing makes of
    a dotted capital I is i, as Izmir is spelled without the dot.

    >>> tokenize("Who leads Valdoria? 登录失败")
    ['leads', 'valdoria', '登', '登录', '录', '录失', '失', '失败', '败']
    >>> tokenize("约有５８０万人")
    ['约', '约有', '有', '580', '万', '万人', '人']
    >>> tokenize("İzmir")
    ['izmir']
    """
    return _words(unicodedata.normalize("NFKC", text).lower().replace("i\u0307", "i"))


def _words(text: str) -> list[str]:
    """`tokenize`'s tokens of `text`, normalized and lowercased already."""
    out = []
    for m in _TOKEN.finditer(text):
        run = m.group("cjk")
        if run:
            for i, ch in enumerate(run):
                out += [ch, run[i : i + 2]] if i + 1 < len(run) else [ch]
        elif m.group() not in _STOPWORDS:
            out.append(m.group())
    return out


def build_bm25_index(passages: Sequence[Passage], out: str | os.PathLike, k1: float = 1.5, b: float = 0.75,
                     overwrite: bool = False) -> dict:
    """Index `title + text` of every passage with BM25 and write it to `out`. Returns the manifest.

    `out` must be missing, empty or an index lewisrag built, holding no file the user added since,
    unless `overwrite`.
    """
    out = check_out_dir(out, store.KIND, overwrite=overwrite, replaces=True)  # the new index replaces it whole
    partial = store.partial_dir(out)
    with exclusive(partial):  # a second build into the same folder would share IDX.partial with this one
        store.reset_partial(partial)
        try:  # seconds to rebuild, so no resume (unlike a dense build): a failed build leaves nothing
            retriever = BM25Index.in_memory(passages, k1=k1, b=b).retriever
            retriever.save(str(partial / "bm25"))
            store.write_passages(partial, passages)
            chash, blocks = store.content_hashes(passages)
            manifest = {
                "kind": "bm25",
                "metric": "bm25",
                "n_passages": len(passages),
                "content_hash": chash,
                "block_hashes": store.block_hashes(blocks),
                "sample_hash": store.sample_hash(passages),
                "bm25": {"k1": k1, "b": b, "tokenizer": TOKENIZER},
            }
            store.finish(partial, out, manifest)
        except BaseException:
            shutil.rmtree(partial, ignore_errors=True)
            raise
    return manifest


def _token_ids(docs: list[list[str]]) -> tuple[list[list[int]], dict[str, int]]:
    """Token ids with a vocabulary in order of first appearance.

    bm25s numbers the vocabulary of string tokens in set order, which changes with the hash seed;
    numbering them here keeps the index files byte-identical between runs.
    """
    vocab: dict[str, int] = {}
    ids = [[vocab.setdefault(t, len(vocab)) for t in doc] for doc in docs]
    return ids, vocab


class BM25Index:
    """A loaded BM25 index; `search` takes question strings."""

    def __init__(self, path: Path, manifest: dict, retriever, passages: Sequence[Passage]):
        self.path, self.manifest, self.retriever, self.passages = path, manifest, retriever, passages

    @classmethod
    def in_memory(cls, passages: Sequence[Passage], k1: float = 1.5, b: float = 0.75) -> BM25Index:
        """Index `title + text` of every passage without writing anything (e.g. to mine hard negatives)."""
        docs = [tokenize(f"{p.title} {p.text}") for p in passages]
        if not any(docs):  # bm25s fails on an empty vocabulary (max() of an empty sequence), a traceback
            raise InputError("--passages", "no passage holds a word BM25 indexes (stop words aside)")
        retriever = bm25s.BM25(k1=k1, b=b)
        retriever.index(_token_ids(docs), show_progress=False)
        return cls(Path(), {"kind": "bm25", "n_passages": len(passages)}, retriever, passages)  # a table stays a table

    @classmethod
    def load(cls, path: str | os.PathLike, mmap: bool = True) -> BM25Index:
        path = Path(path)
        manifest = store.read_manifest(path, kind="bm25")
        check_params(path)  # before bm25s builds on them: a backend it lacks is an ImportError there
        try:
            retriever = bm25s.BM25.load(str(path / "bm25"), mmap=mmap, show_progress=False)
        # a missing, truncated or garbled file (JSONDecodeError is a ValueError); JSON of the wrong shape
        # ([] for an object) fails inside bm25s as a TypeError, AttributeError or KeyError
        except (OSError, ValueError, EOFError, TypeError, AttributeError, KeyError) as e:
            raise InputError(path / "bm25", f"cannot read the BM25 index ({first_line(e)}); "
                             "build the index again") from None
        check_num_docs(path, retriever, manifest["n_passages"])
        check_score_arrays(path, retriever.scores)
        check_word_ids(path, retriever.int_dtype, len(retriever.vocab_dict))
        check_vocabulary(path, retriever.vocab_dict, len(retriever.scores["indptr"]))
        check_tokenizer(path, manifest, retriever.vocab_dict)
        passages = store.load_passages(path, manifest)
        check_dotted_i(path, manifest, passages)
        return cls(path, manifest, retriever, passages)

    def search(self, questions: Sequence[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-k rows by BM25 score: scores (B, K) float32 and rows (B, K) int64."""
        k = min(k, len(self.passages))
        try:
            rows, scores = self.retriever.retrieve([tokenize(q) or ["\u0000"] for q in questions], k=k,
                                                   show_progress=False, n_threads=1)
        # damaged files that the load's checks cannot see without reading them whole: a document or word
        # id past the end fails inside bm25s (an IndexError or ValueError, a traceback before)
        except (IndexError, ValueError) as e:
            raise InputError(self.path / "bm25", f"cannot search the BM25 index ({first_line(e)}): its files are "
                             "damaged (`lewisrag index verify` names the damage); build the index again") from None
        if not np.isfinite(scores).all():  # NaN scores from damaged files ranked at random and printed as NaN
            raise InputError(self.path / "bm25", "the BM25 files gave scores that are not finite numbers: they are "
                             "damaged; build the index again")
        return scores.astype(np.float32), rows.astype(np.int64)


def check_num_docs(path: Path, retriever, n_passages: int) -> None:
    """The BM25 files' document count against the manifest's passages: files of a larger index
    return rows past the passages (an IndexError where a hit is read), of a smaller one leave
    passages unfindable. Every load checks it; `index verify` checks the words too."""
    docs = retriever.scores.get("num_docs")
    if type(docs) is not int or docs != n_passages:  # 4.0 (or true) compares equal to 4, and fails a search
        raise InputError(path / "bm25" / "params.index.json", f"indexes {docs!r} documents, the index {n_passages} "
                         "passages: the BM25 files belong to another index or are damaged; build the index again",
                         field="num_docs")


# what bm25s reads of params.index.json at a search, as a build writes it: the score and token id types
# and the backend (numba is not installed; neither is another backend's library)
_PARAM_KINDS = {"dtype": ("f", "a numpy float type such as 'float32'"),
                "int_dtype": ("iu", "a numpy integer type such as 'int32'")}


def _numpy_dtype(name) -> np.dtype | None:
    """The numpy type `name` names, None if it names none (or is no string: np.dtype(None) is float64)."""
    if not isinstance(name, str):
        return None
    try:
        return np.dtype(name)
    except (TypeError, ValueError):
        return None


def check_params(path: Path) -> None:
    """params.index.json's fields a search uses, before bm25s reads them: `backend` "numpy" (bm25s
    raises an ImportError building a numba one without numba), `dtype` a float type and `int_dtype`
    an integer type (a search makes its score and token id arrays of them: TypeError, else wrong
    sums). A field left out takes bm25s' default, as its load does. A file that is missing or not
    JSON is left to bm25s' load, which names it."""
    file = path / "bm25" / "params.index.json"
    try:
        params = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    if not isinstance(params, dict):
        return
    damaged = "the BM25 files are damaged; build the index again"
    backend = params.get("backend", "numpy")
    if backend != "numpy":
        raise InputError(file, f"{backend!r} is not the backend lewisrag builds with ('numpy'): {damaged}",
                         field="backend")
    for field, (kinds, what) in _PARAM_KINDS.items():
        value = params.get(field, "float32" if field == "dtype" else "int32")
        dtype = _numpy_dtype(value)
        if dtype is None or dtype.kind not in kinds:
            raise InputError(file, f"{value!r} is not {what}: {damaged}", field=field)


def check_score_arrays(path: Path, scores: dict) -> None:
    """The score matrix's arrays are 1-D, `data` of floats and `indices` and `indptr` of integers (a
    search adds them up: a string array fails in numpy, a traceback), `data` and `indices` as long
    as each other. Read from the arrays' headers: no entry is read (`index verify` reads them all)."""
    want = {"data": ("f", "floats"), "indices": ("iu", "integers"), "indptr": ("iu", "integers")}
    for name, (kinds, what) in want.items():
        a = scores.get(name)
        if not isinstance(a, np.ndarray) or a.ndim != 1 or a.dtype.kind not in kinds:
            got = (f"a {a.ndim}-D array of {a.dtype}" if isinstance(a, np.ndarray) else type(a).__name__)
            raise InputError(path / "bm25" / f"{name}.csc.index.npy", f"holds {got}, not a 1-D array of {what}: the "
                             "BM25 files are damaged; build the index again")
    if len(scores["data"]) != len(scores["indices"]):
        raise InputError(path / "bm25", f"data.csc.index.npy holds {len(scores['data'])} scores, "
                         f"indices.csc.index.npy {len(scores['indices'])} document ids: the BM25 files are damaged; "
                         "build the index again")


def check_word_ids(path: Path, int_dtype: str, n_words: int) -> None:
    """`int_dtype` holds every word id of the vocabulary: a search makes a question's word ids an
    array of it (an OverflowError, a traceback, past its range: 'int8' and a 200-word vocabulary)."""
    if n_words and np.iinfo(np.dtype(int_dtype)).max < n_words - 1:  # check_params made it an integer type
        raise InputError(path / "bm25" / "params.index.json", f"{int_dtype!r} cannot hold the vocabulary's word ids "
                         f"(0 to {n_words - 1}): the BM25 files are damaged; build the index again", field="int_dtype")


def check_vocabulary(path: Path, vocab: dict, indptr: int) -> None:
    """vocab.index.json numbers its words 0, 1, ... once each, one for each of the score matrix's word
    columns (`indptr` entries: bm25s appends the empty word last, so as many as the words, or one more
    for a layout without it): a vocabulary cut or renumbered ({"a": 0}, an id of -1) searched every
    question to zero scores, exit 0. One pass over the ids; `index verify` reads the scores too."""
    ids = np.fromiter(vocab.values(), dtype=np.int64, count=len(vocab)) if all(
        type(i) is int for i in vocab.values()) else None
    if ids is None or indptr not in (len(vocab), len(vocab) + 1) or (
            len(ids) and (ids.min() != 0 or ids.max() != len(ids) - 1 or len(np.unique(ids)) != len(ids))):
        raise InputError(path / "bm25" / "vocab.index.json", f"its {len(vocab)} words are not numbered 0 to "
                         f"{len(vocab) - 1} once each for the score matrix's {indptr} word columns: the BM25 files "
                         "are damaged; build the index again")


def check_tokenizer(path: Path, manifest: dict, vocab: dict[str, int]) -> None:
    """The manifest's `bm25.tokenizer` against ours: questions are tokenized by `tokenize`, so an
    index whose passages another tokenizer split differently would match some words and silently
    miss the rest. /1 and /2 agree with /3 on text without CJK, so an index of theirs whose
    vocabulary holds no CJK character loads, and one of /3; any other is refused. /1 to /3 differ
    from /4 on a dotted capital I too, which their vocabularies cannot show: `check_dotted_i`."""
    settings = manifest.get("bm25")
    if not isinstance(settings, dict) or not isinstance(settings.get("tokenizer"), str):
        raise InputError(path / store.MANIFEST, f"expected an object naming its tokenizer, got {settings!r}: the "
                         "manifest is damaged or was edited; build the index again", field="bm25")
    built_with = settings["tokenizer"]
    if built_with == TOKENIZER:
        return
    if built_with not in _OLD_TOKENIZERS:
        raise InputError(path / store.MANIFEST, f"{built_with!r} is not a tokenizer this lewisrag knows (it "
                         f"tokenizes with {TOKENIZER}): upgrade lewisrag if a newer one built the index, else build "
                         "the index again", field="bm25.tokenizer")
    if built_with == _OLD_TOKENIZERS[-1]:  # /3 splits CJK text as /4 does
        return
    if not _EVER_CJK.search("\n".join(vocab)):  # one scan in C: a Wikipedia index has millions of words
        return
    cjk = [w for w in vocab if _EVER_CJK.search(w)]
    mixed = next((w for w in cjk if _EVER_CJK.sub("", w)), None)  # the defect /3 fixed, if the index shows it
    what = (f"its word {mixed!r} runs a latin word or number on into CJK text" if mixed else
            f"it indexes CJK text ({cjk[0]!r}) without the character pairs" if built_with.endswith("/1") else
            f"it indexes CJK text ({cjk[0]!r})")
    raise InputError(path / store.MANIFEST, f"{built_with!r} split this index's text otherwise than {TOKENIZER} "
                     f"splits questions ({what}): build the index again (`lewisrag index build --encoder bm25 "
                     f"--out {path} --overwrite` over its passages)", field="bm25.tokenizer")


def check_dotted_i(path: Path, manifest: dict, passages: Sequence[Passage]) -> None:
    """An index of tokenizer /1 to /3 (one `check_tokenizer` let load) against its passages: one whose
    words they split at a dotted capital I ("İzmir": i and zmir, where /4 makes izmir) is refused,
    as a question's word would miss them in silence. The dot is no part of any word the index holds,
    so its vocabulary cannot show it: the passages are read, at each load of such an index (a pass
    over their text, as the build's was; none for an index of /4)."""
    if manifest["bm25"]["tokenizer"] == TOKENIZER:
        return
    for p in passages:
        text = f"{p.title} {p.text}"
        if _DOTTED.search(text):  # rare: the exact comparison only then
            lowered = unicodedata.normalize("NFKC", text).lower()
            if _words(lowered) != _words(lowered.replace("i\u0307", "i")):
                raise InputError(path / store.MANIFEST, f"{manifest['bm25']['tokenizer']!r} split this index's text "
                                 f"otherwise than {TOKENIZER} splits questions (passage {p.id!r} has a word with a "
                                 "dotted capital I, which it cut in two at the dot): build the index again (`lewisrag "
                                 f"index build --encoder bm25 --out {path} --overwrite` over its passages)",
                                 field="bm25.tokenizer")
