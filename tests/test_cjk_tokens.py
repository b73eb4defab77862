"""CJK text next to latin words and numbers: BM25's tokenizer splits them apart (tokenizer /3), an
index of an older tokenizer that split them otherwise is refused on load, and the answer scores drop
every currency sign as SQuAD's normalization drops $."""

from __future__ import annotations

import json
import re
import unicodedata

import pytest
from conftest import run_cli

from lewisrag.data.io import InputError
from lewisrag.data.records import Passage
from lewisrag.data.world import build_world
from lewisrag.index import bm25
from lewisrag.index.bm25 import BM25Index, build_bm25_index, tokenize
from lewisrag.scoring.qa import exact_match, normalize_answer, provenance_em, token_f1
from lewisrag.scoring.retrieval import hit_rate

# tokenizer /2 as it was: \w matches CJK, so its latin branch ran on through the CJK after a digit
_V2 = re.compile(r"(?P<cjk>[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3040-\u30ff\uac00-\ud7af]+)|[^\W_]+")


def tokenize_v2(text: str) -> list[str]:
    return tokenize_old(text, _V2)


def tokenize_old(text: str, words: re.Pattern) -> list[str]:
    """An older BM25 tokenizer: NFKC, lower case, then `words` (a CJK run as characters and pairs)."""
    out = []
    for m in words.finditer(unicodedata.normalize("NFKC", text).lower()):
        run = m.group("cjk")
        if run:
            for i, ch in enumerate(run):
                out += [ch, run[i : i + 2]] if i + 1 < len(run) else [ch]
        elif m.group() not in bm25._STOPWORDS:
            out.append(m.group())
    return out


def test_a_latin_word_or_number_ends_at_a_cjk_character():
    assert tokenize("约有580万人生活在卡温拉斯。") == [
        "约", "约有", "有", "580", "万", "万人", "人", "人生", "生", "生活", "活", "活在", "在", "在卡", "卡", "卡温",
        "温", "温拉", "拉", "拉斯", "斯"]  # /2: ['约', '约有', '有', '580万人生活在卡温拉斯']
    assert tokenize("RAG模型于2020年提出") == ["rag", "模", "模型", "型", "型于", "于", "2020", "年", "年提", "提",
                                               "提出", "出"]  # /2: ['rag模型于2020年提出']
    assert tokenize("the中国") == ["中", "中国", "国"]  # the stopword alone, as before a space
    assert tokenize("二〇二〇年") == ["二", "二〇", "〇", "〇二", "二", "二〇", "〇", "〇年", "年"]  # 〇 is CJK, not a word


def test_full_width_forms_kana_and_hangul():
    assert tokenize("约有５８０万") == tokenize("约有580万") == ["约", "约有", "有", "580", "万"]  # NFKC first
    assert tokenize("ＲＡＧ模型") == ["rag", "模", "模型", "型"]
    assert tokenize("ｶﾀｶﾅ") == tokenize("カタカナ")  # half-width katakana is full-width after NFKC
    assert tokenize("トム・ハンクス") == ["ト", "トム", "ム", "ハ", "ハン", "ン", "ンク", "ク", "クス", "ス"]  # ・ ends a run
    assert tokenize("서울abc시") == ["서", "서울", "울", "abc", "시"]
    assert tokenize("𠀀𠀁x") == ["𠀀", "𠀀𠀁", "𠀁", "x"]  # ideographs past the BMP are CJK too


def test_english_world_tokens_are_tokenizer_2s():
    """English text has no CJK, where /2 and /3 differ: every passage and question of an English world
    is tokenized as before (as an English /2 index was built)."""
    w = build_world(seed=0, entities=300)
    texts = [f"{p.title} {p.text}" for p in (*w.passages_a, *w.passages_b)]
    texts += [q.question for split in w.questions.values() for q in split]
    assert len(texts) > 1000
    assert [t for t in texts if tokenize(t) != tokenize_v2(t)] == []


def test_bm25_ranks_a_passage_whose_number_touches_the_name():
    """A number written against Chinese ("580万人生活在卡温拉斯") hid the words after it from BM25:
    the passage that answers lost to the other passage of the same country."""
    ps = [Passage("a", "卡温拉斯", "卡温拉斯的首都是丹弗克。卡温拉斯的货币是贝格币。"),
          Passage("b", "卡温拉斯", "约有580万人生活在卡温拉斯。")]
    _, rows = BM25Index.in_memory(ps).search(["多少人生活在卡温拉斯？"], 2)
    assert rows[0].tolist() == [1, 0]


def test_chinese_world_recall_at_1(monkeypatch):
    """Every passage of the Chinese world has a number written against Chinese ("1302年建国"):
    recall@1 of its test questions (600 entities, seed 0) 0.763 with /3, 0.717 with /2 (2,000
    entities: 0.751 and 0.689)."""
    w = build_world(seed=0, entities=600, lang="zh")
    qs = [q for q in w.questions["test"] if q.gold_passage_ids]
    gold = [q.gold_passage_ids for q in qs]

    def recall_at_1() -> float:
        _, rows = BM25Index.in_memory(w.passages_a).search([q.question for q in qs], 1)
        hits, n = hit_rate([[w.passages_a[r].id for r in row] for row in rows], gold, 1)
        return hits / n

    now = recall_at_1()
    monkeypatch.setattr(bm25, "tokenize", tokenize_v2)
    before = recall_at_1()
    assert len(qs) > 300 and now >= 0.74 and now >= before + 0.03, (now, before)


