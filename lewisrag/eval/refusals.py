"""Whether an answer refuses (`is_refusal`), whether a sentence only declines (`declines_only`), whether
a sentence carries no claim (`is_courtesy`), in Chinese and English alike; a sentence of either of the
last two asserts nothing (`asserts_nothing`): it need not cite and is no statement to judge. An answer
with no words (`has_no_words`) neither refuses nor asserts.

The chapter's not_in_kb questions have one right answer, a refusal ("not found"); the diagnosis
(`diagnose`) and the citation rules (`evaluator`) read it from here. Rules, not a model: they must
run without a judge, and every phrasing is listed in both languages side by side, so that a refusal
read in one is read in its translation (tests/test_refusal_phrasings.py).
"""

from __future__ import annotations

import re
import unicodedata

from lewisrag.eval.judges.lexical import names_in
from lewisrag.eval.numbers import zh_numbers
from lewisrag.eval.statements import split_sentences, strip_citations

# A refusal phrase names what holds no answer (the knowledge base, the documents) or who cannot
# give one (I, we; 我, 我们): "cannot determine" or 无法确定 alone is as often a claim about a system
# ("the server cannot determine...", 系统无法确定用户时...). With neither, a phrase counts only at the
# start of a clause, where the dropped subject is the speaker ("Could not find the founding year.",
# 没有找到建立年份。), and Chinese "not found" anywhere else only before an object that is the answer
# itself (`_ANSWER_ZH`). Every phrasing is listed in both languages, side by side: a refusal read in
# one is read in its translation (tests/test_refusal_phrasings.py). Text is NFKC-folded and
# lowercased first, so a full-width ，；：！？ reads as , ; : ! ?.
# The two lists name the same sources, side by side (the reports call a retrieved text 段落 /
# "passage", 上下文 / "context"): knowledge base 知识库 · context(s) 上下文 · document(s) 文档 ·
# passage(s) 段落 · excerpt(s), snippet(s) 片段 / 文段 · source(s) 来源 · (reference) material(s)
# (参考)资料 / 材料 · search / retrieval / retrieved results 检索结果 · the text 文中 / 原文 · information /
# content provided 提供的信息 / 内容. "text" only after the, this, provided, given or retrieved, and
# no bare 文本: "the response text does not contain the password", 文本中没有空格 state facts.
_SOURCE_EN = (r"(?:knowledge base|contexts?|documents?|passages?|excerpts?|snippets?|sources?|(?:reference )?materials?"
              r"|(?:search|retrieval|retrieved) results|(?:(?<=the )|(?<=this )|(?<=provided )|(?<=given )|(?<=retrieved ))text"
              r"|(?:information|content) provided|provided (?:information|content))")
_SOURCE_ZH = r"(?:知识库|上下文|文档|段落|片段|文段|来源|(?:参考)?(?:资料|材料)|检索结果|文中|原文|提供的(?:内容|信息))"
_CLAUSE = r"(?:^|[.!?;:,。！？；：，、]\s*)"  # a clause starts here
# what follows a Chinese verb of not finding when its object is the answer itself, not "用户时"
_ANSWER_ZH = r"(?=相关|任何|有关|答案|信息|资料|内容|记录|依据|这|该|此|[。！？，；：,.!?;:]|$)"
# I/we cannot: "can't", "could not", "didn't", "am unable to", "'m not able to", "won't be able to"
_UNABLE_EN = (r"(?: do not| don't| did not| didn't| cannot| can't| can not| could not| couldn't| won't be able to"
              r"| will not be able to|(?:'m| am|'re| are| was| were)? (?:unable|not able) to| wasn't able to| weren't able to)")
# 我 / 我们 cannot, not found, do not know; an apology speaks for 我 ("抱歉无法回答")
_SPEAKER_ZH = r"(?:我们?|抱歉|对不起)(?:暂时|目前|还|也|实在)?"
# where the speaker looked, between the negation and the verb: 我无法根据提供的上下文回答, 未能在文档中找到
_WHERE_ZH = r"(?:(?:根据|从|在|于|基于|依据|通过|按照|凭借?|结合)[^,.!?;:。、]{0,24}?)?"
_NOT_ZH = r"(?:没有?|未能?|没能|并未|并没有|均未|都没有|无法|不能|没法|没有办法)"  # ... found: 没有找到, 未能查到
_UNABLE_ZH = r"(?:无法|不能|没法|没有办法|未能|没能)"  # ... answer, determine: 无法回答, 没能确定
_FOUND_ZH = rf"(?:{_NOT_ZH}{_WHERE_ZH}(?:(?:查|找|检索|搜索|搜)到|发现)|(?:查|找|搜)不到)"
# what one is unable to do, as "answer|determine|find|tell|locate|provide an answer" (not "provide refunds")
_TELL_ZH = (r"(?:回答|作答|解答|答复|确定|判断|找到|查到|告知|(?:提供|给出)[^,.!?;:。、]{0,6}?(?:答案|回答|信息|资料|细节|详情|帮助)"
            r"|(?:帮到|帮上|帮助)(?:您|你))")
