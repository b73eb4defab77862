"""`LexicalJudge`: a deterministic token-support baseline, for English and Chinese alike."""

from __future__ import annotations

import itertools
import re
import unicodedata

# the citation checker's reading of numbers, which this judge shares: the two agree on what a number is
from lewisrag.eval.citations import list_commas, unattributed
from lewisrag.eval.numbers import NUMBER_RE, number_value
from lewisrag.eval.numbers import scaled_numbers as _scaled_numbers
from lewisrag.eval.numbers import zh_numbers as _zh_numbers
from lewisrag.eval.judges.base import Verdict, digest

# kana, CJK ideographs (the extensions past U+20000 too: rare names are written in them), Hangul, and
# 々, 〆, 〇 (〇 is the zero of 二〇一六年: outside the class it cut the year's run in two)
_CJK_CHARS = r"\u3005-\u3007\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\U00020000-\U0002fa1f"
_CJK_CLASS = f"[{_CJK_CHARS}]"
_CJK = re.compile(_CJK_CLASS)
# a letter of any alphabet ("Jürgen", "Ólafsson", "Привет"; [a-z] cut "Müller" into "m" and "ller"); a CJK
# character is read on its own instead
_LETTER = rf"[^\W\d_{_CJK_CHARS}]"
# A number is whole and read by its value ("1,000" is "1000"; "5.3" is not "3.5"; "5.00" is "5"; "-12" is
# not "12"): the citation checker's reading (`numbers.NUMBER_RE`, `numbers.number_value`), so the two
# agree on what a number is: Chinese never groups digits with "，", read as "、" before NFKC makes it ","
# (`_nfkc`, `citations.list_commas`): "401，403" is two. Digits a letter follows are a word ("4k", "3d").
_NUMBER_RE = rf"(?:{NUMBER_RE})(?![0-9]|{_LETTER})"
_NUMBER = re.compile(_NUMBER_RE)
_WORD = re.compile(_NUMBER_RE + rf"|(?:{_LETTER}|[0-9])+(?:[.'](?:{_LETTER}|[0-9])+)*")
_CASED_WORD = re.compile(_WORD.pattern, re.IGNORECASE)  # the same words, read before lowercasing
_SENTENCE_END = frozenset(".!?。！？;；:：\n")  # the word after one is capitalised whatever it is ("According to")
# CJK characters and the digits written against them ("于2016年成为"): a measure word's support is read
# with its number ("2016年" in the premise covers 年), as a character's is with its neighbours
_CJK_DIGIT_RUN = re.compile(rf"(?:{_CJK_CLASS}|[0-9])+")
# whitespace, and the dots between a transliterated name's parts (安娜·凯尔; ・ is in the kana block), between
# two CJK characters: a line break inside a word joins it, and a name read in two pieces lost its context
_NAME_DOTS = "·‧•∙⋅・"
_CJK_GAP = re.compile(rf"(?<={_CJK_CLASS})[\s{_NAME_DOTS}]+(?={_CJK_CLASS})")
# whitespace between a number and the CJK character after it: mixed text spaces numbers off ("成立于 1999 年",
# "1,290 万"), and a statement "1999年" then found no "9年" in the premise to cover its 年 (EM reads the two
# alike). Not after a code's digits ("E7 码": no number, no measure word), nor before a number: a character
# standing alone there is read alone, as before
_NUMBER_CJK_GAP = re.compile(rf"(?<![0-9.,]|{_LETTER})([0-9](?:[0-9.,]*[0-9])?)\s+(?={_CJK_CLASS})")
# what may stand between a name and its neighbours inside a sentence: quotes, a colon, a comma, spaces
# ("女王是：范凌", "由总统“戴菲”领导"); not a stop, a letter or a digit
_IN_SENTENCE_GAP = r"[^\w.!?。\n]*"
_IN_SENTENCE_GAP_RE = re.compile(_IN_SENTENCE_GAP)
# Function words carry no claim; leaving them out keeps "the", "是", "的" from propping up a score.
_STOP_EN = frozenset(
    "a an the is are was were be been being of to in on at by for with and or but not no it its this that these "
    "those as from into than then so if do does did has have had will would can could should may might must "
    "there their they he she we you i".split()
)
# The function words that are also given names ("Will Tamm", "May Ruus", the Turkish "Can Ruus"): only
# these are read as a name, and only right before a capitalised word. Articles, prepositions and the other
# auxiliaries are not ("a member of The Beatles", "called Do Not Disturb mode"), nor a month before a
# number ("in May 2020").
_GIVEN_FUNCTION_WORDS = frozenset({"will", "may", "can"})
_STOP_ZH_CHARS = "的了是在和与及或也就都而把被对向从之其这那个一有为以"
_STOP_ZH = frozenset(_STOP_ZH_CHARS)
# English words that open a sentence without naming anything: every sentence's first word is capitalised,
# so there the writing cannot tell "However" from "Tamm". The closed classes (with _STOP_EN) are finite
# lists; the discourse markers are those answers open with ("According to [1]", "Overall", "Answer:"),
# and a sentence adverb set off by a comma ("Notably,") needs no entry (`_ordinary`). Any other
# capitalised first word the premise lacks reads as a name, unless the statement also writes it in small
# letters. They stay content units: only the name rule reads this list.
_OPENERS = frozenset(
    # determiners, quantifiers, numerals, pronouns and question words beyond _STOP_EN
    "all any both each every either neither some many most much several few other another such "
    "one two three four five six seven eight nine ten first second third last none his her our your my "
    "nothing something everything anything nobody somebody everybody anybody everyone someone anyone "
    "what which who whom whose where when why how here "
    # prepositions and conjunctions beyond _STOP_EN
    "about after against along among around before behind below between beyond despite during except "
    "like near over per since through throughout under unlike until upon via within without "
    "although because though unless whereas while whether yet once nor "
    # discourse markers, answers' first words and the participles used as prepositions ("Based on")
    "according based given following regarding including using also however therefore thus hence moreover "
    "furthermore finally next then later still instead otherwise overall indeed meanwhile nevertheless "
    "nonetheless currently today now only just yes sure answer note let".split()
)


