"""The sentence splitter: Chinese and English rules, citations, quotes, granularity."""

import doctest

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lewisrag.eval import statements
from lewisrag.eval.statements import (
    CITATION_RE,
    SPLITTER_NAME,
    SPLITTER_VERSION,
    Statement,
    canonical_citations,
    citation_ids,
    sentence_spans,
    split_atomic,
    split_sentences,
    strip_citations,
    to_statement,
)


def test_docstring_examples():
    assert doctest.testmod(statements).failed == 0


def test_name_and_version_are_stamped():
    assert (SPLITTER_NAME, SPLITTER_VERSION) == ("sentences", "15")


@pytest.mark.parametrize(
    "text, expected",
    [
        ("登录失败返回 422。前端显示错误列表！真的吗？", ["登录失败返回 422。", "前端显示错误列表！", "真的吗？"]),
        ("It returns 422. The form shows errors! Right?", ["It returns 422.", "The form shows errors!", "Right?"]),
        ("Version 3.5 is out. Next", ["Version 3.5 is out.", "Next"]),
        ("Use a list, e.g. a red one. Done.", ["Use a list, e.g. a red one.", "Done."]),
        ("Dr. Smith and J. Doe agree. Yes.", ["Dr. Smith and J. Doe agree.", "Yes."]),
        ("See example.com now. Ok", ["See example.com now.", "Ok"]),
        ("他说：「好。走吧！」然后离开了。下一句", ["他说：「好。走吧！」然后离开了。", "下一句"]),
        ('He said "stop. now" and left. Then', ['He said "stop. now" and left.', "Then"]),
        ("第一行\n第二行", ["第一行", "第二行"]),
        ("Wait... what? Ok", ["Wait... what?", "Ok"]),
        ("Wait... What? Ok", ["Wait...", "What?", "Ok"]),
        ("返回 422.接下来显示列表", ["返回 422.", "接下来显示列表"]),
        # version 7: "etc." ends a sentence before a capital or a CJK character, and at the end
        ("It reads JSON, XML, etc. It caches them [1].", ["It reads JSON, XML, etc.", "It caches them [1]."]),
        ("Reads JSON, etc.接下来缓存", ["Reads JSON, etc.", "接下来缓存"]),
        ("JSON, XML, etc. and more. Done", ["JSON, XML, etc. and more.", "Done"]),
        ("JSON, etc., then XML. Done", ["JSON, etc., then XML.", "Done"]),
        ("It reads JSON, etc.", ["It reads JSON, etc."]),
    ],
)
def test_sentence_boundaries(text, expected):
    assert sentence_spans(text) == expected


@pytest.mark.parametrize(
    "text, citations",
    [
        ("登录失败时接口返回 422。[1]", ("1",)),
        ("登录失败时接口返回 422 [1]。", ("1",)),
        ("It returns 422. [1]", ("1",)),
        ("It returns 422. [1][2]", ("1", "2")),
        ("It returns 422 [1, 2].", ("1", "2")),
        ("返回 422 [2]，见 [1，3]。", ("2", "1", "3")),
    ],
)
def test_trailing_citations_belong_to_the_sentence_before(text, citations):
    (statement,) = split_sentences(text)
    assert statement.citations == citations
    assert "[" not in statement.text


def test_citations_stay_with_their_own_sentence():
    out = split_sentences("返回 422。[1] 前端显示列表。[2]\nIt locks. [3][4] Done.")
    assert [s.citations for s in out] == [("1",), ("2",), ("3", "4"), ()]
    assert [s.text for s in out] == ["返回 422。", "前端显示列表。", "It locks.", "Done."]


def test_a_citation_on_its_own_line_joins_the_sentence_before():
    assert [s.citations for s in split_sentences("It returns 422.\n[2]\nNext one.")] == [("2",), ()]


def test_quotes_are_kept():
    (s,) = split_sentences('密码错误时接口返回「422」，errors 为 {"email or password": ["is invalid"]} [3]。')
    assert s.quotes == ("422", "email or password", "is invalid")
    assert s == Statement('密码错误时接口返回「422」，errors 为 {"email or password": ["is invalid"]}。', ("3",), s.quotes)


def test_an_unclosed_quote_ends_at_the_newline():
    assert sentence_spans("他说「没完。\n下一行。再一句。") == ["他说「没完。", "下一行。", "再一句。"]