_PROVIDE_EN = r"provide (?:[\w']+ ){0,2}?(?:answers?|information|details|help|assistance)"
_REFUSAL_PATTERNS = [
    # English: a source lacks it. "not found in the documents", "cannot be found in the context",
    # "the knowledge base has no information", "none of the passages mention it"
    r"(?:\bnot|\bcannot|n't) (?:be )?(?:found|available|mentioned|covered|present|provided|included|given|stated|specified) in "
    rf"(?:the |any of the |my )?(?:provided |given |retrieved |available )?{_SOURCE_EN}",
    rf"(?:\bnot|n't) in the (?:provided |given |retrieved )?{_SOURCE_EN}",
    # "This question cannot be answered based on the context.", "It is impossible to tell from the context."
    r"(?:\b(?:cannot|can't|can not|could not|couldn't) be (?:answered|determined|found|inferred|told)"
    r"|\b(?:impossible|not possible) to (?:tell|determine|say|know|answer|infer))"
    rf" (?:from|based on|with|using|in|according to) (?:the |any of the |my )?(?:provided |given |retrieved |available )?"
    rf"{_SOURCE_EN}(?=\s*[.!?;:,]|$| (?:alone|provided|given|available|retrieved|above|whether|what|which|who|when|how|why)\b)",
    rf"\b{_SOURCE_EN} (?:does|do)(?: not|n't) (?:contain|mention|say|cover|provide|include|specify|state|address|discuss|give)\b",
    rf"\b{_SOURCE_EN} (?:has|have|contains?|includes?|holds?|gives?|provides?|offers?|makes?|says?|mentions?) "
    r"(?:no (?:relevant |such |specific |further |additional )?(?:information|mentions?|answers?|details?|data|evidence|records?"
    r"|references?|content)\b|nothing\b(?! to do\b))",
    rf"\b(?:none|neither) of (?:the |these |those |my )?(?:provided |given |retrieved |available )?{_SOURCE_EN} "
    r"(?:mentions?|contains?|says?|covers?|provides?|includes?|specif(?:y|ies)|states?|address(?:es)?|discuss(?:es)?|gives?)\b",
    # English: I/we cannot. "I can't answer", "I didn't find", "we won't be able to tell", "I can't help with
    # this", "I haven't found", "I'm not sure"
    rf"\b(?:i|we){_UNABLE_EN} (?:know|find|answer|determine|tell|say|locate|{_PROVIDE_EN})\b",
    rf"\b(?:i|we){_UNABLE_EN} help(?: you)? with (?:this|that|it|your question)\b",
    r"\b(?:i|we) (?:have not|haven't|had not|hadn't) (?:been able to (?:find|locate|determine|answer)|found|located)\b",
    r"\b(?:i|we)(?:'m| am|'re| are) not (?:sure|certain)\b",
    r"\b(?:i|we) (?:do not|don't) have (?:enough |sufficient |any |the |that |this |such )?(?:relevant )?"
    r"(?:information|data|details|context)\b",
    r"\b(?:there is|there's|there are|i have|i found|we have|i could find|i can find) no (?:relevant |such |specific )?"
    r"(?:information|documents?|context|evidence|data|details|mention|records?)\b",
    r"\b(?:not enough|insufficient) (?:relevant )?(?:information|context)\b",
    r"\b(?:the|this|that|such) information is not (?:available|provided|given|mentioned|included|present)\b",
    # Chinese: a source lacks it. 知识库里没有 / 文档未提及 / 资料中并无相关记载 / 知识库中查不到 / 未在知识库中找到 /
    # 没有任何段落提到; 不 only before a verb of containing: "文档不允许空密码" states a rule, it does not refuse
    rf"{_SOURCE_ZH}(?:里|中|内)?(?:(?:没有|未|并未|并没有|均未|都没有|都未)(?:包含|提及|提到|涉及|记载|说明|相关)?"
    r"|不(?:包含|提及|提到|涉及|记载)|(?:并|暂)?无(?:相关|任何|有关|此|该|这|答案|信息|记录|内容|资料|提及|记载|说明)"
    r"|(?:查|找|搜)不到)",
    rf"未在{_SOURCE_ZH}(?:里|中|内)?(?:找到|查到|检索到|发现)",
    # 答案不在提供的段落中 ("not in the provided passages"); 这个问题无法根据上下文回答, 无法从上下文中得知,
    # 上下文中无从得知 ("cannot be answered based on the context"), before the answer or closing the clause:
    # "系统无法从上下文中确定用户" states what a system does
    rf"不在(?:所?提供的|给出的|检索到的)?{_SOURCE_ZH}(?:里|中|内|之中)",
    rf"(?:{_UNABLE_ZH}(?:根据|从|在|于|基于|依据|通过|按照|凭借?|结合)(?:所?提供的|给出的|检索到的|现有的)?{_SOURCE_ZH}"
    rf"|{_SOURCE_ZH}(?:里|中|内)?无从)(?:里|中|内)?(?:来)?"
    rf"(?:得知|知道|知晓|推断|看出|判断|确定|回答|作答|解答|找到|查到){_ANSWER_ZH}",
    rf"没有(?:任何|一个|一篇|一段|一处)?(?:所?提供的|给出的|检索到的)?{_SOURCE_ZH}(?:提到|提及|涉及|包含|记载|说明|谈到)",
    # Chinese: 我 / 我们 cannot, as "I"/"we" above, whatever the object: 我没有找到建立年份 / 我找不到 /
    # 我无法确定建立年份 / 我无法根据上下文回答 / 我们无法提供该信息 / 我不清楚 / 我不确定 / 无法帮到您
    rf"{_SPEAKER_ZH}{_WHERE_ZH}{_FOUND_ZH}",
    rf"{_SPEAKER_ZH}{_WHERE_ZH}{_UNABLE_ZH}{_WHERE_ZH}(?:知道|得知|告诉|说|定位|{_TELL_ZH})",
    rf"{_SPEAKER_ZH}(?:并)?不(?:太)?(?:知道|清楚|了解|确定)",
    # Chinese: no record, as "there is no information" above. 没有…记录 only as "no relevant records" or closing
    # the clause: "系统没有记录失败次数" states a fact; 没有关于X的信息 ("there is no information about X") only
    # opening a clause, where no subject ("系统没有关于用户的记录") owns it
    rf"(?:没有?|未能?|并未|均未)(?:查|找|检索)到{_ANSWER_ZH}", rf"(?:查|找)不到{_ANSWER_ZH}",
    r"没有(?:相关|足够|这方面)(?:的)?(?:信息|资料|依据|记录|内容)", r"没有(?:信息|资料|依据|记录)(?=[。！？，；,.!?;]|$)",
    rf"{_CLAUSE}(?:并|还|目前|暂时)?没有(?:关于|有关)[^,.!?;:。、]{{1,24}}?的(?:任何)?(?:相关)?"
    r"(?:信息|资料|记录|内容)",
    r"(?:暂|并)?无(?:相关|有关|此|该|这方面)(?:的)?(?:信息|资料|记录|内容|答案|依据)",
    r"查无(?:此|该|相关|任何)?(?:的)?(?:信息|资料|记录|内容|答案|结果|数据)",
    r"暂无(?:可用)?(?:的)?(?:信息|资料|记录|答案|内容|数据)",
]
# Subject-dropped: the speaker's, at the start of a clause. "Cannot answer.", "Could not find the founding
# year.", "Not found.", "No relevant documents were found."; 无法回答。, 没有找到建立年份。, 查不到。, 不知道。
_BARE_REFUSAL_PATTERNS = [
    rf"{_CLAUSE}(?:sorry,?\s*)?(?:cannot|can't|can not|could not|couldn't|did not|didn't|(?:was )?unable to|not able to)"
    rf" (?:answer|determine|find|tell|locate|{_PROVIDE_EN})\b",
    # "Unknown." ends its clause; "Unknown users are rejected." states a rule
    rf"{_CLAUSE}(?:sorry,?\s*)?(?:i don't know\b|unknown(?=\s*[.!?;:,。！？；：，]|$))",
    rf"{_CLAUSE}(?:sorry,?\s*)?(?:(?:the )?(?:answer|information) (?:was |is )?)?not found(?=\s*[.!?;:,]|$)",
    rf"{_CLAUSE}(?:sorry,?\s*)?(?:(?:the )?(?:answer|information) (?:was |is )?)?not mentioned(?=\s*[.!?]?$)",  # "Not mentioned."
    rf"{_CLAUSE}(?:sorry,?\s*)?no (?:relevant |such |matching |related |specific )?(?:information|documents?|passages?"
    r"|results?|records?|answers?|matches|data|details|sources?|mentions?)(?: (?:was|were|could be|can be|has been|have been))? found\b",
    # "No information about that.", not "No information is leaked to the client."
    rf"{_CLAUSE}(?:sorry,?\s*)?no (?:relevant |such )?information\b(?! (?:is|was|are|were|gets?|will)\b)",
    # not before 的: "无法确定的用户会被锁定", "没有找到的用户会被删除" name users, they refuse nothing
    rf"{_CLAUSE}(?:暂时|目前|还|仍)?{_WHERE_ZH}{_FOUND_ZH}(?!的)",
    rf"{_CLAUSE}(?:暂时|目前)?{_WHERE_ZH}{_UNABLE_ZH}{_WHERE_ZH}{_TELL_ZH}(?!的)",
    rf"{_CLAUSE}不(?:太)?(?:知道|清楚){_ANSWER_ZH}",  # "不知道。", not "不知道密码的用户"
    r"(?:^|[。！？；：，、.!?;:,]\s*)(?:答案|信息)?(?:并)?(?:未|没有)(?:提及|提到)(?=\s*[。！？.!?]?$)",  # 未提及。
    rf"{_CLAUSE}无从(?:得知|知晓|判断|确定)(?!的)",  # 无从得知。
]
_REFUSAL_RE = re.compile("|".join(f"(?:{p})" for p in _REFUSAL_PATTERNS))
_BARE_REFUSAL_RE = re.compile("|".join(f"(?:{p})" for p in _BARE_REFUSAL_PATTERNS))
# A refusal phrase inside a condition or a reason refuses nothing: "If the context has no token, the API
# returns 401", "...because the context does not contain a token", 如果上下文中没有令牌, 由于…. In Chinese the
# condition may close the clause instead: 未找到用户时接口返回 404, 上下文中没有用户信息时, 没有找到的话; not
# 时长, 时间, 何时, 登录时的, and after a verb whose object may hold a "when" (`_ASKS_ZH_RE`) only as the
# clause's end: "我们无法确定用户身份时，要求验证" states a rule, "我不知道登录失败时会怎样" refuses.
_IF_RE = re.compile(r"\b(?:if|when|whenever|unless|once)\b|如果|假如|倘若|若(?!干)|要是|一旦|只要|除非")
_BECAUSE_RE = re.compile(r"\b(?:because|since)\b|因为|由于")
_ASKS_ZH_RE = re.compile(r"(?:提及|提到|谈到|涉及|记载|说明|包含|回答|作答|解答|答复|确定|判断|知道|得知|清楚|了解|告诉|告知"
                         r"|说|提供|给出)$")