# Chinese has no capitals, so a name is read off its characters instead. A transliterated name (特朗普,
# 默克尔, 瓦尔多利亚) is written in a small fixed set of characters: those of the Xinhua News Agency's
# transliteration tables (新华社译名室《英语姓名译名手册》 and the other languages' 译音表; GB/T 17693 writes
# place names with the same ones), listed here row by row as the English table orders them (vowels, then
# b, p, d, t, g, k, v/w, f, z, ts, s/θ, ʒ/ʃ, ʤ/ʧ, h, m, n, l, r, j, gw; then the characters kept for
# women's names). These are the table's common characters, not all of it, written out without a
# printed copy to check them against: a character missing here reads as an ordinary one.
_TRANSLIT = frozenset(
    "阿埃伊奥乌尤艾安恩因昂翁厄欧" "巴贝比博布拜鲍班本宾邦伯" "帕佩皮波普派保潘彭平庞蓬珀" "达德迪多杜代道丹登丁当东"
    "塔泰蒂托图陶坦滕廷唐通特" "加盖吉戈古居高甘根金冈贡格" "卡凯基科库丘考坎肯康孔克" "瓦韦维沃武万文旺夫威伍怀温"
    "法费菲福富凡芬方丰弗" "扎泽齐佐祖宰藻赞曾津藏宗兹" "察策措楚柴曹灿岑钦仓聪茨" "萨塞西索苏休赛绍桑森辛松斯瑟"
    "热日若朱沙谢希肖舒夏尚申雄什" "贾杰乔久詹真章琼查切奇钱琴昌" "哈赫霍胡海豪汉亨欣杭洪" "马梅米莫穆缪迈毛曼门明芒蒙姆默"
    "纳内尼诺努纽奈瑙南嫩宁农" "拉莱利洛卢柳劳兰伦林朗隆尔勒" "雷里罗鲁留赖龙" "亚耶约扬延永" "瓜圭奎" "娅玛琳娜丽莉莎黛丝妮蕾萝娃芭"
)
# Some of the table's characters are everyday words' too: every character of 基本, 方法, 丰富, 比赛, 南方 is in
# it (114 of the 16,395 commoner words of jieba's dictionary, 0.8% of their uses). The marks below are the
# characters Chinese writes almost only in foreign names: those of the table that jieba's dictionary (349,046
# words with their parts of speech) puts in at least ten times as many names as other words, and in at most 8
# other words of frequency 50 or more. A stretch the premise lacks reads as a name by its letters alone when it
# is three table characters or more (of those 16,395 words, 平方米, 万平方米, 东西方, 哈哈哈 are), or two different
# marks (伊朗, 芬兰, 洛桑, 琼斯: of the dictionary's 32 such words of frequency 100 or more, all but 钦佩, 玛瑙 and
# 宁肯 are names). Two table characters with one mark are not enough: of the 127 such words, 罗马, 纽约 and 布朗
# are names but 明朗, 安宁, 安康, 斯文, 福利, 保姆, 尼龙, 森林 are not (a doubled mark, 赫赫, 哈哈, neither). Such a
# pair is a name where the statement writes it as one (`_marked_pair`: inside a longer stretch of table
# characters, or before a kind's character: 利丹语), and otherwise, like a pair without a mark (图德, 维加) and
# a Chinese person's name, only where the premise has a name in its place (below).
_TRANSLIT_MARKS = frozenset("阿埃伊奥尤艾翁厄欧贝鲍宾邦伯帕佩潘彭庞蓬珀迪杜丹丁塔泰蒂滕廷吉戈冈贡凯丘坎肯康韦沃旺伍菲福芬弗泽佐曾津兹楚曹灿岑钦茨萨苏绍桑森辛斯瑟朱希肖什贾杰乔詹琼昌哈赫霍亨杭洪梅穆缪曼姆尼诺努纽奈瑙宁莱洛卢柳兰伦朗尔勒罗鲁亚耶永圭奎娅玛琳娜莉莎黛妮娃")
# A Chinese person's name is a surname and one or two given characters (李明华), and the given characters can
# be any: no list marks them. The surnames are the hundred or so commonest (the Ministry of Public Security's
# yearly count of registered names, 《全国姓名报告》). Many words open with one (高度, 方面, 许多), so a stretch that does reads as
# a name only where the premise has a name in its place: the same characters around it, another name between.
_SURNAMES = frozenset(
    "王李张刘陈杨黄赵吴周徐孙马朱胡郭何林高罗郑梁谢宋唐许韩邓冯曹彭曾肖田董潘袁蔡蒋余于杜叶程魏苏吕丁任卢姚沈钟"
    "姜崔谭陆范汪廖石金韦贾夏付方邹熊白孟秦邱侯江尹薛闫段雷龙黎史陶贺毛郝顾龚邵万覃武钱戴严欧莫孔向常汤"
)

