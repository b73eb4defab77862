"""The rule-based citation checker: statuses, their order, folding, counts."""


import pytest

from lewisrag.eval.citations import (
    BAD_ID,
    HARD_GATE_STATUSES,
    MISSING_CITATION,
    PASS,
    QUOTE_NOT_FOUND,
    STATUSES,
    TOKEN_NOT_FOUND,
    UNVERIFIABLE,
    Check,
    check_answer,
    check_sentence,
    status_counts,
)

DOCS = {
    "1": '登录失败时接口 POST /api/users/login 返回 422，errors 为 {"email or password": ["is invalid"]}。前端在登录表单上方用红色列表显示。',
    "2": "BUG-1042：登录页没有提示。",
    "3": "注册时用户名已被占用，返回 422。",
    "4": "The server returns status 422 when the password is wrong.",
}
CONTEXT = {"1", "2", "3", "4"}


@pytest.mark.parametrize(
    "sentence, status",
    [
        ("登录失败时返回 422 [1]。", PASS),
        ("The server returns 422 [4].", PASS),
        ("登录失败时返回 422。", MISSING_CITATION),
        ("The server returns 422.", MISSING_CITATION),
        ("登录失败时返回 422 [9]。", BAD_ID),
        ("The server returns 422 [9].", BAD_ID),
        ("前端显示「红色弹窗」[1]。", QUOTE_NOT_FOUND),
        ("The server says 「wrong password」 [4].", QUOTE_NOT_FOUND),
        ('The server says "wrong password" [4].', TOKEN_NOT_FOUND),  # “” and "..." are no verbatim quotes
        ("前端弹出 toast，3 秒后消失 [1]。", TOKEN_NOT_FOUND),
        ("The server returns 401 [4].", TOKEN_NOT_FOUND),
        ("前端在表单上方显示错误 [1]。", UNVERIFIABLE),
        ("It is what it is [4].", UNVERIFIABLE),
    ],
)
def test_every_status_is_reachable_in_chinese_and_english(sentence, status):
    assert check_sentence(sentence, DOCS, CONTEXT).status == status


def test_checks_run_in_the_chapters_order():
    # each sentence fails every later check too; the first failing check decides
    assert check_sentence("前端弹出「toast」3 秒 [9]", DOCS, CONTEXT).status == BAD_ID
    assert check_sentence("前端弹出「toast」3 秒", DOCS, CONTEXT).status == MISSING_CITATION
    assert check_sentence("前端弹出「toast」3 秒 [1]", DOCS, CONTEXT).status == QUOTE_NOT_FOUND
    assert check_sentence("前端弹出 toast [1]", DOCS, CONTEXT).status == TOKEN_NOT_FOUND


def test_an_id_outside_this_answers_contexts_is_bad_even_if_the_document_exists():
    check = check_sentence("登录失败时返回 422 [1][2]。", DOCS, {"2", "3"})
    assert check == Check(BAD_ID, "cited ids not among the retrieved contexts: [1]")
    assert check_sentence("返回 422 [5]。", DOCS, {"5"}).status == BAD_ID  # retrieved, but no text


def test_quotes_are_folded_with_nfkc_case_and_whitespace():
    assert check_sentence("错误是「ＩＳ   Invalid」[1]。", DOCS, CONTEXT).status == PASS
    assert check_sentence("前端用「红色 列表」显示 [1]。", DOCS, CONTEXT).status == PASS
    assert check_sentence("错误是「is valid」[1]。", DOCS, CONTEXT).status == QUOTE_NOT_FOUND


def test_a_quote_must_appear_within_one_cited_document():
    docs = {"1": "红色", "2": "列表"}
    assert check_sentence("用「红色列表」显示 [1][2]。", docs, {"1", "2"}).status == QUOTE_NOT_FOUND
    assert check_sentence("用「红色」和「列表」显示 [1][2]。", docs, {"1", "2"}).status == PASS


def test_tokens_may_come_from_any_cited_document():
    assert check_sentence("BUG-1042 里返回 422 [1, 2]。", DOCS, CONTEXT).status == PASS
    assert check_sentence("BUG-1042 里返回 422 [2]。", DOCS, CONTEXT) == Check(TOKEN_NOT_FOUND, "not in the cited documents: 422")