_WHEN_ZH_RE = re.compile(r"(?<![何同及实按暂临准当届定超计随小])时(?![长间刻区效候的段代])|的时候|的话|的情况下")
_MARKS = ".!?;:,。！？；：，、 "
_MARK_RE = re.compile(r"[.!?;:,。！？；：，、]")
# What turns a refusal into an answer after all: a contrast ("..., but it locks for 30 minutes") or,
# inside one sentence, a number (a figure is a claim to check; a refusal states none of its own), in digits or
# in Chinese numerals alike (成立于一九九九年 states a year as 成立于1999年 does)
_CONTRAST_RE = re.compile(r"\b(?:but|however|although|though|yet)\b|但|不过|然而|可是")
_NUMBERS_RE = re.compile(r"[0-9]+(?:[.,][0-9]+)*")


def _numbers(text: str, quantities: bool) -> set[str]:
    """The numbers folded `text` writes: its digits ("1999", "3.5") and its Chinese numerals as the lexical
    judge reads them (一九九九年 "1999", 三十分钟 "30"; with `quantities`, only those that count something,
    not the 一 of 任何一个段落 or 一些: `numbers.zh_numbers`).

    >>> sorted(_numbers("成立于一九九九年，锁定 30 分钟", True)), _numbers("没有任何一个段落提到", True)
    (['1999', '30'], set())
    """
    return set(_NUMBERS_RE.findall(text)) | {value for _, _, value in zh_numbers(text, quantities)}