def test_a_citation_opening_a_sentence_after_a_cited_one_is_that_sentences():
    """Citations after a full stop went to the sentence before, even one that cited already: in
    "[1] 指出 A。[1] 还指出 B。" the second sentence cited nothing and failed the gate's tier 1."""
    out = split_sentences("[1] 指出登录失败返回 422。[1] 还指出前端显示错误。[2] states it too. It locks [3]. [4]")
    assert [s.citations for s in out] == [("1",), ("1",), ("2",), ("3", "4")]
    assert [s.citations for s in split_sentences("返回 422。[1] 前端显示列表 [2]。")] == [("1",), ("2",)]  # uncited: as before


def test_a_leading_citation_joins_the_first_sentence():
    assert [s.citations for s in split_sentences("[2] It returns 422. Next.")] == [("2",), ()]


def test_empty_text_has_no_statements():
    assert split_sentences("") == [] and split_sentences(" \n 。 ") == []


def test_split_atomic_keeps_citations_and_finds_quotes():
    pieces = {"前端弹出“登录失败”的 toast，3 秒后消失。": ["前端弹出 toast", "提示“登录失败”", "3 秒后消失"]}
    out = split_atomic("前端弹出“登录失败”的 toast，3 秒后消失 [1]。", lambda s: pieces[s])
    assert [s.text for s in out] == ["前端弹出 toast", "提示“登录失败”", "3 秒后消失"]
    assert {s.citations for s in out} == {("1",)}
    assert out[1].quotes == ("登录失败",)


def test_split_atomic_rejects_a_bad_decomposer():
    with pytest.raises(TypeError, match="list of strings"):
        split_atomic("一句话。", lambda s: s)


def test_granularity_changes_faithfulness():
    """The chapter's hallucinated answer: 3 sentences, 6 atomic facts or 1 block, with 1, 1 and 0
    of them supported by the contexts: 33.3%, 16.7% and 0%."""
    answer = "登录时密码错误，接口返回 422 [1]。前端会弹出一个 toast，提示“登录失败”，3 秒后自动消失 [1]。连续输错 5 次后，账号会被锁定 15 分钟 [1]。"
    supported = {"登录时密码错误，接口返回 422。", "登录时密码错误，接口返回 422"}
    atoms = {
        "登录时密码错误，接口返回 422。": ["登录时密码错误，接口返回 422"],
        "前端会弹出一个 toast，提示“登录失败”，3 秒后自动消失。": ["弹出 toast", "提示“登录失败”", "3 秒后消失"],
        "连续输错 5 次后，账号会被锁定 15 分钟。": ["输错 5 次锁定", "锁定 15 分钟"],
    }

    def faithfulness(texts):
        return sum(t in supported for t in texts) / len(texts)

    by_sentence = [s.text for s in split_sentences(answer)]
    atomic = [s.text for s in split_atomic(answer, lambda s: atoms[s])]
    whole = [answer]
    assert (len(by_sentence), len(atomic), len(whole)) == (3, 6, 1)
    assert [round(100 * faithfulness(x), 1) for x in (by_sentence, atomic, whole)] == [33.3, 16.7, 0.0]


ALPHABET = st.sampled_from(list("ab3 .!?。！？「」\"\n[1],") + ["[2]", "e.g.", "3.5", "登录"])


@settings(max_examples=200, deadline=None)
@given(st.lists(ALPHABET, max_size=40).map("".join))
def test_splitting_loses_no_letters_and_is_deterministic(text):
    spans = sentence_spans(text)
    if not any(c.isalnum() for c in CITATION_RE.sub("", text)):
        assert spans == []  # nothing but citations and punctuation
        return
    # letters all kept (digits too, but a list marker's: "3. " opening a line is no part of its sentence)
    assert [c for c in "".join(spans) if c.isalpha()] == [c for c in text if c.isalpha()]
    assert spans == sentence_spans(text)
    assert all(span == span.strip() and span for span in spans)


# ---------------------------------------------------------------------------------------------
# splitter version 2: text a probe of odd inputs found mis-read (each used to fail as noted)


def test_a_long_run_of_spaces_is_stripped_in_linear_time():
    """Every space of a run used to be tried to the run's end: 100,000 spaces took 10 s."""
    import time

    text = "It returns 422" + " " * 200_000 + "and more [1]."
    start = time.perf_counter()
    assert strip_citations(text).endswith("and more.")
    assert time.perf_counter() - start < 5  # quadratic: minutes


