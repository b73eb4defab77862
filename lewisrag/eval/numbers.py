"""How numbers are read where lewisrag compares an answer with what it cites: the citation checker
(`citations`) and the lexical judge (`judges.lexical`) share this reading, so that the two agree on what
a number is. Numbers compare by value ("1,000" is 1000, "5.00" is 5, "-12" is not 12), Chinese numerals
are numbers (三十 is 30, 一九九九 1999), and a number with its magnitude is one quantity (3000万, 三千万
and 3 million are 30,000,000 and 3,000,000).

Written here rather than taken from a numeral-conversion library: what both readers need is the
judgement of which numerals in running text count something (三个月) and which are part of a word
(统一, 十分), and magnitudes beside digits (3000 万), made for matching statements to documents.
"""

from __future__ import annotations

import decimal
import re

# A "-" or "−" right before it is its sign where no letter or digit precedes ("-12", "(−3.2)"): "10-12",
# "COVID-19" and "REQ-AUTH-03" are no negatives. A Chinese character before it leaves it a sign ("降至-12度",
# "最低温度-5℃", "3度至-12度"), but for a number's unit, percent or magnitude, after which it joins a range:
# "2020年-2022年", "3%-5%", "1万-2万元", "9点-11点", "10分钟-15分钟", "3公里-5公里" and "3人-5人" are ranges.
# The lexical judge reads numbers with this pattern too (`judges.lexical`).
_CJK = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
# The measure words and units after which a numeral counts something (三个, 十五分钟, 两年). Not 分 (十分 is
# "very"), 角 (三角, a triangle), 点 (一点, "a little"; 三点五 is 3.5) nor 成 (九成, 90%).
_ZH_UNIT_WORDS = ("个月 个小时 个星期 个 年 月 天 日 号 周 星期 小时 分钟 秒 次 人 名 位 元 块 岁 倍 米 公里 千米 厘米 毫米 "
                  "公斤 千克 克 吨 升 家 项 条 页 章 节 篇 本 台 种 张 件 层 级 届 版 度").split()
# what may close a number before a range's "-": one character of a unit, a magnitude or a sign of measure
# ("1万元-", "3%-"), two of them, or a unit word of two or three characters ("3公里-", "2个小时-")
_DIGIT = "[0-9〇零一二两三四五六七八九十百千万亿]"
_UNIT_CHAR = "[" + "".join(sorted({w for w in _ZH_UNIT_WORDS if len(w) == 1})) + "%‰°℃′″万亿千百十点钟分时]"
_UNIT_AFTER = "".join(
    [rf"(?<!{_DIGIT}{_UNIT_CHAR}[-\u2212])", rf"(?<!{_DIGIT}{_UNIT_CHAR}{_UNIT_CHAR}[-\u2212])"]
    + [rf"(?<!{_DIGIT}(?:{'|'.join(w for w in _ZH_UNIT_WORDS if len(w) == n)})[-\u2212])" for n in (2, 3)])
NUMBER_RE = (rf"(?:[-\u2212](?<![^\W{_CJK}][-\u2212]){_UNIT_AFTER})?"
             r"(?:[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?:\.[0-9]+)*")


def number_value(number: str) -> str:
    """A number in digits (`NUMBER_RE`) as both readers compare it, by its value: without thousands
    separators, the leading zeros of its integer part (a date's "01-05" is January 5th, a time's "09:05"
    is 9:05) or the trailing zeros of its decimals ("5.00" is the 5 a document writes), a sign written
    "-" and none on a zero. A version's "1.2.30" is no value: it keeps its parts but the first one's zeros.

    >>> [number_value(t) for t in ("1,000", "5.00", "0.50", "007", "1.05", "-3.20", "\u221212", "-0.0", "01.2.30")]
    ['1000', '5', '0.5', '7', '1.05', '-3.2', '-12', '0', '1.2.30']
    """
    sign = "-" if number[0] in "-\u2212" else ""
    whole, dot, fraction = number.lstrip("-\u2212").replace(",", "").partition(".")
    if "." not in fraction:  # one decimal point: a value ("1.05" is not "1.5", "0.5" keeps its 0)
        fraction = fraction.rstrip("0")
        dot = dot if fraction else ""
    value = (whole.lstrip("0") or "0") + dot + fraction
    return value if value == "0" else sign + value


# Chinese numerals are numbers too: 三个月 against a premise's 六个月 (or 3个月) was one character among many.
_ZH_DIGITS = {"〇": 0, "零": 0, "一": 1, "二": 2, "两": 2, "兩": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7,
              "八": 8, "九": 9}