def _build_with(monkeypatch, passages, out, tokenizer: str, tokenize_fn) -> None:
    with monkeypatch.context() as m:
        m.setattr(bm25, "tokenize", tokenize_fn)
        m.setattr(bm25, "TOKENIZER", f"lewisrag.index.bm25.tokenize/{tokenizer}")
        build_bm25_index(passages, out)


# tokenizer /1 as it was: characters only, its latin branch running on as /2's
_V1 = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3040-\u30ff\uac00-\ud7af]|[^\W_]+")


def tokenize_v1(text: str) -> list[str]:
    return [t for t in _V1.findall(unicodedata.normalize("NFKC", text).lower()) if t not in bm25._STOPWORDS]


ZH = [Passage("a", "卡温拉斯", "卡温拉斯于1302年建国。"), Passage("b", "里格诺", "约有580万人生活在里格诺。")]
NO_DIGITS = [Passage("a", "注册", "用户名已被占用"), Passage("b", "登录", "密码错误时提示邮箱或密码无效")]


@pytest.mark.parametrize("version, tokenize_fn, passages, why", [
    ("2", tokenize_v2, ZH, r"its word '1302年建国' runs a latin word or number on into CJK text"),
    ("1", tokenize_v1, ZH, r"its word '1302年建国' runs a latin word or number on into CJK text"),
    ("1", tokenize_v1, NO_DIGITS, r"indexes CJK text \('注'\) without the character pairs"),
])
def test_an_older_index_over_chinese_is_refused(tmp_path, monkeypatch, version, tokenize_fn, passages, why):
    """Its passages' words are not the words `tokenize` makes of a question: searched, it would
    miss them in silence. One line naming the manifest field and how to rebuild."""
    _build_with(monkeypatch, passages, tmp_path / "old", version, tokenize_fn)
    with pytest.raises(InputError, match=why) as e:
        BM25Index.load(tmp_path / "old")
    assert e.value.source == str(tmp_path / "old" / "manifest.json") and e.value.field == "bm25.tokenizer"
    assert "build the index again" in e.value.message and "--overwrite" in e.value.message
    assert build_bm25_index(passages, tmp_path / "new")["bm25"]["tokenizer"] == "lewisrag.index.bm25.tokenize/4"
    BM25Index.load(tmp_path / "new")


def test_an_older_index_over_chinese_is_bad_input_on_the_cli(tmp_path, monkeypatch):
    _build_with(monkeypatch, ZH, tmp_path / "old", "2", tokenize_v2)
    r = run_cli("index", "search", "--index", str(tmp_path / "old"), "--query", "里格诺有多少人", cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines() == [r.stderr.strip()]  # one line
    assert "manifest.json: field 'bm25.tokenizer':" in r.stderr and "build the index again" in r.stderr


def test_an_english_index_of_tokenizer_2_still_loads(tiny_corpus, tmp_path, monkeypatch):
    """English text is tokenized alike by /2 and /3: its index answers as a fresh one does."""
    from lewisrag.data.records import read_passages, read_qa

    passages, qa = read_passages(tiny_corpus["passages"]), read_qa(tiny_corpus["qa"])
    _build_with(monkeypatch, passages, tmp_path / "old", "2", tokenize_v2)
    build_bm25_index(passages, tmp_path / "new")
    questions = [q.question for q in qa]
    old, new = BM25Index.load(tmp_path / "old").search(questions, 5), BM25Index.load(tmp_path / "new").search(questions, 5)
    assert (old[1] == new[1]).all() and (old[0] == new[0]).all()


@pytest.mark.parametrize("settings, field, found", [
    ({"k1": 1.5, "b": 0.75, "tokenizer": "lewisrag.index.bm25.tokenize/9"}, "bm25.tokenizer", "not a tokenizer this"),
    ({"k1": 1.5, "b": 0.75}, "bm25", "expected an object naming its tokenizer"),
    (None, "bm25", "expected an object naming its tokenizer"),
])
def test_a_manifest_naming_no_known_tokenizer_is_refused(tiny_corpus, tmp_path, settings, field, found):
    from lewisrag.data.records import read_passages

    build_bm25_index(read_passages(tiny_corpus["passages"]), tmp_path / "idx")
    path = tmp_path / "idx" / "manifest.json"
    manifest = json.loads(path.read_text())
    if settings is None:
        del manifest["bm25"]
    else:
        manifest["bm25"] = settings
    path.write_text(json.dumps(manifest))
    with pytest.raises(InputError, match=found) as e:
        BM25Index.load(tmp_path / "idx")
    assert e.value.source == str(path) and e.value.field == field


def test_every_currency_sign_is_dropped_as_squads_dollar():
    assert exact_match("$100", ["100"]) == 1.0  # SQuAD: $ is in string.punctuation
    assert exact_match("￥100元", ["100元"]) == exact_match("¥100", ["100"]) == exact_match("€5", ["5"]) == 1.0
    assert exact_match("£5", ["5"]) == exact_match("₩5000", ["5000"]) == exact_match("＄100", ["100"]) == 1.0
    assert token_f1("￥100元", ["100元"]) == token_f1("约￥100", ["约100"]) == 1.0
    assert provenance_em("￥100", ["100"], ["p1"], ["p1"]) == 1.0
    assert normalize_answer("100 ¥") == normalize_answer("100 $") == "100"


def test_other_symbols_stay():
    """Only currency signs join punctuation: a degree or a plus-minus sign is part of the answer."""
    assert exact_match("100°", ["100"]) == exact_match("±5", ["5"]) == 0.0
    assert normalize_answer("100 °C") == "100 °c"