@pytest.mark.parametrize("space", ["\u00a0", "\u2009", "\u3000", " \t"])
def test_a_citation_after_any_space_but_a_newline_stays_with_its_sentence(space):
    """A no-break space between the stop and [1] moved the citation to the next sentence."""
    got = split_sentences(f"It returns 422.{space}[1] The form shows a list [2].")
    assert [s.citations for s in got] == [("1",), ("2",)]


def test_full_width_and_lenticular_markers_and_padded_ids_are_citations():
    """［１］, 【1】, [1、2] were no citations (MISSING_CITATION) and [01] cited a context "01"."""
    assert citation_ids("返回 422［１］，见【2】与 [3、4]，及 [05]、[^6]。") == ("1", "2", "3", "4", "5", "6")
    assert citation_ids("on a scale [1-5]") == ("1", "2", "3", "4", "5")  # a range cites every id in it
    assert strip_citations("返回 422［１］。") == "返回 422。"  # no marker left to corrupt EM ("4221")
    assert citation_ids("x[١] y[٢]") == ()  # other scripts' digits are not ids


def test_full_width_stops_end_sentences_and_no_ends_one_unless_a_number_follows():
    assert [s.text for s in split_sentences("返回 422 [1]．前端弹出 toast｡完成")] == ["返回 422．", "前端弹出 toast｡", "完成"]
    assert len(split_sentences("He said no. It returns 422 [1].")) == 2
    assert len(split_sentences("See No. 5 for details [1].")) == 1


def test_quotes_are_read_without_the_citations_inside_them():
    assert to_statement("错误信息是「is invalid [1]」。").quotes == ("is invalid",)
    assert to_statement('He said "it returns 422 [2]".').quotes == ("it returns 422",)


# ---------------------------------------------------------------------------------------------
# splitter version 3: numbered lists


@pytest.mark.parametrize("text, expected", [
    ("1. 登录失败返回 422 [1]。\n2. 锁定 15 分钟 [2]。", ["登录失败返回 422 [1]。", "锁定 15 分钟 [2]。"]),
    # a lead-in ending in ":" is a label, no sentence (version 15)
    ("Steps:\n  1. It returns 422 [1].\n  10. It locks [2]", ["It returns 422 [1].", "It locks [2]"]),
    ("1) a [1]\n2、b [2]\n- c [1]\n* d\n• e", ["a [1]", "b [2]", "c [1]", "d", "e"]),
    ("It was built in 1999. Then it fell [1].", ["It was built in 1999.", "Then it fell [1]."]),  # no list here
    ("3.5 is the version.", ["3.5 is the version."]),
    ("42. It is the answer [1].", ["42.", "It is the answer [1]."]),  # one numbered line is no list: 42 is kept
    ("- a [1]\n- b", ["a [1]", "b"]),
    # Chinese markers: "（1）" stayed part of its item until version 6, a number the context had to hold
    ("两点：\n（1）登录失败返回 422 [1]\n（2）锁定 15 分钟 [2]", ["登录失败返回 422 [1]", "锁定 15 分钟 [2]"]),
    ("1）登录失败 [1]\n2）锁定 [2]", ["登录失败 [1]", "锁定 [2]"]),
    ("(1) It returns 422 [1].\n(2) It locks [2].", ["It returns 422 [1].", "It locks [2]."]),
])
def test_a_numbered_list_item_is_one_sentence_without_its_marker(text, expected):
    """Version 2 made "1." a sentence of its own: half an answer's statements were uncited, and the
    marker's number was a token the cited context had to hold."""
    assert sentence_spans(text) == expected


def test_an_answer_as_a_numbered_list_scores_as_the_same_answer_in_prose():
    from lewisrag.eval.evaluator import EvalConfig, evaluate_answers
    from lewisrag.eval.judges import LexicalJudge
    from lewisrag.eval.records import AnswerRecord
    from lewisrag.data.records import Passage

    contexts = (Passage("1", "A", "A failed login returns 422."), Passage("2", "B", "Five failures lock the account."))

    def scored(response: str) -> dict:
        record = AnswerRecord("q", "What happens?", response, contexts, reference="422; five failures lock it.",
                              has_context_ids=True)
        (rec,) = evaluate_answers([record], LexicalJudge(), EvalConfig()).to_json()["records"]
        # the statement-level scores; EM, F1 and ROUGE-L read the answer as written, list numbers included
        metrics = {k: v for k, v in rec["metrics"].items() if k not in ("exact_match", "f1", "rougeL", "bleu_1")}
        return {"metrics": metrics, "checks": [c["status"] for c in rec["citation_checks"]]}

    prose = scored("A failed login returns 422 [1]. Five failures lock the account [2].")
    listed = scored("1. A failed login returns 422 [1].\n2. Five failures lock the account [2].")
    assert listed == prose and prose["checks"] == ["PASS", "PASS"]