def _own_number(sentence: str, question: str) -> bool:
    """Whether `sentence` (folded) states a number the question does not: "I could not find the 2019
    revenue" repeats the year it was asked about and states nothing; "founded in 1999" does, and so does
    成立于一九九九年. Every numeral the question writes counts as asked (一九九九年 asks about 1999).

    >>> _own_number("i could not find the 2019 revenue.", "What was Zorb's revenue in 2019?"), _own_number("in 1999.", "")
    (False, True)
    >>> _own_number("没有找到一九九九年的收入。", "1999年的收入是多少？"), _own_number("成立于一九九九年。", "")
    (False, True)
    """
    asked = _numbers(_folded(question), quantities=False) if question else set()
    return bool(_numbers(sentence, quantities=True) - asked)
# ...but not a contrast right after an opening apology: "I'm sorry, but I don't have that information."
_APOLOGY_BUT_RE = re.compile(r"^(?:(?:i'm|i am|we're|we are) )?(?:very |so |really |很|非常)?(?:sorry|抱歉|对不起|不好意思)"
                             r",?\s*(?:but\b|但是?|不过)\s*")


def _folded(text: str) -> str:
    return unicodedata.normalize("NFKC", text).lower().replace("\u2019", "'").strip()


# A refusal's courtesy: a sentence beside a refusal that carries no claim. Such a sentence is built, clause
# by clause (cut at , ; : 、), only of these kinds, the same in both languages, and holds no number and
# no name (lexical judge's readings: a capitalised word inside the sentence, "please contact Ana Kel";
# a transliterated Chinese name, 请联系特朗普), so "建议联系管理员，账号会被锁定" (a second clause that
# states a fact) and "Please contact support at 555 0100" are claims:
#   apology           sorry (for the inconvenience) · unfortunately          抱歉 / 对不起 / 不好意思 / 遗憾
#   restated inability I couldn't be more helpful / can't help further        无法帮到您 / 未能提供更多帮助
#   thanks, hope      thank you (for your patience) · hope this helps        谢谢 / 感谢您的耐心 · 希望对您有帮助
#   pointer, request  please contact / consult / provide ... · could you ...  建议 / 请 / 您可以 联系 / 咨询 / 提供 ...
#   offer             if you can provide more details · I can try to help    如果您能提供更多细节 · 我可以尝试帮助
#                     let me know if ... · anything else I can help with     如有其他问题 · 欢迎随时提问
#   sources' scope    the documents only cover login errors                   文档只涉及登录错误
# A clause may open with a connective (and, but, so; 但, 不过, 另外). The scope kind admits no verb
# after its own ("the documents only mention that it was founded in ..." states a fact).
_UNABLE_TAIL_EN = (r"(?:be (?:of )?(?:more |much |any |further )?(?:help|helpful|assistance)"
                   r"|(?:help|assist)(?: you)?(?: (?:further|more|here|with (?:this|that|it|your (?:question|request))))?"
                   r"|(?:provide|give|offer) (?:a |an |the |any |more |further )?(?:answer|information|details|help|assistance)"
                   r"|answer (?:this|that|it|your question)(?: (?:fully|precisely|accurately|definitively))?)"
                   r"(?: (?:based on|from|with|using|according to) (?:the |this |my )?"
                   r"(?:given |provided |available |retrieved |current )?"
                   r"(?:context|information|documents?|passages?|sources?|materials?|knowledge base|data))?")
