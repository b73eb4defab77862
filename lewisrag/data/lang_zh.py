"""The Chinese text of the built-in world (`lewisrag world --lang zh`): name characters, facts,
passage sentences, questions and reference statements.

Only data lives here. The generators are the English ones (`names`, `entities`, `questions`): each
looks up its tables by language (`entities.text_tables`, `questions.text_tables`) and finds here the
same names it has for English, with the same structure, so both languages go through one code path.

Names are transliteration-style (瓦尔多利亚, 塔维港, 拉莫币, 维兰语) from `SYLLABLES`, a fixed set of
common characters Chinese uses to write foreign names; people have a Chinese surname and one or two
given characters. The three sets are disjoint, and no template puts three of these characters in
a row, so a made-up name never turns up by accident inside other text. Numbers are written as
Chinese text writes them: years 1921年, populations in 万 (1,290万), counts with separators (4,350).
"""

from __future__ import annotations

# ---------------------------------------------------------------------------------------------
# names (used by names.Namer for lang="zh")

SYLLABLES = tuple("阿巴达卡拉马纳萨塔瓦尔多利亚斯特洛罗维克德尼莫诺索托弗伦兰贝里西基加图奥埃伊乌泽科蒙丹米格哈坦帕沃赫凯雷蒂芬梅温")
NOT_FIRST = "尔"  # no name starts with it (as no transliteration does)
COUNTRY_ENDINGS = ("亚", "尼亚", "利亚", "兰", "斯", "", "", "")
CITY_ENDINGS = ("城", "堡", "港", "", "", "", "")
CURRENCY_ENDING = "币"
LANGUAGE_ENDING = "语"
SURNAMES = tuple("李张刘陈杨黄赵周吴徐孙朱胡郭何高林郑梁谢宋唐许韩冯邓曹彭曾肖田董袁潘蒋蔡余杜叶程苏魏吕丁任沈姚卢姜崔钟"
                 "谭陆汪范金石廖贾夏付方白邹孟熊秦邱江尹薛段侯龙史陶黎贺顾毛郝龚邵钱严戴孔向汤")
GIVEN = tuple("明华伟芳静丽强磊军洋勇艳杰涛超秀霞刚桂英玉萍红鹏飞辉宇浩鑫婷雪慧琳晨思欣博斌宁俊健峰志亮颖春晓云"
              "永晶敏哲睿轩怡悦涵瑶璐倩彤诗佳子天益安文梓若宏凡馨蕊萱琪瑞祥婉柔凌然铭煜楠桐菲岩松柏竹雯霖琦珊莹燕"
              "鸣帆舟远毅勤诚朗晗昊旭炜冰洁露韵凤琴曦源彬坤腾骏烨瀚钧")
ONE_GIVEN_SHARE = 0.3  # of people have one given character (李明), the others two (李明华)
# a look-alike changes one character of a name to one that sounds or looks alike (瓦尔多利亚 -> 瓦尔朵利亚)
SIMILAR = {
    "阿": "埃", "巴": "芭帕", "达": "塔答", "卡": "咖加", "拉": "腊", "马": "玛", "纳": "娜那", "萨": "莎", "塔": "达",
    "瓦": "娃", "尔": "儿", "多": "朵托", "利": "莉里", "亚": "娅雅", "斯": "丝", "特": "德", "洛": "罗络", "罗": "洛萝",
    "维": "韦薇", "克": "柯", "德": "特得", "尼": "妮", "莫": "摩", "诺": "洛", "索": "梭", "托": "多", "弗": "福",
    "伦": "仑", "兰": "岚", "贝": "倍", "里": "利", "西": "希", "基": "吉", "加": "嘉卡", "图": "涂", "奥": "澳",
    "埃": "艾", "伊": "依", "乌": "巫", "泽": "择", "科": "柯", "蒙": "梦", "丹": "旦", "米": "弥", "格": "戈",
    "哈": "喀", "坦": "檀", "帕": "巴", "沃": "渥", "赫": "鹤", "凯": "恺", "雷": "蕾", "蒂": "缔", "芬": "纷",
    "梅": "玫", "温": "汶",
}
PLACE_PREFIXES = ("新", "北", "南", "上", "下", "东", "西")  # the last resort of a look-alike, as in English
# Fresh names (pretraining text, names.word_side "fresh") draw from the syllables and the look-alike
# characters too: a generator pretrained on fresh text has then read and copied every character a
# world's names can hold (look-alikes are world-only, so otherwise 喀 or 嘉 would be new to it).
FRESH_SYLLABLES = SYLLABLES + tuple(sorted(set("".join(SIMILAR.values())) - set(SYLLABLES)))

