"""QA string metrics: SQuAD/DPR normalization, CJK handling, agreement with rouge-score and sacrebleu."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lewisrag.scoring.qa import bleu_1, exact_match, normalize_answer, provenance_em, rouge_l, rouge_tokens, token_f1


@pytest.mark.parametrize(
    "text, expected",
    [
        ("The Eiffel Tower!", "eiffel tower"),
        ("  an  apple,  a day ", "apple day"),
        ("1,000 km.", "1000 km"),
        ("北京 大学。", "北京大学"),
        ("「登录」失败，返回 ４２２！", "登录失败返回422"),
        ("ＨＴＴＰ 422 错误", "http 422错误"),
        ("theater", "theater"),  # articles only as whole words
    ],
)
def test_normalize_answer(text, expected):
    assert normalize_answer(text) == expected


def test_exact_match_english_and_chinese():
    assert exact_match("Barack Obama.", ["barack obama", "Obama"]) == 1.0
    assert exact_match("President Obama", ["Barack Obama"]) == 0.0
    assert exact_match("北京 大学", ["北京大学。"]) == 1.0
    assert exact_match("北京", ["北京大学"]) == 0.0


def test_token_f1_english_and_chinese():
    # pred tokens: barack, obama, jr (3); gold: barack, obama (2): P=2/3, R=1 -> 0.8
    assert token_f1("Barack Obama Jr.", ["Barack Obama"]) == pytest.approx(0.8)
    # chars: 北 京 大 学 vs 北 京: P=2/4, R=1 -> 2/3; best over answers
    assert token_f1("北京大学", ["北京", "上海"]) == pytest.approx(2 / 3)
    # 返 回 422 状 态 码 (6 tokens) vs 422: P=1/6, R=1 -> 2/7
    assert token_f1("返回 422 状态码", ["422"]) == pytest.approx(2 / 7)
    assert token_f1("", [""]) == 1.0 and token_f1("the", ["obama"]) == 0.0


def test_empty_reference_lists_are_errors():
    for fn in (exact_match, token_f1, rouge_l, bleu_1):
        with pytest.raises(ValueError, match="non-empty list"):
            fn("x", [])
    with pytest.raises(ValueError):
        exact_match("x", "x")  # a bare string is not a list of answers


ENGLISH = [
    ("the cat sat on the mat", ["the cat lay on the mat"]),
    ("A quick brown fox jumps over the lazy dog.", ["The quick brown dog jumps on the log!", "a fox"]),
    ("Don't return HTTP-422 errors, e.g. for logins.", ["It returns 422 errors for login."]),
    ("nothing in common", ["zebra"]),
    ("...", ["something"]),
]


@pytest.mark.parametrize("prediction, references", ENGLISH)
def test_rouge_l_equals_rouge_score_on_english(prediction, references):
    from rouge_score import rouge_scorer

    scorer = rouge_scorer.RougeScorer(["rougeL"])
    expected = max(scorer.score(ref, prediction)["rougeL"].fmeasure for ref in references)
    assert rouge_l(prediction, references) == pytest.approx(expected, abs=1e-12)


WORDS = st.sampled_from(["the", "cat", "Sat", "on", "mat", "422", "HTTP-422", "a.b", "don't", ",", "!"])


@settings(max_examples=60, deadline=None)
@given(st.lists(WORDS, max_size=12).map(" ".join), st.lists(WORDS, min_size=1, max_size=12).map(" ".join))
def test_rouge_l_and_tokens_match_rouge_score_on_random_english(prediction, reference):
    from rouge_score import rouge_scorer, tokenize

    assert rouge_tokens(prediction) == tokenize.tokenize(prediction, None)
    expected = rouge_scorer.RougeScorer(["rougeL"]).score(reference, prediction)["rougeL"].fmeasure
    assert rouge_l(prediction, [reference]) == pytest.approx(expected, abs=1e-12)


def test_rouge_l_keeps_chinese_where_rouge_score_drops_it():
    from rouge_score import rouge_scorer

    assert rouge_scorer.RougeScorer(["rougeL"]).score("前端显示红色列表", "前端显示红色列表")["rougeL"].fmeasure == 0.0
    assert rouge_l("前端显示红色列表", ["前端显示红色列表"]) == 1.0
    # mixed text: 返 回 422 vs 返 回 http 422: LCS 3, P = 1, R = 3/4 -> 6/7
    assert rouge_l("返回 422", ["返回 HTTP 422"]) == pytest.approx(6 / 7)


def plain_lcs_rouge_l(prediction: str, references: list[str]) -> float:
    """ROUGE-L F from a textbook LCS table over rouge_tokens, best over the references, 0 when a side
    has no token: the oracle rouge_l (rouge-score's scorer) must agree with."""
    best, pred = 0.0, rouge_tokens(prediction)
    for ref in references:
        gold = rouge_tokens(ref)
        table = [[0] * (len(gold) + 1) for _ in range(len(pred) + 1)]
        for i, x in enumerate(pred, 1):
            for j, y in enumerate(gold, 1):
                table[i][j] = table[i - 1][j - 1] + 1 if x == y else max(table[i - 1][j], table[i][j - 1])
        lcs = table[-1][-1]
        if lcs:
            p, r = lcs / len(pred), lcs / len(gold)
            best = max(best, 2 * p * r / (p + r))
    return best


PARITY = [
    ("the cat sat on the mat", ["the cat lay on the mat"]),
    ("前端显示红色列表", ["前端用红色列表显示"]),
    ("返回 HTTP 422", ["注册返回 409", "返回 HTTP 422 状态码", "HTTP"]),  # the best is the 2nd: 8/11
    ("Login returns 422", ["", "login returns HTTP 422"]),
    ("", ["登录"]),
    ("登录", [""]),
    ("", [""]),
    ("。！", ["登录", "。"]),  # punctuation only: no token
]


@pytest.mark.parametrize("prediction, references", PARITY)
def test_rouge_l_equals_a_plain_lcs(prediction, references):
    assert rouge_l(prediction, references) == pytest.approx(plain_lcs_rouge_l(prediction, references), abs=1e-12)


def test_rouge_l_is_the_best_over_references():
    # 返 回 http 422 against 返 回 http 422 状 态 码: LCS 4, P = 1, R = 4/7 -> 8/11; the others score less
    assert rouge_l("返回 HTTP 422", ["注册返回 409", "返回 HTTP 422 状态码", "HTTP"]) == pytest.approx(8 / 11)
    assert rouge_l("", [""]) == 0.0 and isinstance(rouge_l("", ["登录"]), float)


MIXED = st.sampled_from(["the", "Cat", "422", "HTTP-422", "登录", "失败", "返回", "红色列表", "。", "，", "", "ＡＢ"])


@settings(max_examples=80, deadline=None)
@given(st.lists(MIXED, max_size=10).map(" ".join), st.lists(st.lists(MIXED, max_size=10).map("".join), min_size=1, max_size=3))
def test_rouge_l_equals_a_plain_lcs_on_random_mixed_text(prediction, references):
    assert rouge_l(prediction, references) == pytest.approx(plain_lcs_rouge_l(prediction, references), abs=1e-12)


def test_bleu_1_english_equals_sacrebleu_unigram_bleu():
    from sacrebleu.metrics import BLEU

    pred, refs = "The cat sat on the mat .", ["the cat is on the mat .", "a cat sat there"]
    expected = BLEU(max_ngram_order=1, lowercase=True, effective_order=True).sentence_score(pred, refs).score / 100
    assert bleu_1(pred, refs) == pytest.approx(expected)
    assert bleu_1("the the the", ["the cat"]) == pytest.approx(1 / 3)  # clipped: 1 of 3, no brevity penalty


def test_bleu_1_chinese_counts_characters():
    assert bleu_1("红色列表", ["红色列表"]) == pytest.approx(1.0)
    # 3 of 4 characters match; hypothesis as long as the reference: no penalty
    assert bleu_1("红色表格", ["红色列表"]) == pytest.approx(0.75)
    assert bleu_1("登录", ["注册"]) == 0.0


def test_provenance_em_needs_a_gold_passage():
    assert provenance_em("Obama", ["Barack Obama", "Obama"], ["p3", "p7"], ["p7"]) == 1.0
    assert provenance_em("Obama", ["Obama"], ["p3"], ["p7"]) == 0.0
    assert provenance_em("Bush", ["Obama"], ["p7"], ["p7"]) == 0.0
    assert provenance_em("返回 422", ["返回422"], ["1"], ["1"]) == 1.0
    with pytest.raises(ValueError):
        provenance_em("x", ["x"], ["p1"], [])


def test_scores_are_in_range_and_not_nan():
    for fn in (exact_match, token_f1, rouge_l, bleu_1):
        for pred, refs in ENGLISH + [("返回 422", ["返回 HTTP 422"]), ("", ["登录"])]:
            v = fn(pred, refs)
            assert 0.0 <= v <= 1.0 and not math.isnan(v)


def test_a_letter_against_a_cjk_word_and_format_characters_do_not_change_the_answer():
    """"A 型血" lost its "A" as an English article while "A型血" kept it: EM 0 for one answer."""
    assert exact_match("A 型血", ["A型血"]) == 1.0 and exact_match("维生素 A", ["维生素A"]) == 1.0
    assert exact_match("answer\u200b", ["answer"]) == 1.0 and token_f1("422", ["\ufeff422"]) == 1.0
    assert normalize_answer("The Eiffel Tower") == "eiffel tower"  # English articles still go


def test_an_article_before_a_cjk_word_goes_as_before_an_english_one():
    """"the 长城" kept its article: the spaces next to CJK went first, and "the长城" has no word boundary."""
    assert exact_match("The 长城", ["长城"]) == 1.0 and exact_match("an 苹果", ["苹果"]) == 1.0
    assert normalize_answer("theater 长城") == "theater长城"  # a word, not an article


def test_bleu_1_stays_in_its_range():
    assert bleu_1("한국", ["한국"]) <= 1.0  # sacrebleu's score / 100 was 1.0000000000000004


def test_full_width_and_other_non_ascii_punctuation_separates_words():
    """Chinese writes no space after ，、：·, and deleting such a mark glued two Latin words into one:
    "Paris，France" scored 0 against "Paris, France". Marks written inside a word (dashes,
    apostrophes) are deleted as their ASCII forms are."""
    assert exact_match("Paris，France", ["Paris, France"]) == 1.0 and token_f1("Apple、Google", ["Apple, Google"]) == 1.0
    assert normalize_answer("Tom·Hanks") == "tom hanks" and normalize_answer("email：invalid") == "email invalid"
    assert normalize_answer("Don’t") == normalize_answer("Don't") and normalize_answer("1990–95") == normalize_answer("1990-95")
    assert normalize_answer("约翰·史密斯，返回 422。") == "约翰史密斯返回422"  # CJK unchanged: no spaces there anyway


def _squad_normalize(s: str) -> str:
    """The SQuAD v1.1 evaluation script's normalize_answer, as published (DPR copies it)."""
    import re
    import string

    s = s.lower()
    s = "".join(ch for ch in s if ch not in set(string.punctuation))
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


_SQUAD_WORDS = ["the", "a", "an", "The", "A", "Eiffel", "Tower", "3.5", "1,000", "10:30", "U.S.", "e.g.", "Don't", "C++",
                "$5", "(x)", "--", "theater", "ok!", "x_y", "[1]", "an-", "a.", "-the-", "\t", "\n", "50%", "1/2"]


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=40),
                 st.lists(st.sampled_from(_SQUAD_WORDS), max_size=10).map(" ".join)))