_SCOPE_VERBS_EN = (r"(?:covers?|discuss(?:es)?|describes?|mentions?|address(?:es)?|talks? about|contains?|includes?"
                   r"|deals? with|focus(?:es)? on|relates? to|concerns?|refers? to)")
_COURTESY_CLAUSES = [
    # English
    r"(?:(?:i'm|i am|we're|we are) )?(?:very |so |really |truly |terribly )?(?:sorry|apologies|my apologies|i apologi[sz]e"
    r"|we apologi[sz]e)(?: (?:for|about) (?:the|any|this) (?:inconvenience|confusion|trouble))?",
    rf"(?:(?:i'm |i am |we're |we are )?(?:very |so |really )?sorry )?(?:that )?(?:i|we){_UNABLE_EN} {_UNABLE_TAIL_EN}",
    r"unfortunately|regrettably|alternatively|otherwise|in the meantime|meanwhile|again",
    r"(?:thank you|thanks)(?: (?:so|very) much)?(?: for (?:your|the) (?:question|patience|understanding))?",
    r"(?:i |we )?hope (?:this|that|it) (?:helps|is helpful)(?: (?:a bit|somewhat|anyway))?",
    r"(?:please |you (?:may|might|could|can) (?:want to |wish to )?|i (?:would )?(?:suggest|recommend) (?:that you )?)"
    r"(?:contact(?:ing)?|consult(?:ing)?|ask(?:ing)?|check(?:ing)?|refer(?:ring)? to|reach(?:ing)? out to|look(?:ing)? at"
    r"|provid(?:e|ing)|rephras(?:e|ing)|clarify(?:ing)?|specify(?:ing)?|shar(?:e|ing)|try(?:ing)?)\b[^,;:]*",
    r"(?:could|can|would) you (?:please )?(?:provide|clarify|specify|rephrase|share|give|tell me)\b[^,;:]*",
    r"(?:is there )?anything else (?:i|we) can (?:help|assist|do)(?: you)?(?: with)?",
    r"(?:please )?(?:let me know|feel free to (?:ask|reach out|let me know))"
    r"(?: (?:another|other|more|further|any other|any further|a new) questions?| again)?(?: if [^,;:]*)?",
    r"if you (?:can|could|would|have|had|provide|share|give|tell|clarify|rephrase|specify|know|want|wish|need|like"
    r"|'d like|upload|point)\b[^,;:]*",
    r"(?:i|we) (?:can|could|will|'ll|may|might) (?:try (?:to |and )|gladly |then |happily )?"
    r"(?:help|assist|look (?:into|for) it|take a look|try again|answer(?: it| that| your question)?)"
    r"(?: (?:further|more|you|again|then))*",
    r"(?:i'd|i would|we'd|we would|i'm|i am|we're|we are) (?:be )?(?:happy|glad|more than happy|willing) to"
    r" (?:help|assist|answer|look)\b[^,;:]*",
    r"(?:happy|glad) to help(?: further| more| with [^,;:]*)?",
    rf"(?:the |these |my )?(?:provided |given |retrieved |available )?{_SOURCE_EN} (?:only|mainly|mostly|just) "
    rf"{_SCOPE_VERBS_EN}\b(?![^,;:]*\b(?:that|which|who|whom|is|are|was|were|has|have|had|will|would|can|could)\b)[^,;:]*",
    # Chinese
    r"(?:我们?)?(?:非常|很|十分|实在|真的)?(?:抱歉|对不起|不好意思|遗憾)(?:的是)?",
    r"(?:我们?)?(?:非常|很|十分|实在|真的)?(?:抱歉|对不起|不好意思)?(?:我们?)?(?:暂时|目前)?(?:无法|不能|没能|未能|没法|没有办法)"
    r"(?:为您|给您|帮您)?(?:帮到|帮上|帮助|提供(?:更多|进一步的?|相关的?|任何)?(?:帮助|信息|答案|解答)|解答|回答|作答|给出(?:答案|回答))"
    r"(?:您|你)?(?:的忙)?(?:这个问题|该问题|此问题|您的问题)?",
    r"(?:谢谢|感谢)(?:您的?)?(?:提问|理解|耐心|支持)?", r"(?:希望|请|敬请)(?:您)?(?:能)?(?:理解|谅解|见谅)",
    r"希望(?:以上|这些?|我的回答)?(?:内容|信息|回答)?(?:对您有(?:所)?帮助|能(?:对您)?有(?:所)?帮助|能帮到您)",
    r"(?:建议|请|您可以|可以|不妨)(?:您)?(?:先)?(?:联系|咨询|查阅|查看|参考|询问|提供|补充|说明|换个|重新|核实|确认|告诉我|描述)[^,;:]*",
    r"如(?:果)?(?:您|你)?(?:能|可以|愿意|方便)?(?:提供|补充|说明|告诉我|给出|描述)[^,;:]*",
    r"如需(?:进一步的?|更多)?(?:帮助|信息|了解|协助)",
    r"如(?:果)?(?:您|你)?(?:还)?有(?:其他|更多|任何|别的)?(?:问题|疑问|需要|需求)",
    r"(?:我|我们)?(?:很|非常)?(?:乐意|愿意|可以|会)(?:再|继续|进一步)?(?:尝试|试着)?(?:为您|帮您|给您)?"
    r"(?:解答|帮助|帮忙|提供帮助|回答|查找|协助)",
    r"(?:欢迎|请)(?:您)?(?:随时)?(?:继续)?(?:提问|咨询|联系|告诉我|补充)",
    rf"(?:所?提供的|给出的|检索到的|现有的)?{_SOURCE_ZH}(?:里|中|内)?(?:只|仅|仅仅|主要|只是)"
    r"(?:涉及|包含|介绍|提到|提及|讨论|说明|记载|覆盖|描述|谈到|关于|包括)了?(?![^,;:]*(?:会|是|将|被|可以|能|需要|为|由))[^,;:]*",
]
_COURTESY_CLAUSE_RE = re.compile("|".join(f"(?:{p})" for p in _COURTESY_CLAUSES))
# The courtesies that say nothing whatever answer they close ("Hope this helps!", 如有其他问题，欢迎随时提问):
# those of `_COURTESY_CLAUSES` without an open tail. A pointer or request with one ("Please check that the
# token has not expired", "If you have admin rights you can reset it", 请查看登录页面的错误列表) carries
# nothing beside a refusal, but in an answer it is advice a context must back, so it is no pleasantry.
_OPEN_TAIL = "[^,;:]*"
_PLEASANTRY_CLAUSES = [p for p in _COURTESY_CLAUSES if _OPEN_TAIL not in p] + [
    r"(?:please )?(?:let me know|feel free to (?:ask|reach out|let me know))(?: if you have (?:any )?(?:other |more "
    r"|further |additional )?questions?)?",
    r"if you have (?:any )?(?:other |more |further |additional )?questions?",
]
_PLEASANTRY_CLAUSE_RE = re.compile("|".join(f"(?:{p})" for p in _PLEASANTRY_CLAUSES))
_CONNECTIVE_RE = re.compile(r"(?:(?:and|but|so|or|also|then) |(?:但是?|不过|所以|因此|另外|此外|同时|那么|或者))")
_CLAUSE_CUT_RE = re.compile(r"[,;:、]")