def test_full_width_digits_and_letters_are_folded():
    assert check_sentence("登录失败返回 ４２２，ＰＯＳＴ 请求 [1]。", DOCS, CONTEXT).status == PASS


def test_a_quotes_own_stop_need_not_be_in_the_document():
    """A quoted sentence ends with its stop inside the quote marks; the document that holds the words
    without it failed the hard gate."""
    docs = {"1": "前端显示“用户名或密码错误”。", "2": "It says Invalid credentials, in red."}
    assert check_sentence("提示「用户名或密码错误。」[1]", docs, {"1"}).status == PASS
    assert check_sentence("It says 「Invalid credentials.」 [2]", docs, {"2"}).status == PASS
    assert check_sentence("It says 「Wrong password.」 [2]", docs, {"2"}).status == QUOTE_NOT_FOUND


def test_numbers_are_compared_whole():
    """Numbers were compared as runs of digits, so "3.5%" passed against a document's "5.3%" and
    "5 分钟" against "15 分钟", while "1,000" failed against "1000"."""
    docs = {"1": "年利率为 5.3%，锁定 15 分钟，共 1000 人。", "2": "The limit is 1,000 requests per 2.5 s."}
    statuses = [check_sentence(s, docs, {"1", "2"}).status for s in
                ["年利率为 3.5% [1]。", "锁定 5 分钟 [1]。", "共 1,000 人 [1]。", "年利率 5.3%，锁定 15 分钟 [1]。",
                 "The limit is 1000 requests per 2.5 s [2].", "The limit is 100 requests per 5 s [2]."]]
    assert statuses == [TOKEN_NOT_FOUND, TOKEN_NOT_FOUND, PASS, PASS, PASS, TOKEN_NOT_FOUND]


def test_a_clitic_is_no_word_and_accented_letters_belong_to_theirs():
    """"Tesla's" was "tesla" and "s", and "s" is in no document: a correct possessive was a false block;
    "São" was "s" and "o", so "Sao" or any word with an "s" and an "o" in the document passed for it."""
    docs = {"1": "Tesla founded the company in 2003. It doesn't sell petrol cars in São Paulo.", "2": "Sao Paulo"}
    statuses = [check_sentence(s, docs, {"1", "2"}).status for s in
                ["Tesla's company was founded in 2003 [1].", "Tesla’s plant doesn't sell petrol cars [1].",
                 "It doesn't sell cars in São Paulo [1].", "It doesn't sell cars in São Paulo [2].", "Tesla's rival [1]."]]
    assert statuses == [PASS, TOKEN_NOT_FOUND, PASS, TOKEN_NOT_FOUND, TOKEN_NOT_FOUND]
    assert check_sentence("Tesla’s plant doesn't sell petrol cars [1].", docs, {"1"}).detail.endswith(": plant")
    assert check_sentence("It doesn't sell cars in São Paulo [2].", docs, {"2"}).detail.endswith(": cars, sell, são")


def test_context_ids_and_documents_of_the_wrong_type_are_refused():
    """A string of ids was searched by substring ("1" in "12": a citation of [1] passed with only [12]
    retrieved); a document that is not a string was an AttributeError deep inside."""
    docs = {"1": "founded in 2003", "12": "x"}
    with pytest.raises(TypeError, match="context_ids: expected a set of id strings, got the string '12'"):
        check_sentence("Founded in 2003 [1].", docs, "12")
    with pytest.raises(TypeError, match="context_ids"):
        check_answer("Founded in 2003 [1].", docs, "12")
    with pytest.raises(TypeError, match=r"docs\['1'\]: expected the document's text as a string, got NoneType"):
        check_sentence("x [1]", {"1": None}, {"1"})
    assert check_sentence("Founded in 2003 [1].", docs, ["1", "12"]).status == PASS  # any collection of ids


def test_citation_numbers_are_not_tokens():
    # "[3]" must not be read as the number 3, which document 1 does not contain
    assert check_sentence("登录失败返回 422 [1][3]。", DOCS, CONTEXT).status == PASS


def test_check_answer_splits_and_keeps_statements():
    answer = "登录失败返回 422。[1] 前端弹出 toast [1]。前端在表单上方显示错误"
    out = check_answer(answer, DOCS, CONTEXT)
    assert [c.status for _, c in out] == [PASS, TOKEN_NOT_FOUND, MISSING_CITATION]
    assert [s.citations for s, _ in out] == [("1",), ("1",), ()]
    assert out[0][0].text == "登录失败返回 422。"