# the typographic apostrophes NFKC keeps: "Don’t" read as the words "Don" and "t" made "Don" a name
_APOSTROPHES = str.maketrans({"\u2019": "'", "\u02bc": "'"})


def _nfkc(text: str) -> str:
    """NFKC, with the typographic apostrophes (U+2019, U+02BC) written as "'" and the Chinese comma "，"
    as "、" (`list_commas`: NFKC's "," would join "401，403" into one number).

    >>> _nfkc("401，403，Ｄｏｎ’t")
    "401、403、Don't"
    """
    return unicodedata.normalize("NFKC", list_commas(text)).translate(_APOSTROPHES)


def _fold(text: str) -> str:
    """`_nfkc`, lowercased, with whitespace and name dots between CJK characters removed (`_CJK_GAP`), and
    whitespace between a number and a CJK character after it (`_NUMBER_CJK_GAP`).

    >>> _fold("成立于 1999 年，拥有 4,350 名会员，错误码 E7 对应 422")
    '成立于 1999年、拥有 4,350名会员、错误码 e7 对应 422'
    """
    return _NUMBER_CJK_GAP.sub(r"\1", _CJK_GAP.sub("", _nfkc(text).lower()))


def content_tokens(text: str) -> list[str]:
    """Lowercased NFKC words (letters of any alphabet) and numbers, plus single CJK characters, without function words.

    These are the units `LexicalJudge` counts (how it decides a CJK character is supported is its own rule).

    >>> content_tokens("The API returns HTTP 422.")
    ['api', 'returns', 'http', '422']
    >>> content_tokens("接口返回了 422")
    ['422', '接', '口', '返', '回']
    """
    s = _nfkc(text).lower()
    words = [w for _, w in _words(s) if w not in _STOP_EN]
    chars = [c for c in _CJK.findall(s) if c not in _STOP_ZH]
    return words + chars  # words first, then characters


# Chinese support is written by hand rather than with a word segmenter: jieba is unmaintained, and any
# segmenter's dictionary would miss the invented transliterated names the worlds are made of (塔姆, 瓦尔多利亚),
# which are exactly what a statement gets wrong. Instead a character counts only inside a substring of at
# least two characters that the premise holds contiguously: the classic dictionary-free CJK approach (Lucene's
# CJK analyzer indexes overlapping character bigrams for the same reason).
def _covered(run: str, premise: str) -> list[bool]:
    """Which characters of a hypothesis CJK run lie inside a substring (length >= 2) of it found in the premise;
    a run of one character is covered when that character occurs in the premise."""
    n = len(run)
    if n == 1:
        return [run in premise]
    cover = [False] * n
    end = 0  # run[i:end] is in the premise whenever end >= i + 2: a piece of the last match
    for i in range(n - 1):
        if end < i + 2:
            if run[i:i + 2] not in premise:
                continue
            end = i + 2
        while end < n and run[i:end + 1] in premise:  # the longest match from i covers every shorter one
            end += 1
        cover[i:end] = [True] * (end - i)
    return cover


def _words(text: str) -> list[tuple[int, str]]:
    """(start, word) of each Latin word or number of folded `text`, numbers by value (`number_value`)."""
    return [(m.start(), number_value(m[0]) if _NUMBER.fullmatch(m[0]) else m[0]) for m in _WORD.finditer(text)]