@pytest.mark.parametrize("marker", ["[1-3]", "[1–3]", "［１～３］", "【1 - 3】", "[1-2, 3]"])
def test_a_range_cites_every_context_in_it(marker):
    """Version 3 read "[1-3]" as no citation: the sentence was MISSING_CITATION, its passages unchecked."""
    from lewisrag.eval.citations import check_answer

    assert citation_ids(f"The tower is 330 m tall {marker}.") == ("1", "2", "3")
    assert strip_citations(f"The tower is 330 m tall {marker}.") == "The tower is 330 m tall."
    docs = {"1": "The tower is 330 m tall.", "2": "It opened in 1889.", "3": "Paris."}
    [(statement, check)] = check_answer(f"The tower is 330 m tall {marker}.", docs, set(docs))
    assert statement.citations == ("1", "2", "3") and check.status == "PASS"
    [(_, check)] = check_answer(f"The tower is 330 m tall {marker.replace('3', '4').replace('３', '４')}.", docs, set(docs))
    assert check.status == "BAD_ID"  # context 4 does not exist


def test_a_backward_or_long_range_cites_its_two_ends():
    assert citation_ids("[3-1]") == ("3", "1")
    assert citation_ids(f"[1-{statements.MAX_RANGE}]") == tuple(str(i) for i in range(1, statements.MAX_RANGE + 1))
    assert citation_ids(f"[1-{statements.MAX_RANGE + 1}]") == ("1", str(statements.MAX_RANGE + 1))
    assert citation_ids("[1990-2020]") == ("1990", "2020")
    assert citation_ids("[1-]") == () and citation_ids("[-1]") == ()  # half a range is no marker


@pytest.mark.parametrize("code", ["`arr[0]`", "``items[1]``", "`` x[`0`] ``", "```\nfor i in range(3):\n    a[2] = 1.\n```"])
def test_markdown_code_holds_no_citation_and_no_sentence_end(code):
    """Version 4 read `arr[0]` as a citation of context 0: a BAD_ID that tier 1 of the gate fails on."""
    from lewisrag.eval.citations import check_answer

    answer = f"Read the first item with {code} in the client [1]. It returns 422 [2]."
    [first, second] = split_sentences(answer)
    assert first.citations == ("1",) and code in first.text and second.citations == ("2",)
    assert citation_ids(answer) == ("1", "2") and code in strip_citations(answer) and code in canonical_citations(answer)
    docs = {"1": "The client reads items.", "2": "It returns 422."}
    assert [c.status for _, c in check_answer(answer, docs, set(docs))][1] == "PASS"
    assert [c.status for _, c in check_answer(answer, docs, set(docs))][0] != "BAD_ID"


def test_an_unclosed_backtick_opens_no_code():
    assert citation_ids("It`s cited [1]. So is this [2].") == ("1", "2")
    assert [s.citations for s in split_sentences("A `b [1]. C [2].")] == [("1",), ("2",)]


def test_ids_of_thousands_of_digits_are_read_as_text():
    """int() refuses numbers of 4,300 digits and more: a citation or a context id that long was a
    traceback in eval answers."""
    from lewisrag.eval.evaluator import evaluate_answers
    from lewisrag.eval.judges import LexicalJudge
    from lewisrag.eval.records import parse_answer

    big = "7" * 5000
    assert split_sentences(f"x [0{big}]。")[0].citations == (big,)
    rec = parse_answer({"user_input": "q", "response": f"x 422 [{big}]。", "retrieved_contexts": [{"id": big, "text": "x 422"}]},
                       "a.jsonl", 1, {})
    (out,) = evaluate_answers([rec], LexicalJudge()).to_json()["records"]
    assert [c["status"] for c in out["citation_checks"]] == ["PASS"]


# ---------------------------------------------------------------------------------------------
# splitter version 8: a closing quote after a stop, an ellipsis, fenced code blocks