def _conditional(sentence: str, m: re.Match, bare: bool) -> bool:
    """Whether a refusal phrase is part of a condition or a reason ("if the context has no token",
    未找到用户时): `_IF_RE` or `_BECAUSE_RE` before it in its clause, or `_WHEN_ZH_RE` after it, closing
    the clause or after a phrase that does not end in a verb of telling (`_ASKS_ZH_RE`). A
    subject-dropped phrase is also a consequence after a condition in an earlier clause ("If the
    token expires, cannot determine the user", 令牌过期时，无法确定用户)."""
    head = sentence[:m.start() + len(m.group()) - len(m.group().lstrip(_MARKS))]
    end = _MARK_RE.search(sentence, m.end())
    tail = sentence[m.end():end.start() if end else len(sentence)]
    clause_head = _MARK_RE.split(head)[-1]
    if _IF_RE.search(clause_head) or _BECAUSE_RE.search(clause_head):
        return True
    when = _WHEN_ZH_RE.search(tail)
    if when and (not _ASKS_ZH_RE.search(m.group()) or when.end() == len(tail.rstrip())):
        return True
    return bare and bool(_IF_RE.search(head) or re.search(r"时,|的话", head))


def _refuses(sentence: str) -> bool:
    """A folded sentence holds a refusal phrase outside any condition, with no contrast after the first."""
    found = [m for regex, bare in ((_REFUSAL_RE, False), (_BARE_REFUSAL_RE, True))
             for m in regex.finditer(sentence) if not _conditional(sentence, m, bare)]
    first = min(found, key=lambda m: m.start(), default=None)
    return first is not None and not _CONTRAST_RE.search(sentence, first.end())