def _names(text: str) -> list[str]:
    """The Latin words of `text` (NFKC, not lowercased) written as names: capital and small letters
    mixed. A sentence's first word is capitalised whatever it is, so there a word whose only capital is
    its first letter is a name unless it reads as an ordinary word (`_ordinary`: "In", "However", or one
    the text writes in small letters elsewhere: "Login ... the login page").
    All capitals read as a term ("POST", "HTTP"), not a name; numbers are numbers ("1,890").
    Inside a sentence a capitalised function word that is also a given name is a name where it reads as
    a first name (`_first_name_at`: after a small word, before a capitalised one: "the head of state Will
    Tamm"); not "in May 2016", nor an article's or preposition's capital ("a member of The Beatles").

    >>> _names("According to the report, Tamm met the BUG team in Rome. Paris is big; McKay too. It's Ruus's.")
    ['Tamm', 'Rome', 'Paris', 'McKay', "Ruus's"]
    >>> _names("Login fails: the login page shows 422.")
    []
    >>> _names("The leader is Will Tamm since May 2016; The Lord Of The Rings.")
    ['Will', 'Tamm', 'Lord', 'Rings']
    """
    words = list(_CASED_WORD.finditer(text))
    small = {m[0] for m in words if m[0].islower()}
    names = []
    for k, m in enumerate(words):
        w = m[0]
        if w.islower() or w.isupper() or _NUMBER.fullmatch(w):  # "POST", "HTTP": terms, not names
            continue
        opens = _opens_sentence(text, m.start())
        if w.lower() in _STOP_EN:  # a function word: a name only as a first name inside a sentence
            before = words[k - 1][0] if k else ""
            if opens or not before or not before.islower() or not _first_name_at(text, words, k):
                continue
        elif opens and not any(c.isupper() for c in w[1:]) and _ordinary(text, m, small):
            continue
        names.append(w)
    return names


def _first_names(text: str, premise: str) -> list[str]:
    """The given-name function words (`_GIVEN_FUNCTION_WORDS`) that open a sentence of `text` (NFKC) as a
    first name: right before a name that the premise (NFKC) writes after another capitalised word ("Will
    Tamm leads ..." where the premise names "Bill Tamm"). An opening "Will" or "May" is read as the verb
    unless the premise so shows that a first name stands there.

    >>> _first_names("Will Tamm leads Valdoria.", "Bill Tamm leads Valdoria.")
    ['Will']
    >>> _first_names("Will Tamm lead Valdoria?", "Tamm leads Valdoria.")
    []
    """
    words = list(_CASED_WORD.finditer(text))
    held = list(_CASED_WORD.finditer(premise))
    before = {}  # each capitalised premise word: the capitalised words written right before it
    for a, b in itertools.pairwise(held):
        if a[0][:1].isupper() and b[0][:1].isupper() and premise[a.end():b.start()] == " ":
            before.setdefault(b[0], set()).add(a[0].lower())
    found = []
    for a, b in itertools.pairwise(words):
        w = a[0]
        if (_first_name_at(text, [a, b], 0) and _opens_sentence(text, a.start())
                and before.get(b[0], {w.lower()}) - {w.lower()}):
            found.append(w)
    return found


def _first_name_at(text: str, words: list[re.Match], k: int) -> bool:
    """Whether `words[k]` of `text` is written as a function word that is a first name: one of
    `_GIVEN_FUNCTION_WORDS` with its capital, right before a capitalised word that is no function word
    ("May Ruus"; not "May 2020", "May The", "Will," or "Do Not")."""
    w = words[k][0]
    if w.lower() not in _GIVEN_FUNCTION_WORDS or not w[:1].isupper() or w.isupper() or k + 1 >= len(words):
        return False
    nxt = words[k + 1]
    return (text[words[k].end():nxt.start()] == " " and nxt[0][:1].isupper()
            and not nxt[0].isupper() and nxt[0].lower() not in _STOP_EN)


def _ordinary(text: str, m: re.Match, small: set[str]) -> bool:
    """Whether the capitalised first word `m` of `text` reads as an ordinary word: a function word or
    opener, its clitic's host one ("It's", "Let's"), a negated auxiliary ("Don't"), a word in -ly set
    off by a comma ("Unfortunately,"; "Kelly, ..." is rarer than "Kelly is ..."), or one written in
    small letters (`small`) elsewhere in the text."""
    w = m[0].lower()
    host = w.split("'")[0]
    adverb = w.endswith("ly") and text[m.end():m.end() + 1] in (",", "、")  # "、": `_nfkc`'s "，"
    return w.endswith("n't") or host in _STOP_EN or host in _OPENERS or adverb or w in small


def _opens_sentence(text: str, start: int) -> bool:
    """Whether only punctuation, spaces or quotes stand between a sentence's end (or the text's start) and `start`."""
    i = start - 1
    while i >= 0 and not (text[i].isalnum() or text[i] in _SENTENCE_END):
        i -= 1
    return i < 0 or text[i] in _SENTENCE_END