@pytest.mark.parametrize("text, expected", [
    # a stop inside a quote, then the quote closes: the sentence ends there, and citations after the
    # mark are that sentence's (version 7 ended nothing, so the next claim shared them)
    ("登录失败时提示“用户名或密码错误。”[1]账户会被永久删除。", ["登录失败时提示“用户名或密码错误。”[1]", "账户会被永久删除。"]),
    ('The error is "Invalid credentials." [1] It is shown in red [2].',
     ['The error is "Invalid credentials." [1]', "It is shown in red [2]."]),
    ('The message is "Invalid credentials." The account is locked [1].',
     ['The message is "Invalid credentials."', "The account is locked [1]."]),
    ("提示「用户名或密码错误！」[1]\n账户被锁定 [2]。", ["提示「用户名或密码错误！」[1]", "账户被锁定 [2]。"]),
    ("他说“我不知道……”[1]然后离开了 [2]。", ["他说“我不知道……”[1]", "然后离开了 [2]。"]),
    ("“他说‘好。’”[1]然后离开了 [2]。", ["“他说‘好。’”[1]", "然后离开了 [2]。"]),
    ("He said ‘Stop.’ Then he left [1].", ["He said ‘Stop.’", "Then he left [1]."]),
    ("He said 'Stop.' Then he left [1].", ["He said 'Stop.'", "Then he left [1]."]),
    ('(He said "Stop.") Then he left [1].', ['(He said "Stop.")', "Then he left [1]."]),
    # a quoted sentence inside a sentence ends nothing: a small letter or a comma follows, or a
    # character right after the mark
    ('He said "Stop." and left [1].', ['He said "Stop." and left [1].']),
    ('"Stop!" he said [1].', ['"Stop!" he said [1].']),
    ('"Stop." — he said it twice [1].', ['"Stop." — he said it twice [1].']),
    ('He said "Stop." [1] and left.', ['He said "Stop." [1] and left.']),
    ('It shows "Invalid credentials.", then clears [1].', ['It shows "Invalid credentials.", then clears [1].']),
    ("前端显示「错误。」列表 [1]！", ["前端显示「错误。」列表 [1]！"]),
    ("提示“用户名或密码错误。”[1]，然后清空表单。", ["提示“用户名或密码错误。”[1]，然后清空表单。"]),
    ("It's fine. Isn't it [1]?", ["It's fine.", "Isn't it [1]?"]),
    # no stop before the mark: the quote ends nothing (its final stop may be absent in the source)
    ('The message is "Invalid credentials" [1]. It locks [2].', ['The message is "Invalid credentials" [1].', "It locks [2]."]),
    ('He works at "Acme Inc." and likes it [1].', ['He works at "Acme Inc." and likes it [1].']),
])
def test_a_closing_quote_after_a_stop_ends_the_sentence(text, expected):
    assert sentence_spans(text) == expected


def test_a_cited_sentence_ending_in_a_quote_leaves_citations_to_the_next():
    """As after a bare stop: when the sentence cites already, citations followed by text open the next one."""
    assert sentence_spans("[1] 提示“错误。”[2]账户被删除。") == ["[1] 提示“错误。”", "[2]账户被删除。"]