# ---------------------------------------------------------------------------------------------
# facts (entities.make_country / make_organisation draw from these as from the English tables, which
# have the same lengths: a Chinese world's facts follow the same draws)

REGIONS = ("北部高原", "东部低地", "南部沿海", "西部群岛", "中部平原", "极北地区", "大河三角洲", "内海盆地")
CLIMATES = ("温和湿润", "炎热干燥", "冬冷夏暖", "全年潮湿", "温和")
EXPORTS = ("铜", "羊毛", "木材", "茶叶", "盐", "玻璃", "琥珀", "水稻", "橄榄", "铁矿", "绸缎", "鱼", "咖啡", "大理石",
           "葡萄酒", "棉花")
AND = "和"  # joins the two exports: 铜和羊毛
GOVERNMENTS = (("共和国", "总统"), ("议会制共和国", "总理"), ("王国", "国王"), ("王国", "女王"), ("联邦", "总理"), ("公国", "亲王"))
ORG_KINDS = (("研究所", "所长", "科研"), ("贸易联盟", "秘书长", "贸易"), ("学院", "院长", "艺术"), ("航运公会", "会长", "航运"),
             ("医学会", "会长", "医学"), ("铁路工会", "主席", "铁路"), ("科学理事会", "主席", "科学"), ("足球协会", "主席", "足球"))


def format_population(tenths: int) -> str:
    """A population given in tenths of a million, in 万 (ten thousands): 129 -> '1,290万'."""
    return f"{tenths * 10:,}万"


def parse_population(text: str) -> int:
    return int(text.removesuffix("万").replace(",", "")) // 10


# ---------------------------------------------------------------------------------------------
# passages (entities.render): each sentence has a few phrasings; the entity's style seed picks them

SENTENCE_JOIN = ""  # Chinese sentences follow each other without a space
COUNTRY_STATIC = (
    ("{name}是位于{region}的一个国家。", "{name}是{region}的一个独立国家。", "{name}地处{region}，是一个主权国家。"),
    ("该国建立于{founded}年。", "{name}于{founded}年建国。", "{name}建国于{founded}年。"),
    ("首都为{capital}。", "{name}的首都是{capital}。", "{capital}是{name}的首都和最大城市。"),
    ("{name}的货币是{currency}。", "该国使用的货币为{currency}。", "在{name}，人们用{currency}付款。"),
    ("官方语言为{language}。", "大多数居民讲官方语言{language}。"),
    ("{name}以{exports}闻名。", "{name}的经济依赖{exports}。", "主要出口产品为{exports}。"),
    ("气候{climate}。", "当地气候{climate}。"),
)
COUNTRY_VARYING = (
    ("{name}是一个{government}，由{title}{leader}领导。", "{name}的{title}是{leader}。", "{name}为{government}，现任{title}是{leader}。"),
    ("{leader}于{since}年就任。", "{leader}自{since}年起执政。"),
    ("{name}的人口为{population}。", "约有{population}人生活在{name}。", "{name}的人口约为{population}。"),
    ("该国每{term}年举行一次选举。", "国民议会共有{seats}个席位。"),
)
ORG_STATIC = (
    ("{name}是{field}领域的一个组织，成立于{founded}年。", "{name}成立于{founded}年，致力于{field}事业。"),
    ("其总部位于{headquarters}。", "{name}的总部设在{headquarters}。", "该组织的总部位于{headquarters}。"),
    ("它每年发布一份关于{field}的报告。", "其理事会每年开会{meetings}次。"),
)
ORG_VARYING = (
    ("{name}由{title}{head}领导。", "{title}{head}领导着{name}。", "{name}的{title}是{head}。"),
    ("{head}于{since}年上任。", "{head}自{since}年起担任此职。"),
    ("该组织共有{members}名会员。", "{name}拥有{members}名会员。", "{name}的会员人数为{members}人。"),
)
ARCHIVE = {  # an outdated passage (slot 2); {year} and the old facts come from Entity.archive
    "country": "档案条目（{year}年）：{year}年时，{name}由{title}{leader}领导，当时人口为{population}。",
    "organisation": "档案条目（{year}年）：{year}年时，{name}由{title}{head}领导，当时共有{members}名会员。",
}