_ZH_SMALL = {"十": 10, "百": 100, "千": 1000}
_ZH_LARGE = {"万": 10**4, "萬": 10**4, "亿": 10**8, "億": 10**8}
_ZH_NUMERAL_RUN = re.compile(f"[{''.join([*_ZH_DIGITS, *_ZH_SMALL, *_ZH_LARGE])}]+")
_ZH_UNIT = re.compile("|".join(sorted(_ZH_UNIT_WORDS, key=len, reverse=True)))  # the words after which a numeral counts
# The units after which a lone 一 is the number one rather than "a": 一个问题, 一种方法, 一名用户, 一次 are
# "a problem", "a way", "a user", "once", as an English "a" is no number.
_ZH_UNIT_OF_ONE = re.compile("|".join(sorted(
    "个月 个小时 个星期 年 月 天 日 周 星期 小时 分钟 秒 岁 倍 元 米 公里 千米 厘米 毫米 公斤 千克 吨".split(),
    key=len, reverse=True)))
# the characters that make a lone 一 after them part of a word: 统一, 唯一, 不一, 同一天, 每一年, 之一, 万一
_ZH_ONE_AFTER = frozenset("统唯不同单专划之其逐任每万")


def zh_value(run: str) -> int | None:
    """The number a run of Chinese numerals writes, or None where it writes none: digit by digit
    (二〇一六), or with its units (十五, 三千万, 一百零五, 一万五 for 15000); never from a leading unit (千万
    "by all means", 万一 "in case") nor from digits side by side among units (一五一十).

    >>> [zh_value(r) for r in ("三", "两", "十五", "五十", "三百万", "三千万", "一百零五", "一万五", "二〇一六")]
    [3, 2, 15, 50, 3000000, 30000000, 105, 15000, 2016]
    >>> [zh_value(r) for r in ("千万", "万一", "一五一十", "三三两两")]
    [None, None, None, None]
    """
    if len(run) > 20:  # no quantity is written so long (and int() refuses 4,300 digits: a traceback)
        return None
    if not any(c in _ZH_SMALL or c in _ZH_LARGE for c in run):  # digit by digit: a year, a code (两 is no digit of one)
        if len(run) > 1 and ("两" in run or "兩" in run):
            return None
        return int("".join(str(_ZH_DIGITS[c]) for c in run))
    total = section = 0
    digit, unit, small, zero = None, 1, 10**4, False  # the digit waiting for its unit; the last unit; 零 since it
    for c in run:
        if c in _ZH_DIGITS:
            if digit is not None:
                return None
            zero = zero or _ZH_DIGITS[c] == 0
            digit = _ZH_DIGITS[c] or None
        elif c in _ZH_SMALL:
            if digit is None and (c != "十" or section):  # 十五 is 15; 百 alone, 十十 or 三百十 are no number
                return None
            if _ZH_SMALL[c] >= small:  # within a section the units fall: 一百一千 is none
                return None
            section += (digit or 1) * _ZH_SMALL[c]
            digit, unit, small, zero = None, _ZH_SMALL[c], _ZH_SMALL[c], False
        else:
            section += digit or 0
            if _ZH_LARGE[c] > 10**4 and total + section:  # 亿 multiplies all before it: 一万亿 is 10**12
                total = (total + section) * _ZH_LARGE[c]
            elif section:
                total += section * _ZH_LARGE[c]
            else:
                return None
            section, digit, unit, small, zero = 0, None, _ZH_LARGE[c], 10**4, False
    if digit is not None:  # 一万五 is 15000 and 三百五 350, but 一百零五 105
        section += digit * (unit // 10 if unit > 10 and not zero else 1)
    return total + section


def zh_numbers(text: str, quantities: bool) -> list[tuple[int, int, str]]:
    """(start, end, value) of the Chinese numerals of folded `text`. With `quantities`, only those that
    clearly count something: before a measure word or unit (三个月, 十分钟; a lone 一 only before a unit
    of time or measure, and not ending a word: 统一年度), after 百分之, with units of their own (十五,
    三千万), or digit by digit with a 〇 (二〇一六) or before 年 (一九九八年). Never 一些, 一般, 十分 or 三角,
    nor 三四天 ("three or four days"): what a statement claims. Without, every run that writes a number:
    what a premise or document holds.

    >>> zh_numbers("统一管理三个月、十分重要、一些、第一、十五分钟", True)
    [(4, 5, '3'), (19, 21, '15')]
    """
    found = []
    for m in _ZH_NUMERAL_RUN.finditer(text):
        run, end = m[0], m.end()
        if run.endswith("千") and len(run) > 1 and text[end:end + 1] in ("克", "米", "瓦"):  # 五千克 is 5 kg
            run, end = run[:-1], end - 1
        value = zh_value(run)
        if value is None:
            continue
        if quantities:
            if len(run) == 1:  # a lone numeral counts what its unit names
                one = run == "一"
                unit = (_ZH_UNIT_OF_ONE if one else _ZH_UNIT).match(text, end)
                in_word = one and text[m.start() - 1:m.start()] in _ZH_ONE_AFTER
                counted = (unit is not None and not in_word) or text.endswith("百分之", 0, m.start())
            elif any(c in _ZH_SMALL or c in _ZH_LARGE for c in run):  # 十五, 三千万: units of its own
                counted = True
            else:  # digit by digit: a year or a code, not 三四 ("three or four") nor 七七八八
                counted = "〇" in run or "零" in run or (len(run) >= 3 and text.startswith("年", end))
            if not counted:
                continue
        found.append((m.start(), end, str(value)))
    return found


# A number with a magnitude after it is one quantity: 3000万 is 30,000,000, not the number 3000 and a
# character 万 (one unit among many, so "人口为3000" passed against "人口为3000万", and 3000亿 against 3000万);
# 3千万 and 三千万, 1.5亿 and 150,000,000, 3 million and 3,000,000 are alike. Adjacent groups add up when
# their magnitudes fall (1万2千 is 12000, 1亿2000万 is 120,000,000). Mixed text may space the magnitude
# off ("3000 万"), as it does a measure word.
_SCALE_WORDS = {"thousand": 10**3, "million": 10**6, "billion": 10**9, "trillion": 10**12}
# (the lookahead first: it turns most places away faster than the lookbehind does)
_SCALED = re.compile(rf"(?=[-\u22120-9])(?<![0-9.,])({NUMBER_RE})\s*(?:({'|'.join(_SCALE_WORDS)})\b|([{''.join([*_ZH_SMALL, *_ZH_LARGE])}]+))")


def _scale(match: re.Match, text: str) -> tuple[int, int] | None:
    """(magnitude, end) of what a `_SCALED` match writes after its number, or None where it writes none:
    5千克 is 5 kg and 3千米 3 km (千 before 克, 米, 瓦 is "kilo"), 5百分点 five percentage points."""
    if match[2]:
        return _SCALE_WORDS[match[2]], match.end()
    units, end = match[3], match.end()
    if units.endswith("千") and text[end:end + 1] in ("克", "米", "瓦"):
        units, end = units[:-1], end - 1
    if not units or (units[0] == "百" and text[match.start(3) + 1:match.start(3) + 2] == "分"):
        return None
    scale = 1
    for c in units:  # 3千万: 3 x 1000 x 10000
        scale *= _ZH_SMALL.get(c) or _ZH_LARGE[c]
    return scale, end


def plain(value: decimal.Decimal) -> str:
    """A quantity written as `number_value` writes a number: 30000000, 1.5 (never 3E+7 or 1.50)."""
    return number_value(format(value, "f"))


def scaled_numbers(text: str) -> list[tuple[int, int, str]]:
    """(start, end, value) of the numbers with magnitudes of folded `text` (3000万, 1.5亿, 3 million), the
    value written as `number_value` writes a number, so that the two compare.

    >>> [v for *_, v in scaled_numbers("3000万、3千万、1.5亿、1万2千、2 million、-3 million、5千克、2016年、0.5百分点")]
    ['30000000', '30000000', '150000000', '12000', '2000000', '-3000000']
    """
    found: list[tuple[int, int, str]] = []
    last = None  # the magnitude of the group just before, when it ends where this one starts
    for m in _SCALED.finditer(text):
        scaled = _scale(m, text)
        if scaled is None:
            last = None
            continue
        scale, end = scaled
        if m[1].count(".") > 1 or len(m[1]) > 20:  # 1.2.3 is a version; no quantity is written so long (str()
            # refuses an int of 4,300 digits: a traceback)
            last = None
            continue
        value = decimal.Decimal(m[1].replace(",", "").replace("\u2212", "-")) * scale
        start = m.start()
        if found and last is not None and found[-1][1] == start and scale < last:
            start, _, before = found.pop()
            value += decimal.Decimal(before)
        found.append((start, end, plain(value)))
        last = scale
    return found
