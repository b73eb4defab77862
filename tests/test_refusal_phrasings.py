"""Refusal phrasings in both languages: a refusal read in one language is read in its translation,
and a claim is read as a refusal in neither (docs/evaluator.md: the sources and the speaker's
inability are the same in both)."""

from __future__ import annotations

import pytest

from lewisrag.eval.refusals import declines_only, is_refusal
from lewisrag.eval.evaluator import evaluate_answers
from lewisrag.eval.judges import LexicalJudge
from lewisrag.eval.records import parse_answer

# (zh, en): the same refusal, each side read as one. The reviewers' cases are here; the rules before
# read one side of most pairs (both of some) as an answer: a not_in_kb refusal blamed on
# generation_distorted, a refusal beside a cited claim asked to cite, in one language only.
REFUSAL_PAIRS = [
    # "not found" in English
    ("未找到相关文档。", "No relevant documents were found."),
    ("知识库中没有这方面的信息。", "The knowledge base has no information on this."),
    ("未找到。", "Not found."),
    ("检索结果中没有关于锁定时长的信息。", "The search results contain no information about the lockout time."),
    ("提供的段落都没有提到锁定时长。", "None of the provided passages mention the lockout time."),
    ("没有任何段落提到锁定时长。", "None of the passages mention the lockout time."),
    ("查无结果。", "No results were found."),
    ("答案未找到。", "Answer not found."),
    ("上下文中没有任何关于锁定的内容。", "The context says nothing about lockouts."),
    ("资料中并无相关记载。", "The materials make no mention of it."),
    # the speaker's inability in Chinese, whatever its object, as "I/we cannot find/determine/know X"
    ("我没有找到凯特洛研究所的建立年份。", "I did not find the founding year of the Katelo Institute."),
    ("我无法确定凯特洛研究所的建立年份。", "I cannot determine the founding year of the Katelo Institute."),
    ("我不清楚锁定时长。", "I don't know the lockout time."),
    ("我不确定锁定时长。", "I'm not sure about the lockout time."),
    ("我无法根据提供的上下文回答这个问题。", "I cannot answer this question based on the provided context."),
    ("很抱歉，我无法从文档中找到答案。", "I'm sorry, I couldn't find the answer in the documents."),
    ("参考材料中没有提到锁定时长。", "The reference materials do not mention the lockout time."),
    ("无相关信息。", "No relevant information."),
    ("查无此信息。", "No such information was found."),
    ("我找不到相关记录。", "I can't find any relevant records."),
    ("我们无法提供该信息。", "We cannot provide that information."),
    ("我无法提供确切的答案。", "I cannot provide a definitive answer."),
    ("知识库中查不到凯特洛研究所的建立年份。", "The founding year of the Katelo Institute cannot be found in the knowledge base."),
    ("我不知道凯特洛研究所建于何年。", "I don't know when the Katelo Institute was founded."),
    ("我在提供的文档中没有找到相关信息。", "I did not find any relevant information in the provided documents."),
    ("我还没有找到答案。", "I haven't found the answer."),
    # subject dropped at the start of a clause: the speaker's
    ("没有找到凯特洛研究所的建立年份。", "Could not find the founding year of the Katelo Institute."),
    ("无法确定凯特洛研究所的建立年份。", "Cannot determine the founding year of the Katelo Institute."),
    ("抱歉，无法提供答案。", "Sorry, cannot provide an answer."),
    ("无法提供该信息。", "Cannot provide that information."),
    # a "when" inside what is not known, or a reason before the refusal, refuses still
    ("我不知道登录失败时会发生什么。", "I don't know what happens when login fails."),
    ("文档中没有提到登录失败时会发生什么。", "The documents do not mention what happens when login fails."),
    ("文档中没有提到超时时间。", "The documents do not mention the timeout."),
    ("由于文档中没有相关信息，我无法回答。", "Since the documents have no relevant information, I cannot answer."),
    ("如果您问的是创始人，我没有找到相关信息。", "If you are asking about the founder, I could not find any information."),
    # read in one language only, or in neither, before: a source-based passive, "that
    # information", "isn't in the", 没有这方面的信息, 无从得知, a bare 未提及 / "Not mentioned."
    ("这个问题无法根据上下文回答。", "This question cannot be answered based on the context."),
    ("无法根据提供的信息确定。", "It cannot be determined from the provided information."),
    ("我没有这方面的信息。", "I don't have that information."),
    ("答案不在提供的段落中。", "The answer isn't in the provided passages."),
    ("抱歉，我没有这方面的信息。", "I'm sorry, but I don't have that information."),
    ("无法从上下文中得知。", "It is impossible to tell from the context."),
    ("上下文中无从得知。", "It is not possible to determine from the context."),
    ("未提及。", "Not mentioned."),
]