def _numbers(words: list[tuple[int, str]], scaled: list[tuple[int, int, str]] = ()) -> list[tuple[int, str]]:
    """The numbers among `_words`' `words`: "2016" and "1,000" are, "covid19" and "4k" are words; those
    inside a `_scaled_numbers` span (the 3000 of 3000万) are parts of that quantity, not numbers here."""
    return [(i, w) for i, w in words if _NUMBER.fullmatch(w) and _within(i, scaled) is None]


def _within(position: int, spans: list[tuple[int, int, str]]) -> str | None:
    """The value of the span (start, end, value) holding `position`, or None."""
    return next((v for a, b, v in spans if a <= position < b), None)


_KINDS = frozenset("语币港城堡")  # the characters a language's, currency's or city's name ends in
_TRANSLIT_RUN = re.compile(f"[{''.join(sorted(_TRANSLIT))}]+")
_ZH_PIECE = re.compile(rf"[^{_STOP_ZH_CHARS}0-9]+")  # a stretch's pieces between function characters and digits


def _translit(piece: str) -> bool:
    """Whether `piece` is written as a transliterated name by its letters alone: three or more table
    characters (`_TRANSLIT`), or two different ones that are both rare outside names (`_TRANSLIT_MARKS`:
    伊朗, 塔姆; not 明朗, 赫赫). A pair with one mark is an everyday word as often as a name (`_marked_pair`).

    >>> [_translit(w) for w in ("特朗普", "伊朗", "塔姆", "明朗", "安宁", "赫赫", "基本")]
    [True, True, True, False, False, False, False]
    """
    return len(piece) >= 2 and all(c in _TRANSLIT for c in piece) and (
        len(piece) >= 3 or all(c in _TRANSLIT_MARKS for c in piece) and piece[0] != piece[1])


def _marked_pair(run: str, i: int, j: int) -> bool:
    """Whether `run[i:j]`, two table characters with one mark, is written as a name by what stands around
    it: part of a longer stretch of table characters (the 芬多 of 芬多泽利亚 where the premise holds 泽利亚)
    or before a kind's character (利丹语, 索哈币, 罗德港)."""
    if j - i != 2 or not any(c in _TRANSLIT_MARKS for c in run[i:j]) or not all(c in _TRANSLIT for c in run[i:j]):
        return False
    a, b = i, j
    while a > 0 and run[a - 1] in _TRANSLIT:
        a -= 1
    while b < len(run) and run[b] in _TRANSLIT:
        b += 1
    return b - a >= 3 or run[j:j + 1] in _KINDS


def _name_like(piece: str) -> bool:
    """Whether `piece` may be a name: two table characters or more (with a kind's character: 图德语), or
    a surname and one or two characters."""
    return any(len(r) >= 2 for r in _TRANSLIT_RUN.findall(piece)) or 2 <= len(piece) <= 3 and piece[0] in _SURNAMES


def _zh_names(run: str, start: int, end: int, premise: str, before: str = "", after: str = "") -> list[str]:
    """The Chinese names the premise (folded) lacks in `run[start:end]`, a stretch of a statement's CJK run
    that no substring of the premise covers: each piece between function characters and digits that is
    written as a transliterated name (`_translit`: 特朗普, 瓦尔多利亚, 伊朗; or a pair with one mark that the
    statement writes as a name, `_marked_pair`: 罗德港), or that may be a name (`_name_like`: 李明华, 图德,
    明朗) where the premise has a name in its place: the two characters before it and the two after
    (or the run's ends) hold another name-like stretch between them ("鲁斯于2016年成为" for "塔姆于2016年成为").
    `before` and `after` are the runs next to `run` across the punctuation that sets a name off inside
    its sentence (`_in_place_of_name`).

    >>> _zh_names("塔姆于2016年成为瓦尔多利亚的国家元首", 0, 2, "鲁斯于2016年成为瓦尔多利亚的国家元首。")
    ['塔姆']
    >>> _zh_names("瓦尔多利亚的首府是泽斯", 7, 8, "瓦尔多利亚的首都是泽斯。")  # 府 for 都: no name
    []
    >>> _zh_names("范凌", 0, 2, "卡温拉斯的女王是贺璐钧。", before="卡温拉斯的女王是")  # "...女王是：范凌。"
    ['范凌']
    """
    found = []
    for m in _ZH_PIECE.finditer(run, start, end):
        piece, a, b = m[0], m.start(), m.end()
        # a name with its kind's character (米托语, 芬特币, 塔维港) is read by its table characters
        written = [r[0] for r in [m, *_TRANSLIT_RUN.finditer(run, a, b)]
                   if _translit(r[0]) or _marked_pair(run, r.start(), r.end())]
        if written:
            found.append(written[0])
        elif _name_like(piece) and _in_place_of_name(run, a, b, premise, before, after):
            found.append(piece)
    return found