@pytest.mark.parametrize("text, expected", [
    # An ellipsis ("…", "……", "⋯⋯" and "...", which NFKC makes of "…") ends a sentence only where what
    # follows reads as a new one: the end of the text, a citation right after it, a citation right
    # before it (a cited sentence trailing off: what follows must cite on its own), or a space and a
    # capitalised word that is not all capitals
    ("登录失败返回 422 [1]……然后账户被永久删除。", ["登录失败返回 422 [1]……", "然后账户被永久删除。"]),
    ("It returns 422 [1]… Then the account is deleted.", ["It returns 422 [1]…", "Then the account is deleted."]),
    ("It returns 422 [1]... Then the account is deleted.", ["It returns 422 [1]...", "Then the account is deleted."]),
    ("It returns 422 [1]...\nThe account is deleted.", ["It returns 422 [1]...", "The account is deleted."]),
    ("接口返回 422 [1]…… 账户随后被锁定。", ["接口返回 422 [1]……", "账户随后被锁定。"]),
    ("It returns 422 [1]… and then it locks [2].", ["It returns 422 [1]…", "and then it locks [2]."]),
    ("The limit is 5 [1]… The account then locks [2].", ["The limit is 5 [1]…", "The account then locks [2]."]),
    ("他沉默了……[1] 然后离开了 [2]。", ["他沉默了……[1]", "然后离开了 [2]。"]),
    ("接口返回 422……[1]账户随后被锁定 [2]。", ["接口返回 422……[1]", "账户随后被锁定 [2]。"]),
    ("It returns 422… Then the account is deleted [1].", ["It returns 422…", "Then the account is deleted [1]."]),
    ("Wait... What? Ok", ["Wait...", "What?", "Ok"]),
    ("I tried… I gave up [1].", ["I tried…", "I gave up [1]."]),
    ("我不知道……。下一句 [1]", ["我不知道……。", "下一句 [1]"]),
    ("Really...? Yes [1].", ["Really...?", "Yes [1]."]),
    ("The answer is unclear…", ["The answer is unclear…"]),
    ("It returns 422 [1]……", ["It returns 422 [1]……"]),
    # ... and trails off inside one otherwise: before a small letter, an all-capitals term or a CJK
    # character (version 8 as first written ended these, leaving the first piece uncited), before 等 /
    # 之类 / 什么的, after a comma eliding list items, or inside a token
    ("水果包括苹果、香蕉……还有橙子[1]。", ["水果包括苹果、香蕉……还有橙子[1]。"]),
    ("他犹豫了一下……最后还是同意了[1]。", ["他犹豫了一下……最后还是同意了[1]。"]),
    ("It supports JSON, XML… and YAML [1].", ["It supports JSON, XML… and YAML [1]."]),
    ("It supports JSON, XML... and YAML [1].", ["It supports JSON, XML... and YAML [1]."]),
    ("返回 422⋯⋯然后锁定 [1]。", ["返回 422⋯⋯然后锁定 [1]。"]),
    ("它支持 JSON、XML 等格式……以及 YAML [1]。", ["它支持 JSON、XML 等格式……以及 YAML [1]。"]),
    ("系统会先验证密码……如果失败则返回 422 [1]。", ["系统会先验证密码……如果失败则返回 422 [1]。"]),
    ("Wait… what? Ok", ["Wait… what?", "Ok"]),
    ("Wait... what? Ok", ["Wait... what?", "Ok"]),
    ("The request fails… and returns 422 [1].", ["The request fails… and returns 422 [1]."]),
    ("It supports JSON… XML support is planned [1].", ["It supports JSON… XML support is planned [1]."]),
    ("The docs say… well, not much [1].", ["The docs say… well, not much [1]."]),
    ("Loading… please wait [1].", ["Loading… please wait [1]."]),
    ("He waited... and waited [1].", ["He waited... and waited [1]."]),
    ("The steps are: log in, open settings… then click save [1].", ["The steps are: log in, open settings… then click save [1]."]),
    ("It is 3.5... or so [1].", ["It is 3.5... or so [1]."]),
    ("wait…what [1]", ["wait…what [1]"]),
    ("我喜欢苹果、香蕉……等水果 [1]。", ["我喜欢苹果、香蕉……等水果 [1]。"]),
    ("支持 JSON、XML……之类的格式 [1]。", ["支持 JSON、XML……之类的格式 [1]。"]),
    ("我喜欢苹果、香蕉...等水果 [1]。", ["我喜欢苹果、香蕉...等水果 [1]。"]),
    ("It reads A, B, … and Z [1].", ["It reads A, B, … and Z [1]."]),
    ("It reads A, B, ... and Z [1].", ["It reads A, B, ... and Z [1]."]),
    ("ids 1, 2, …, n [1].", ["ids 1, 2, …, n [1]."]),
])
def test_an_ellipsis_ends_a_sentence_only_where_a_new_one_begins(text, expected):
    assert sentence_spans(text) == expected


def test_a_run_of_stops_is_read_in_linear_time():
    """Each dot of a run walked the whole run: 20,000 dots before a letter took 20 s."""
    import time

    for run in (".", "…", "?!"):
        text = "It returns 422" + run * 20_000 + "x and more [1]." + run * 20_000 + "等"
        start = time.perf_counter()
        sentence_spans(text)
        assert time.perf_counter() - start < 2  # quadratic: minutes