def is_courtesy(sentence: str) -> bool:
    """Whether a sentence only surrounds a refusal and carries no claim: every clause of it is an
    apology, a restated inability, thanks, a pointer or request, an offer of help or the sources'
    scope (`_COURTESY_CLAUSES`, both languages), and it holds no number and no name (`lexical.names_in`).

    >>> is_courtesy("Sorry."), is_courtesy("建议联系管理员确认。"), is_courtesy("建议联系管理员，账号会被锁定。")
    (True, True, False)
    >>> is_courtesy("If you can provide more details, I can try to help."), is_courtesy("很抱歉无法帮到您。")
    (True, True)
    >>> is_courtesy("Please contact support at 555 0100."), is_courtesy("The account locks.")
    (False, False)
    >>> is_courtesy("Please contact Ana Kel."), is_courtesy("请联系特朗普。"), is_courtesy("文档只涉及登录错误。")
    (False, False, True)
    """
    return _only_clauses(sentence, _COURTESY_CLAUSE_RE)


def is_pleasantry(sentence: str) -> bool:
    """Whether a sentence is a courtesy that carries no claim in any answer (`_PLEASANTRY_CLAUSES`): thanks,
    an apology, an offer of help, "hope this helps", an invitation to ask more; not a pointer or request
    with a tail of its own, which `is_courtesy` excuses beside a refusal only.

    >>> is_pleasantry("Hope this helps!"), is_pleasantry("如有其他问题，欢迎随时提问。"), is_pleasantry("Let me know if you have any other questions.")
    (True, True, True)
    >>> is_pleasantry("Please check that the token has not expired."), is_pleasantry("请查看登录页面的红色错误列表。")
    (False, False)
    >>> is_pleasantry("If you have admin rights you can reset the password.")
    False
    """
    return _only_clauses(sentence, _PLEASANTRY_CLAUSE_RE)


def _only_clauses(sentence: str, clause_re: re.Pattern) -> bool:
    """Whether every clause of `sentence` is one `clause_re` matches whole, and it holds no number and no name."""
    s = _folded(sentence)
    if not s or _numbers(s, quantities=True) or names_in(unicodedata.normalize("NFKC", sentence).replace("\u2019", "'")):
        return False
    clauses = [c.strip(" \t\n.!?。…") for c in _CLAUSE_CUT_RE.split(s)]
    clauses = [_CONNECTIVE_RE.sub("", c, count=1) if _CONNECTIVE_RE.match(c) else c for c in clauses if c]
    return bool(clauses) and all(clause_re.fullmatch(c.strip()) for c in clauses)