# ---------------------------------------------------------------------------------------------
# questions (questions.py): the same attributes and topics as English

ANSWER_FORMS = {"founded": "{}年"}  # a short answer as the passages write it: 1921年 (English: the fact itself)
SHORT = {
    "capital": ("{ref}的首都是哪座城市？", "{ref}的首都是什么？", "哪座城市是{ref}的首都？", "请说出{ref}的首都。",
                "{ref}的首都设在哪里？"),
    "currency": ("{ref}使用什么货币？", "{ref}的货币是什么？", "{ref}通用哪种货币？", "在{ref}，人们用什么付款？",
                 "请说出{ref}的法定货币。"),
    "founded": ("{ref}成立于哪一年？", "{ref}是哪一年建立的？", "{ref}建于何年？", "{ref}的成立年份是哪一年？",
                "{ref}于哪一年成立？"),
    "language": ("{ref}的官方语言是什么？", "{ref}以哪种语言为官方语言？", "{ref}的人们讲什么语言？", "请说出{ref}的官方语言。"),
    "leader": ("谁是{ref}的{title}？", "谁领导着{ref}？", "{ref}现任领导人是谁？", "谁治理着{ref}？", "请说出{ref}的{title}。"),
    "population": ("{ref}的人口是多少？", "有多少人生活在{ref}？", "{ref}有多少居民？", "{ref}目前的人口是多少？",
                   "{ref}的人口规模有多大？"),
    "headquarters": ("{ref}的总部在哪里？", "{ref}的总部设在哪座城市？", "{ref}位于哪座城市？", "哪座城市是{ref}的总部所在地？",
                     "{ref}的总部位于何处？"),
    "head": ("谁领导着{ref}？", "谁是{ref}的{title}？", "{ref}由谁领导？", "谁负责{ref}？", "请说出{ref}的负责人。"),
    "members": ("{ref}有多少名会员？", "{ref}的会员人数是多少？", "有多少人是{ref}的会员？", "{ref}的会员规模有多大？"),
}
STATEMENTS = {
    "capital": "{ref}的首都是{capital}。", "currency": "{ref}的货币是{currency}。",
    "founded": "{ref}成立于{founded}年。", "language": "{ref}的官方语言是{language}。",
    "leader": "{ref}的{title}是{leader}。", "since": "{who}于{since}年就任。",
    "population": "{ref}的人口为{population}。", "exports": "{ref}以{exports}闻名。",
    "region": "{ref}是位于{region}的一个国家。", "headquarters": "{ref}的总部位于{headquarters}。",
    "head": "{ref}由{title}{head}领导。", "members": "{ref}拥有{members}名会员。",
    "field": "{ref}活跃于{field}领域。",
}
LONG = {  # topic: (the attributes its reference states, in order; its question phrasings)
    ("country", "government"): (("leader", "since", "population"), (
        "请介绍{ref}的政府。", "谈谈{ref}的政府。", "谁在治理{ref}？那里生活着多少人？", "概述{ref}的领导层和人口。")),
    ("country", "economy"): (("currency", "exports"), (
        "请介绍{ref}的经济。", "谈谈{ref}的经济情况。", "关于{ref}的经济，有哪些已知信息？")),
    ("country", "history"): (("region", "founded", "capital"), (
        "请介绍{ref}的历史和地理。", "{ref}位于哪里、何时建国、首都是哪座城市？", "概述{ref}的历史。")),
    ("organisation", "leadership"): (("head", "since", "members"), (
        "请介绍{ref}的领导层。", "谁在管理{ref}？它的规模有多大？", "谈谈{ref}的领导情况。")),
    ("organisation", "history"): (("founded", "headquarters", "field"), (
        "请介绍{ref}的历史。", "请介绍一下{ref}。", "概述{ref}的情况。")),
}
VIA_CAPITAL = ("首都为{capital}的国家由谁领导？", "首都是{capital}的那个国家，其{title}是谁？")
VIA_HEADQUARTERS = ("{ref}的总部位于哪个国家？", "{ref}设在哪个国家的首都？")
FOUNDED_EARLIER = "{x}和{y}，哪个成立得更早？"
MORE_INHABITANTS = "{x}和{y}，哪个人口更多？"