def test_ascii_text_normalizes_exactly_as_squad(text):
    """Folding full-width marks inside numbers touches no ASCII text: it normalizes as SQuAD's
    script does (the ASCII path is the one before that fix, which a scratch comparison with
    `git show` on 600 strings also found unchanged)."""
    assert normalize_answer(text) == _squad_normalize(text)


@pytest.mark.parametrize("full, ascii_", [("３．５", "3.5"), ("3．5", "3.5"), ("１，０００", "1,000"), ("1，000", "1000"),
                                           ("10：30", "10:30"), ("３．５％", "3.5%"), ("８：００－９：００", "8:00-9:00"),
                                           ("1﹒5", "1.5"), ("年利率３．５％", "年利率3.5%")])
def test_a_full_width_mark_inside_a_number_is_its_ascii_form(full, ascii_):
    """"３．５" was the words "3" and "5" ("3 5"), and "3.5" the word "35": EM 0 and F1 0 for one
    answer, where the citation checker reads both as 3.5. A full-width mark between two digits now
    reads as its ASCII form, before the punctuation goes."""
    assert normalize_answer(full) == normalize_answer(ascii_)
    assert exact_match(full, [ascii_]) == 1.0 and token_f1(full, [ascii_]) == 1.0


def test_full_width_numbers_agree_with_the_citation_checkers_tokens():
    from lewisrag.eval.citations import checkable_tokens

    for full, ascii_ in [("１，０００", "1,000"), ("３．５", "3.5")]:
        assert checkable_tokens(full) == checkable_tokens(ascii_)
        assert exact_match(full, [ascii_]) == 1.0


def test_a_full_width_mark_between_words_still_separates_them():
    """Only between two digits: "Paris，France" stays two words, "第1、2条" two numbers (、 is no
    ASCII mark), and a mark beside one digit only ("5％的用户", "Ｂ：1") changes nothing."""
    assert normalize_answer("Paris，France") == "paris france" and normalize_answer("email：invalid") == "email invalid"
    assert normalize_answer("第1、2条") == "第1 2条" and normalize_answer("5％的用户") == "5的用户"
    assert normalize_answer("Ｂ：1") == "b 1" and normalize_answer("1，b") == "1 b"