# (zh, en): the same claim about a system, a refusal in neither. A condition or a reason holding a
# refusal phrase refuses nothing ("if the context has no token", 未找到用户时).
CLAIM_PAIRS = [
    ("服务器无法确定用户。", "The server cannot determine the user."),
    ("系统无法确定用户时锁定账号。", "The server cannot determine the user when it locks the account."),
    ("接口找不到用户时返回 404。", "The API cannot find the user and returns 404."),
    ("未找到用户时接口返回 404。", "When the user is not found, the API returns 404."),
    ("系统没有找到用户时返回404。", "If the system does not find the user, it returns 404."),
    ("系统不知道用户是否已登录，所以返回 401。", "The system does not know whether the user is logged in, so it returns 401."),
    ("不会向客户端泄露任何信息。", "No information is leaked to the client."),
    ("前端不知道用户是否存在。", "The frontend does not know whether the user exists."),
    ("不知道密码的用户可以重置密码。", "Users who don't know their password reset it."),
    ("响应文本中不包含密码。", "The response text does not contain the password."),
    ("接口返回空列表，无任何数据。", "The API returns an empty list with no data."),
    ("我们无法提供退款。", "We cannot provide refunds."),  # a policy: "provide" refuses with an answer as object
    ("无法提供退款。", "Cannot provide refunds."),
    # a refusal phrase inside a condition or a reason (both sides read as refusals before)
    ("如果上下文中没有令牌，接口返回 401。", "If the context does not contain a token, the API returns 401."),
    ("请求上下文中没有用户信息时返回 401。", "The API returns 401 when the request context has no user information."),
    ("因为上下文中没有令牌，接口返回 401。", "The API returns 401 because the context does not contain a token."),
    ("如果文档没有提到限制，则不设限制。", "If the documents do not mention a limit, no limit applies."),
    ("没有找到文档时，搜索返回空列表。", "If no documents were found, the search returns an empty list."),
    ("没有找到的话，接口返回 404。", "If not found, the API returns 404."),
    ("令牌过期时，无法确定用户。", "If the token expires, cannot determine the user."),
    ("我们不能确定用户身份时，会要求二次验证。", "When we cannot determine the user's identity, we require a second factor."),
    ("知识库中无此用户时返回 404。", "When the knowledge base has no such user, it returns 404."),
    # no refusal phrase to read: these stay claims beside the phrasings added above
    ("我再怎么强调这一点的重要性也不为过。", "I cannot stress enough how important X is."),
    ("答案毫无疑问：是巴黎。", "The answer is not in doubt: it is Paris."),
    ("系统无法从上下文中确定用户。", "The server cannot determine the user from the context."),
    ("无法确定的用户会被拒绝。", "Unknown users are rejected."),
]


@pytest.mark.parametrize("zh,en", REFUSAL_PAIRS)
def test_a_refusal_is_one_in_both_languages(zh, en):
    assert (is_refusal(zh), is_refusal(en)) == (True, True)
    assert (declines_only(zh), declines_only(en)) == (True, True)  # no number, no "but": need not cite


@pytest.mark.parametrize("zh,en", CLAIM_PAIRS)
def test_a_claim_is_a_refusal_in_neither_language(zh, en):
    assert (is_refusal(zh), is_refusal(en)) == (False, False)
    assert (declines_only(zh), declines_only(en)) == (False, False)


def test_subject_dropped_not_found_refuses_only_as_the_speakers():
    """没有找到X at a clause's start is the speaker's not finding; after a subject or before 时 it states
    what a system does."""
    assert is_refusal("没有找到凯特洛研究所的建立年份。") and is_refusal("根据提供的资料，没有找到建立年份。")
    assert not is_refusal("系统没有找到用户时返回404。") and not is_refusal("没有找到用户时，接口返回 404。")
    assert not declines_only("系统没有找到用户时返回 404。")


def _record(response: str, category: str | None) -> dict:
    row = {"user_input": "凯特洛研究所哪年建立？", "response": response, "category": category,
           "retrieved_contexts": [{"id": "1", "title": "", "text": "登录失败返回 422。Login returns 422."}]}
    return evaluate_answers([parse_answer(row, "answers.jsonl", 1, {})], LexicalJudge()).to_json()["records"][0]


@pytest.mark.parametrize("zh,en", [
    ("我没有找到凯特洛研究所的建立年份。", "I did not find the founding year of the Katelo Institute."),
    ("我无法根据提供的上下文回答这个问题。", "I cannot answer this question based on the provided context."),
    ("没有找到凯特洛研究所的建立年份。", "Could not find the founding year of the Katelo Institute."),
    ("未找到相关文档。", "No relevant documents were found."),
])
def test_the_reviewers_refusals_are_judged_alike_in_both_languages(zh, en):
    """A not_in_kb refusal read as an answer is blamed on generation_distorted, and beside a cited claim
    it had to cite (MISSING_CITATION); the rules before did so to one side of each pair, or both."""
    for claim, refusal in (("登录失败返回 422 [1]。", zh), ("Login returns 422 [1]. ", en)):
        nik = _record(refusal, "not_in_kb")
        assert nik["refused"] is True and nik["diagnosis"]["primary"] is None
        assert [c["status"] for c in _record(claim + refusal, None)["citation_checks"]] == ["PASS"]