def _in_place_of_name(run: str, a: int, b: int, premise: str, before: str = "", after: str = "") -> bool:
    """Whether the premise holds `run[a:b]`'s neighbours with a different name-like stretch between them.
    A neighbour is two characters of the run; at the run's end, where punctuation sets the name off inside
    its sentence ("女王是：范凌", "由总统“戴菲”领导"), the two characters across it (the end of `before`, the
    start of `after`), or the end of a stretch of characters. One side at least is characters (before
    version "9" only the run's own were, so a name set off on both sides, "是：范凌。", was never compared).
    The premise may set its name off with punctuation too (`_IN_SENTENCE_GAP`)."""
    edge = rf"(?:{_CJK_CLASS}|[0-9])"
    gap = _IN_SENTENCE_GAP
    # (pattern, whether it is characters) for each side
    lefts = [(re.escape(run[a - 2:a]) + gap, True)] if a >= 2 else []
    rights = [(gap + re.escape(run[b:b + 2]), True)] if b + 2 <= len(run) else []
    if a == 0:
        lefts = [(re.escape(before[-2:]) + gap, True)] * (len(before) >= 2) + [(rf"(?<!{edge})", False)]
    if b == len(run):
        rights = [(gap + re.escape(after[:2]), True)] * (len(after) >= 2) + [(rf"(?!{edge})", False)]
    return any(_name_like(v) and v != run[a:b]
               for left, chars in lefts for right, chars_too in rights if chars or chars_too
               for m in re.finditer(f"{left}({_CJK_CLASS}{{1,4}}?){right}", premise)
               for v in _ZH_PIECE.findall(m[1]))


def _neighbours(text: str, runs: list[re.Match], r: int) -> tuple[str, str]:
    """The runs of `text` before and after `runs[r]` across the punctuation that sets a name off inside a
    sentence (`_IN_SENTENCE_GAP`), "" where a stop, a letter or the text's end is next: a name's context."""
    def joined(a: re.Match, b: re.Match) -> bool:
        return _IN_SENTENCE_GAP_RE.fullmatch(text, a.end(), b.start()) is not None
    before = runs[r - 1][0] if r > 0 and joined(runs[r - 1], runs[r]) else ""
    after = runs[r + 1][0] if r + 1 < len(runs) and joined(runs[r], runs[r + 1]) else ""
    return before, after


def names_in(sentence: str) -> list[str]:
    """The names a sentence (NFKC) writes, by this judge's readings, for rules outside it (a refusal's
    courtesy sentence names no one: `eval.diagnose`): capitalised English words inside it (its opening
    word is capitalised whatever it is: "Sorry", "Unfortunately" are not counted), and transliterated
    Chinese names (`_translit`: 特朗普, 瓦尔多利亚).

    >>> names_in("Sorry, please contact Ana Kel."), names_in("请联系特朗普。"), names_in("Sorry I couldn't help.")
    (['Ana', 'Kel'], ['特朗普'], [])
    """
    names = set(_names(sentence))
    found = [m[0] for m in _CASED_WORD.finditer(sentence) if m[0] in names and not _opens_sentence(sentence, m.start())]
    return found + [r for r in _TRANSLIT_RUN.findall(sentence) if _translit(r)]