def is_refusal(text: str, question: str = "") -> bool:
    """Whether an answer declines to answer ("not found in the knowledge base"), Chinese or English.

    The answer as a whole must decline (the chapter's 拒答: "the right behaviour is to say 'not
    found'"): every sentence is a refusal or carries no claim (`is_courtesy`: an apology, a restated
    inability, thanks, "please contact support", an offer of help, "the documents only cover X"; no
    number, no name), and at least one is a refusal. A sentence refuses when it names a
    source that lacks the answer or a speaker who cannot give it (or, the subject dropped, starts a
    clause with "could not find", 没有找到), outside a condition or a reason ("if the context has no
    token, ...", 未找到用户时...), and no contrast after that goes on to answer anyway
    ("知识库里没有相关信息，但账号会锁定 30 分钟" answers), and it holds no number `question` does
    not, in digits or Chinese numerals (as in `declines_only`: "知识库里没有相关信息，账号会锁定 30 分钟"
    and "...锁定三十分钟" answer too, while "I could not find the 2019 revenue" asked about 2019 refuses). One sentence that
    states something else makes the answer no refusal: "The company was founded by Ana Kel in
    2010. The documents do not mention anything else." asserts a founder, and a phrase match
    anywhere must not excuse that claim from citing (`lewisrag/eval/evaluator.py`). An answer that
    refuses and then points to whom to ask still refuses. An answer with no words (`has_no_words`: empty,
    whitespace, citation markers or punctuation only) declines nothing: it is no refusal.

    >>> is_refusal("I could not find this in the knowledge base."), is_refusal("知识库里没有相关信息。")
    (True, True)
    >>> is_refusal("No relevant documents were found."), is_refusal("我无法确定凯特洛研究所的建立年份。")
    (True, True)
    >>> is_refusal("没有找到凯特洛研究所的建立年份。"), is_refusal("未找到用户时接口返回 404。")
    (True, False)
    >>> is_refusal("If the context has no token, the API returns 401."), is_refusal("如果上下文中没有令牌，接口返回 401。")
    (False, False)
    >>> is_refusal("The API returns 422."), is_refusal("接口返回 422。"), is_refusal("接口文档不允许空密码。")
    (False, False, False)
    >>> is_refusal("系统没有记录失败次数。"), is_refusal("没有相关记录。"), is_refusal("文档里没有记录。")
    (False, True, True)
    >>> is_refusal("The server cannot determine the user."), is_refusal("系统无法确定用户时锁定账号。")
    (False, False)
    >>> is_refusal("The context doesn't contain this."), is_refusal("文档未提及，但账号会锁定 30 分钟。")
    (True, False)
    >>> is_refusal("公司由安娜于 2010 年创立。文档中没有更多信息。"), is_refusal("抱歉，知识库里没有相关信息。建议联系管理员。")
    (False, True)
    >>> is_refusal("文档中没有提到这一点。很抱歉无法帮到您。"), is_refusal("The passages don't mention it. I'm not able to answer.")
    (True, True)
    >>> is_refusal("I don't know. The API returns 422."), is_refusal("文档未提及。建议联系管理员，账号会被锁定。")
    (False, False)
    >>> is_refusal(""), is_refusal("  [1] ")
    (False, False)
    """
    if has_no_words(text):
        return False
    # each sentence as written beside its folded form: `is_courtesy` reads names by their capitals ("Please
    # contact Ana Kel" is a claim), which the folded, lowercased sentence had lost
    sentences = [(st.text, _folded(st.text)) for st in split_sentences(text)]
    sentences = [(raw, s) for raw, s in sentences if s]
    if not sentences:  # nothing but markers or code: the phrase match on the whole text decides
        return _refuses(_folded(text))
    # a number inside a sentence makes it an answer, as in `declines_only`: "Zorb was founded in 1999, and
    # the documents say nothing else" states a year; one the question asked about ("the 2019 revenue") does not
    refusing = [_refuses(s) and not _own_number(s, question) for _, s in sentences]
    return any(refusing) and all(r or is_courtesy(raw) for r, (raw, _) in zip(refusing, sentences))


def declines_only(sentence: str, question: str = "") -> bool:
    """Whether a sentence only declines, so that it need not cite: a refusal (`is_refusal`) with no
    number of its own (one `question` states is none) and no contrast in it (an opening "I'm sorry,
    but" contrasts nothing). "未找到用户时接口返回 404"
    and "文档未提及，但账号锁定 30 分钟" state facts, and a claim beside a refusal phrase must still cite.

    >>> declines_only("锁定时长文档未提及。"), declines_only("I could not find the lockout time.")
    (True, True)
    >>> declines_only("The documents do not mention it, but the account locks for 30 minutes.")
    False
    """
    s = _folded(sentence)
    return (bool(s) and _refuses(s) and not _own_number(s, question)
            and not _CONTRAST_RE.search(_APOLOGY_BUT_RE.sub("", s, count=1)))


def asserts_nothing(sentence: str, question: str = "") -> bool:
    """Whether a sentence asserts nothing for a context to support, in any answer: it only declines
    (`declines_only`) or is a pleasantry (`is_pleasantry`). Such a sentence need not cite and is no
    statement to judge (faithfulness, the claim diagnostics): "Hope this helps!" after a supported answer
    made it half unfaithful and half uncited. A pointer or request ("Please check that the token has not
    expired") still must, outside a refusal.

    >>> asserts_nothing("Hope this helps!"), asserts_nothing("文档未提及锁定时长。"), asserts_nothing("It locks.")
    (True, True, False)
    >>> asserts_nothing("Please check that the token has not expired.")
    False
    """
    return declines_only(sentence, question) or is_pleasantry(sentence)


def has_no_words(text: str) -> bool:
    """Whether an answer has no words: empty, whitespace, citation markers or punctuation only. It asserts
    nothing (no distortion) and declines nothing (no refusal): `diagnose` blames it on the answer not given.

    >>> has_no_words(" "), has_no_words("[1]"), has_no_words("……"), has_no_words("No.")
    (True, True, True, False)
    """
    return not any(c.isalnum() for c in strip_citations(text))