def test_status_counts_lists_every_status():
    pairs = check_answer("返回 422 [1]。返回 422 [9]。", DOCS, CONTEXT)
    counts = status_counts(pairs)
    assert list(counts) == list(STATUSES)
    assert counts == {PASS: 1, MISSING_CITATION: 0, BAD_ID: 1, QUOTE_NOT_FOUND: 0, TOKEN_NOT_FOUND: 0, UNVERIFIABLE: 0}
    assert status_counts([]) == dict.fromkeys(STATUSES, 0)
    with pytest.raises(ValueError, match="unknown citation statuses"):
        status_counts([Check("OK")])


def test_hard_gate_statuses_are_the_deterministic_ones():
    assert set(HARD_GATE_STATUSES) == {BAD_ID, MISSING_CITATION, QUOTE_NOT_FOUND}


def test_a_quote_with_its_citation_inside_is_found():
    """「is invalid [1]」 was looked up with its marker: QUOTE_NOT_FOUND, a hard-gate status."""
    docs = {"1": "The form says: email field is invalid."}
    assert check_sentence("错误信息是「is invalid [1]」。", docs, {"1"}).status == PASS
    assert check_sentence('It says "email field is invalid [1]".', docs, {"1"}).status == PASS


def test_format_characters_do_not_hide_a_quote_or_a_token():
    docs = {"1": "The login endpoint returns 422."}
    assert check_sentence("It returns「4\u200b22」[1].", docs, {"1"}).status == PASS
    assert check_sentence("The log\u200bin endpoint returns 422 [1].", docs, {"1"}).status == PASS


def test_citing_a_context_with_no_text_is_a_bad_id():
    got = check_sentence("It returns 422 [1].", {"1": "   "}, {"1"})
    assert got.status == BAD_ID and got.detail == "cited contexts have no text: [1]"


def test_check_answer_gates_the_reviewed_answers():
    """Splitter version 8: answers a review found slipping past the hard gate (an uncited claim after a
    closing quote or an ellipsis) or failing it (a fenced block read as an uncited sentence)."""
    docs = {"1": "登录失败时提示“用户名或密码错误。” The message is Invalid credentials. It returns 422. 登录失败返回 422。"
                 "登录失败返回 422，然后提示错误。 It returns 422 and shows an error.",
            "2": "It is shown in red. Then it shows an error.", "3": "Install it with pip install foo."}
    cases = [
        ("登录失败时提示“用户名或密码错误。”[1]账户会被永久删除。", ["UNVERIFIABLE", "MISSING_CITATION"]),
        ("登录失败时提示「用户名或密码错误。」[1]账户会被永久删除。", ["PASS", "MISSING_CITATION"]),
        ("登录失败返回 422 [1]……然后账户被永久删除。", ["PASS", "MISSING_CITATION"]),
        ("It returns 422 [1]… Then the account is deleted.", ["PASS", "MISSING_CITATION"]),
        # a mid-sentence ellipsis ends nothing: no uncited first piece (version 8 as first written)
        ("登录失败返回 422……然后提示错误 [1]。", ["PASS"]),
        ("It returns 422… and shows an error [1].", ["PASS"]),
        # an uncited claim, an ellipsis, then a new sentence: the claim does not share the citation after it
        ("It returns 422… Then it shows an error [1].", ["MISSING_CITATION", "PASS"]),
        ('The message is "Invalid credentials." [1] It is shown in red [2].', ["PASS", "PASS"]),
        ("Install it with pip [3]:\n```\npip install foo\n```", ["PASS"]),
        ("Install it with pip [3]:\n```\npip install foo\n```\nIt returns 422 [1].", ["PASS", "PASS"]),
    ]
    for answer, statuses in cases:
        assert [c.status for _, c in check_answer(answer, docs, set(docs))] == statuses, answer
    # the fenced block is the sentence's now, and a string literal in it is no quote to find
    [(_, check)] = check_answer('Install it with pip [3]:\n```\nprint("not in any passage")\n```', docs, set(docs))
    assert check.status not in HARD_GATE_STATUSES