@pytest.mark.parametrize("text, expected", [
    ("Install it with this command [1]:\n```\npip install foo\n```", ["Install it with this command [1]:\n```\npip install foo\n```"]),
    ("Install it [1].\n\n```bash\npip install foo\n```\n\nThen run it [2].",
     ["Install it [1].\n\n```bash\npip install foo\n```", "Then run it [2]."]),
    ("Install it:\n```\npip install foo\n``` [1]\nThen run it [2].", ["Install it:\n```\npip install foo\n``` [1]", "Then run it [2]."]),
    ("Install it:\n```\npip install foo\n```\n[1]", ["Install it:\n```\npip install foo\n``` [1]"]),
    ("Install it:\n~~~\npip install foo. x[3]\n~~~\n[1]", ["Install it:\n~~~\npip install foo. x[3]\n~~~ [1]"]),
    ("Install it [1]:\n````\n```\nnested\n```\n````\nDone [2].", ["Install it [1]:\n````\n```\nnested\n```\n````", "Done [2]."]),
    ("1. Install it [1]:\n   ```\n   pip install foo\n   ```\n2. Run it [2]", ["Install it [1]:\n   ```\n   pip install foo\n   ```", "Run it [2]"]),
    ("Install it [1]:\n```\npip install foo\n```\n```\nfoo --help\n```", ["Install it [1]:\n```\npip install foo\n```\n```\nfoo --help\n```"]),
    # at the start of the text, with the sentence after it; alone, a sentence that must cite
    ("```\npip install foo\n```\nThis installs foo [1].", ["```\npip install foo\n```\nThis installs foo [1]."]),
    ("```\npip install foo\n```", ["```\npip install foo\n```"]),
])
def test_a_fenced_block_belongs_to_the_sentence_before_it(text, expected):
    assert sentence_spans(text) == expected


def test_a_tilde_fence_holds_no_citation():
    assert citation_ids("Run:\n~~~\nx = a[2]\n~~~\nIt works [1].") == ("1",)
    assert citation_ids("Run ~~~ a[2] ~~~ now [1].") == ("2", "1")  # no fence: tildes inside a line


def test_a_quote_mark_inside_code_opens_no_quote():
    """A string literal in code is no quotation of a source: with a fenced block now part of its
    sentence, `print("hello")` must not be a quote the cited passage has to hold."""
    [s] = split_sentences('Print it with this code [1]:\n```python\nprint("hello, world")\n```')
    assert s.quotes == () and s.citations == ("1",)
    assert split_sentences('Run `print("a")` to print "a" [1].')[0].quotes == ("a",)
    assert split_sentences('The message "use `x` now" shows [1].')[0].quotes == ("use `x` now",)



# splitter version 10: citations after "etc." and an ellipsis opening a line
@pytest.mark.parametrize("text, expected", [
    # the character after the citations tells whether "etc." ends the sentence (version 9 read the "["
    # and made "It reads XML, etc. [1] It caches them [2]." one sentence citing both)
    ("It reads XML, etc. [1] It caches them [2].", [("It reads XML, etc.", ("1",)), ("It caches them.", ("2",))]),
    ("它读 JSON, etc. [1][2]然后缓存 [3]。", [("它读 JSON, etc.", ("1", "2")), ("然后缓存。", ("3",))]),
    ("It reads XML, etc. [1] and more [2].", [("It reads XML, etc. and more.", ("1", "2"))]),
    ("He is No. [1] 5 on the list [2].", [("He is No. 5 on the list.", ("1", "2"))]),
])
def test_etc_before_a_citation_ends_a_sentence_as_it_does_without_one(text, expected):
    assert [(s.text, s.citations) for s in split_sentences(text)] == expected


def test_a_citation_ending_the_line_before_an_ellipsis_is_not_right_before_it():
    """The ellipsis opening a line read the citation ending the line before as its own, so it ended a
    sentence of only itself, dropped: version 9 lost the "…" (its text), keeping the citations."""
    out = split_sentences("He lives in the U.S. [1]\n… 然后他离开了 [2]")
    assert [(s.text, s.citations) for s in out] == [("He lives in the U.S.", ("1",)), ("… 然后他离开了", ("2",))]
    out = split_sentences("返回 422 [1]\n……然后账户被删除 [2]。")
    assert [(s.text, s.citations) for s in out] == [("返回 422", ("1",)), ("……然后账户被删除。", ("2",))]
    # on its line, a citation right before an ellipsis still ends the sentence there (a cited one trailing off)
    assert sentence_spans("It returns 422 [1]… then it is deleted.") == ["It returns 422 [1]…", "then it is deleted."]