class LexicalJudge:
    """Supported iff at least `threshold` of the hypothesis' content units occur in the premise.

    Content units are words (of any alphabet), numbers and non-function CJK characters (`content_tokens`).
    A word is supported when the premise has it; a CJK character only when it lies inside a run of two
    or more of the statement's consecutive CJK characters that the premise holds contiguously (function
    characters may be part of that run), or, standing alone between non-CJK text, when the premise has
    it. So a wrong name cannot borrow its characters from elsewhere in the premise. A number the premise
    lacks makes the statement unsupported whatever the share: a wrong year or count is one unit among
    many, and a share of 5/6 would pass it. A Chinese numeral that counts something (三个月, 十五分钟,
    二〇一六年: `_zh_numbers`) is such a number, backed by the premise's digits or numerals alike (3个月
    backs 三个月, and the other way round). So does an English name the premise lacks, where the writing
    marks it as one (`_names`: a capitalised word inside a sentence, "... of Valdoria is Tamm",
    or opening one when it is no function word or opener and is nowhere written in small letters, "Tamm
    is ..."; a function word that is a given name, "Will", "May", "Can", inside a sentence before a
    capitalised word, "... is Will Tamm" (not "in May 2016", "of The Beatles"), or opening one before
    a name the premise writes after another first name, `_first_names`). So does a Chinese name the
    premise lacks: a stretch the premise does not cover that is written as a transliterated name (特朗普,
    瓦尔多利亚, 伊朗; not 明朗 or 安宁, whose pair of table characters holds one mark), or that may be a
    name (李明华) where the premise has another name in its place (`_zh_names`), whatever punctuation
    sets either off ("女王是：范凌", "由总统“戴菲”领导", "安娜·凯尔"). A leading clause that only names the
    sources ("According to the documents [1], ...", "根据提供的上下文，...") is set aside (`unattributed`).
    A hypothesis with no content units cannot be judged (Verdict None). A cheap, deterministic floor for
    a real judge: it cannot see negation or paraphrase, nor a wrong name that nothing marks (a Chinese
    person's name in other words than the premise's, a name the premise covers but for one character)
    when a long statement outweighs its few units.

    >>> LexicalJudge().judge([("Login fails with HTTP 422.", "login returns 422"), ("登录失败返回 422", "弹出提示")])
    [Verdict(supported=False, reason='2/3 content tokens in premise (0.67 < 0.75); missing: returns'), Verdict(supported=False, reason='0/4 content tokens in premise (0.00 < 0.75); missing: 弹出提示')]
    >>> LexicalJudge().judge([("国家元首是塔姆。", "国家元首是首塔")])  # 首 and 塔 are in the premise, "首塔" is not
    [Verdict(supported=False, reason='4/6 content tokens in premise (0.67 < 0.75); missing: 首塔')]
    >>> LexicalJudge().judge([("Tamm became head of state of Valdoria in 2016.", "Tamm became head of state of Valdoria in 2018.")])
    [Verdict(supported=False, reason='5/6 content tokens in premise (0.83 ≥ 0.75); missing: 2018; but the premise lacks the number 2018')]
    >>> LexicalJudge().judge([("Ruus became head of state of Valdoria in 2016.", "The head of state of Valdoria is Tamm.")])
    [Verdict(supported=False, reason='3/4 content tokens in premise (0.75 ≥ 0.75); missing: tamm; but the premise lacks the name Tamm')]
    >>> LexicalJudge().judge([("Ruus became head of state of Valdoria in 2016.", "Tamm is the head of state of Valdoria.")])
    [Verdict(supported=False, reason='3/4 content tokens in premise (0.75 ≥ 0.75); missing: tamm; but the premise lacks the name Tamm')]
    >>> LexicalJudge().judge([("鲁斯于2016年成为瓦尔多利亚的国家元首。", "塔姆于2016年成为瓦尔多利亚的国家元首。")])
    [Verdict(supported=False, reason='13/15 content tokens in premise (0.87 ≥ 0.75); missing: 塔姆; but the premise lacks the name 塔姆')]
    >>> LexicalJudge().judge([("鲁斯于2016年成为瓦尔多利亚的国家元首。", "鲁斯于2016年当选瓦尔多利亚的国家元首。")])
    [Verdict(supported=True, reason='14/16 content tokens in premise (0.88 ≥ 0.75); missing: 当选')]
    """

    name = "lexical"
    # bump when the tokenization or rule changes: it changes scores (2: CJK needs a 2+ character match;
    # 3: ideographs past U+20000 are CJK, not ignored; 4: a number the premise lacks is unsupported;
    # 5: so is an English name the premise lacks; 6: a sentence's first word too, unless it reads as ordinary;
    # 7: typographic apostrophes read as "'"; 8: a Chinese name the premise lacks (`_zh_names`) and a
    # function word that is a given name, written as a first name ("Will Tamm"), are unsupported too, and
    # "1,890" is no name; 9: a Chinese name set off by punctuation, "女王是：范凌", "总统“戴菲”领导", is read with
    # its neighbours across it, and "安娜·凯尔" is one stretch: before, a run that was the name alone was never
    # compared with the premise's; 10: a full-width comma between numbers, "401，403", separates them: NFKC
    # made it "," and the two read as the number 401403; 11: a word is letters of any alphabet, "Jürgen" not "j"
    # and "rgen", and a Chinese numeral that counts something is a number, 三个月 against 六个月 or 3个月;
    # 12: a number with a magnitude is one quantity, 3000万 = 30,000,000 = 三千万 and 3 million = 3,000,000:
    # "人口为3000" passed against "人口为3000万", its digits read as the premise's number 3000; and a space
    # between a number and a CJK character after it is dropped, "成立于 1999 年" backing "1999年", as EM reads them;
    # and a possessive counts as its word in the share too, "Ruus's country" backed by a premise naming Ruus;
    # 13: numbers are read as the citation checker reads them (`numbers.number_value`): by value, "5.00" is 5
    # and "01" is 1, and with their sign, "-12" is not 12; a magnitude may be spaced off, "3000 万"; and a leading
    # clause naming only the sources, "According to the documents [1], ...", "根据提供的上下文，...", is set
    # aside (`unattributed`): its words made a correct statement unsupported; 14: a "-" after a Chinese
    # character is a sign, "降至-12度" is -12 (it read 12), but after a unit closing a quantity, "2020年-2022年",
    # or a number's unit, percent or magnitude, "3%-5%" and "1万-2万元", ranges: "3%-5%" read 3 and -5)
    version = "14"

    def __init__(self, threshold: float = 0.75):
        if not 0.0 < threshold <= 1.0:
            raise ValueError(f"threshold must be in (0, 1], got {threshold}")
        self.threshold = threshold

    @property
    def fingerprint(self) -> str:
        return digest("LexicalJudge", "", {"threshold": self.threshold}, self.version)

    def judge(self, pairs: list[tuple[str, str]]) -> list[Verdict]:
        return [self._one(p, h) for p, h in pairs]

    def _one(self, premise: str, hypothesis: str) -> Verdict:
        hypothesis = unattributed(hypothesis)
        p, h = _fold(premise), _fold(hypothesis)
        p_words, h_words = _words(p), _words(h)
        # a number the premise holds in digits or Chinese numerals (3个月, 三个月) backs either spelling; one
        # with a magnitude (3000万, 3 million) is that quantity, and its digits alone no number it holds
        p_scaled, h_scaled = _scaled_numbers(p), _scaled_numbers(h)
        held = ({w for _, w in _numbers(p_words, p_scaled)} | {v for *_, v in _zh_numbers(p, quantities=False)}
                | {v for *_, v in p_scaled})
        h_numerals = _zh_numbers(h, quantities=True) + h_scaled
        words = {w for _, w in p_words if w not in _STOP_EN} | held
        units: list[tuple[int, bool, str]] = []  # (position, supported, what "missing" names)
        zh_names: list[str] = []  # the Chinese names among the uncovered stretches (`_zh_names`)
        for start, w in h_words:
            if w not in _STOP_EN:
                scaled = _within(start, h_scaled)  # "3" and "million" of "3 million" stand with their quantity
                # a possessive is its word ("Ruus's" backed by a premise naming Ruus), as the name rule reads it
                held_word = w in words or (w.endswith("'s") and w[:-2] in words)
                units.append((start, held_word if scaled is None else scaled in held, w))
        runs = list(_CJK_DIGIT_RUN.finditer(h))
        for r, m in enumerate(runs):
            if m[0].isdigit():  # the digits are read as numbers above; here they are context
                continue
            before, after = _neighbours(h, runs, r)
            run, cover = m[0], _covered(m[0], p)
            for a, b, value in h_numerals:  # a numeral whose number the premise holds is covered, however written
                a, b = max(a, m.start()), min(b, m.end())  # a scaled number's digits may open the run
                if value in held and a < b:
                    cover[a - m.start():b - m.start()] = [True] * (b - a)
            i = 0
            for uncovered, group in itertools.groupby(cover, key=lambda c: not c):
                size = len(list(group))
                # "missing" names a maximal stretch of uncovered characters, trimmed of function characters
                name = run[i:i + size].strip(_STOP_ZH_CHARS + "0123456789") if uncovered else ""
                units += [(m.start() + x, not uncovered, name) for x in range(i, i + size)
                          if run[x] not in _STOP_ZH and not run[x].isdigit()]
                if uncovered:
                    zh_names += _zh_names(run, i, i + size, p, before, after)
                i += size
        if not units:
            return Verdict(None, "no content tokens in the statement")
        units.sort(key=lambda u: u[0])
        k, n = sum(ok for _, ok, _ in units), len(units)
        missing = list(dict.fromkeys(name for _, ok, name in units if not ok))
        share = k / n
        ok = share >= self.threshold
        why = f"{k}/{n} content tokens in premise ({share:.2f} {'≥' if ok else '<'} {self.threshold})"
        why += f"; missing: {', '.join(missing)}" if missing else ""
        if ok:  # the share alone would pass it: a wrong number or name still makes it unsupported
            numbers = [x for _, x in _numbers(h_words, h_scaled) if x not in held]
            numbers = list(dict.fromkeys(numbers + [h[a:b] for a, b, v in h_numerals if v not in held]))
            # a possessive's name is its host ("Ruus's" is backed by a premise naming Ruus); a function
            # word's name only by the premise's writing it with its capital ("Will", not "will")
            text, held_text = _CJK_GAP.sub("", _nfkc(hypothesis)), _CJK_GAP.sub("", _nfkc(premise))
            cased = {m[0] for m in _CASED_WORD.finditer(held_text)}
            names = [x for x in _names(text) if x not in cased] if cased else _names(text)
            names = [x for x in names if x.lower() in _STOP_EN
                     or (x.lower() not in words and x.lower().split("'")[0] not in words)]
            names = list(dict.fromkeys(names + _first_names(text, held_text) + zh_names))
            lacking = [f"the number {', '.join(numbers)}"] * bool(numbers) + [f"the name {', '.join(names)}"] * bool(names)
            if lacking:
                ok, why = False, why + f"; but the premise lacks {' and '.join(lacking)}"
        return Verdict(ok, why)
