"""The words the rule-based spec generator reads: synonyms, document nouns, fillers, negations, numerals.

Data tables for :mod:`~llama_index_ext_recursive.auto.rules`, in English and
Chinese; kept apart so the rules read as an algorithm and the words can be
reviewed (and extended) as lists.
"""

from __future__ import annotations

import re
from typing import Dict, Optional, Set, Tuple

from llama_index.core.vector_stores.types import FilterOperator

# Built-in synonyms: phrase -> candidate canonical values, first one present in
# the key's vocabulary wins (so "Chinese" works whether the index stores "zh",
# "zh-cn" or "chinese"). A phrase applies to whichever key holds that value.
BUILTIN_SYNONYMS: Dict[str, Tuple[str, ...]] = {
    # languages
    "english": ("en", "eng", "english", "en-us", "en-gb"),
    "英文": ("en", "eng", "english", "en-us", "en-gb"),
    "英语": ("en", "eng", "english", "en-us", "en-gb"),
    "chinese": ("zh", "zh-cn", "zh-hans", "chinese", "cn", "zho", "chi"),
    "中文": ("zh", "zh-cn", "zh-hans", "chinese", "cn", "zho", "chi"),
    "汉语": ("zh", "zh-cn", "zh-hans", "chinese", "cn", "zho", "chi"),
    "简体中文": ("zh", "zh-cn", "zh-hans", "chinese", "cn"),
    # kinds of source
    "blog post": ("blog",),
    "博客": ("blog",),
    "博文": ("blog",),
    "encyclopedia entry": ("encyclopedia",),
    "encyclopaedia": ("encyclopedia",),
    "百科": ("encyclopedia",),
    "百科全书": ("encyclopedia",),
    "user manual": ("manual",),
    "手册": ("manual", "handbook"),
    "使用手册": ("manual",),
    "操作手册": ("manual",),
    "说明书": ("manual",),
    "employee handbook": ("handbook",),
    "staff handbook": ("handbook",),
    "员工手册": ("handbook",),
    "指南": ("handbook", "guide"),
    # categories
    "美食": ("food",),
    "食物": ("food",),
    "饮食": ("food",),
    "食品": ("food",),
    "生物": ("biology",),
    "生物学": ("biology",),
    "能源": ("energy",),
    "历史": ("history",),
    "体育": ("sports", "sport"),
    "运动": ("sports", "sport"),
    "软件": ("software",),
    "政策": ("policy",),
    "环境": ("environment",),
    "环保": ("environment",),
    "交通": ("transport", "transportation"),
    "transportation": ("transport",),
    "园艺": ("gardening",),
    # countries, nationalities, cuisines (a phrase applies to whichever key holds one of its values)
    **{phrase: values for values, phrases in (
        (("thai", "thailand"), ("泰国", "泰式", "泰国菜", "泰餐", "thailand", "thai")),
        (("italian", "italy"), ("意大利", "意式", "意大利菜", "意餐", "italy", "italian")),
        (("mexican", "mexico"), ("墨西哥", "墨西哥菜", "mexico", "mexican")),
        (("french", "france"), ("法国", "法式", "法国菜", "法餐", "france", "french")),
        (("japanese", "japan"), ("日本", "日式", "日本菜", "日料", "日餐", "japan", "japanese")),
        (("chinese", "china"), ("中国", "中式", "中餐", "中国菜", "china")),
        (("korean", "south korea", "korea"), ("韩国", "韩式", "韩国菜", "korea", "korean",
                                              "south korea", "south korean")),
        (("indian", "india"), ("印度", "印度菜", "india", "indian")),
        (("american", "usa", "us", "united states"), ("美国", "美式", "america", "american",
                                                       "usa", "united states")),
        (("british", "uk", "united kingdom", "england"), ("英国", "英式", "britain", "british",
                                                          "uk", "united kingdom")),
        (("german", "germany"), ("德国", "德式", "germany", "german")),
        (("spanish", "spain"), ("西班牙", "spain", "spanish")),
        (("vietnamese", "vietnam"), ("越南", "越南菜", "vietnam", "vietnamese")),
        (("greek", "greece"), ("希腊", "greece", "greek")),
        (("hong kong",), ("香港", "港产", "hong kong")),
        (("taiwan",), ("台湾", "taiwan")),
    ) for phrase in phrases},
    # genres and kinds of work
    "喜剧": ("comedy",), "喜剧片": ("comedy",), "comedies": ("comedy",),
    "恐怖": ("horror",), "恐怖片": ("horror",), "惊悚": ("thriller",), "惊悚片": ("thriller",),
    "剧情片": ("drama",), "剧情": ("drama",), "纪录片": ("documentary",), "documentaries": ("documentary",),
    "动画": ("animation", "animated"), "动画片": ("animation", "animated"), "animated": ("animation",),
    "科幻": ("sci-fi", "science fiction", "scifi"), "科幻片": ("sci-fi", "science fiction", "scifi"),
    "science fiction": ("sci-fi", "scifi"), "爱情": ("romance",), "爱情片": ("romance",),
    "动作片": ("action",), "悬疑": ("mystery",), "悬疑片": ("mystery",), "奇幻": ("fantasy",),
    "短片": ("short",), "长片": ("feature",), "剧集": ("series",), "电视剧": ("series",),
    # courses
    "前菜": ("starter", "appetizer"), "开胃菜": ("appetizer", "starter"), "appetizer": ("starter",),
    "主菜": ("main", "main course"), "甜点": ("dessert",), "甜品": ("dessert",), "配菜": ("side",),
    "汤": ("soup",), "沙拉": ("salad",), "早餐": ("breakfast",),
    # fields of study
    "自然语言处理": ("nlp", "natural language processing"), "natural language processing": ("nlp",),
    "计算机视觉": ("vision", "computer vision", "cv"), "视觉": ("vision", "computer vision", "cv"), "computer vision": ("vision", "cv"),
    "机器人": ("robotics",), "机器人学": ("robotics",), "系统": ("systems",), "安全": ("security",),
    "理论": ("theory",), "机器学习": ("machine learning", "ml"), "machine learning": ("ml",),
    "物理": ("physics",), "化学": ("chemistry",), "数学": ("mathematics", "math"), "经济": ("economics",),
    "医学": ("medicine",), "法律": ("law", "legal"),
    # kinds of document and their stage
    "论文": ("paper",), "期刊论文": ("journal article",), "会议论文": ("conference paper",),
    "技术报告": ("technical report",), "学位论文": ("thesis",), "毕业论文": ("thesis",), "综述": ("survey",),
    "报告": ("report",), "合同": ("contract",), "发票": ("invoice",), "邮件": ("email",),
    "新闻": ("news",), "专利": ("patent",), "草稿": ("draft",), "初稿": ("draft",),
    "预印本": ("preprint",), "终稿": ("final",), "定稿": ("final",), "正式版": ("final",),
    "已撤稿": ("retracted",), "撤稿": ("retracted",), "评论": ("review",), "影评": ("review",),
    # kinds of home
    "flat": ("apartment", "flat"), "公寓": ("apartment", "flat"), "别墅": ("villa",),
    "单间": ("room",), "开间": ("studio",), "一居室": ("studio", "one-bedroom"),
    # the state of a listing
    "可租": ("available",), "待租": ("available",), "在售": ("available",), "空置": ("available",),
    "可用": ("available",), "已预订": ("reserved",), "已预定": ("reserved",), "预订中": ("reserved",),
    "已租": ("let", "rented"), "已出租": ("let", "rented"), "租出去": ("let", "rented"),
    "已租出": ("let", "rented"), "rented": ("let",), "已售": ("sold",), "售出": ("sold",),
    # levels and places of work
    "初级": ("junior", "entry"), "中级": ("mid", "intermediate"), "高级": ("senior",),
    "资深": ("senior",), "远程": ("remote",), "remotely": ("remote",), "在家办公": ("remote",),
    # functions of a job or a team
    "工程": ("engineering",), "工程师": ("engineering", "engineer"), "研发": ("engineering", "r&d"),
    "开发": ("engineering", "development"), "设计": ("design",), "设计师": ("design", "designer"),
    "市场": ("marketing",), "营销": ("marketing",), "市场营销": ("marketing",), "销售": ("sales",),
    "数据": ("data",), "数据分析": ("data", "analytics"), "客服": ("support", "customer service"),
    "客户支持": ("support",), "技术支持": ("support",), "财务": ("finance",), "金融": ("finance",),
    "人力资源": ("hr", "human resources"), "人事": ("hr", "human resources"), "法务": ("legal",),
    "运营": ("operations", "ops"), "产品": ("product",),
}

# Nouns that name a kind of document (or of thing the documents are), in both
# languages: next to one, a value word is a facet ("thai 菜谱", "French films").
KIND_WORDS_EN = {
    "recipe", "recipes", "dish", "dishes", "film", "films", "movie", "movies", "paper", "papers",
    "book", "books", "review", "reviews", "contract", "contracts", "invoice", "invoices",
    "ticket", "tickets", "email", "emails", "product", "products", "episode", "episodes",
    "song", "songs", "story", "stories", "note", "notes", "thesis", "theses", "preprint", "preprints",
    "one", "ones", "kind", "kinds", "type", "types", "stuff", "work", "works", "title", "titles",
    "listing", "listings", "property", "properties", "home", "homes", "rental", "rentals",
    "job", "jobs", "posting", "postings", "position", "positions", "opening", "openings",
    "vacancy", "vacancies", "course", "courses", "event", "events", "place", "places",
    "hire", "hires", "role", "roles", "team", "teams",
}
KIND_WORDS_ZH = {
    "菜谱", "食谱", "做法", "菜", "菜品", "菜式", "料理", "电影", "影片", "片子", "片", "论文", "书",
    "书籍", "评论", "影评", "合同", "发票", "工单", "邮件", "产品", "剧", "作品", "报告", "预印本",
    "房源", "房子", "房屋", "住房", "职位", "岗位", "岗", "工作", "招聘", "活动", "课程",
}
# English words for a key or its unit, in Chinese: "runtime under 100" / "片长不到100".
KEY_WORDS_ZH: Dict[str, Tuple[str, ...]] = {
    "minute": ("分钟", "分"), "minutes": ("分钟", "分"), "hour": ("小时",), "hours": ("小时",),
    "page": ("页", "页数"), "pages": ("页", "页数"), "citation": ("次引用", "引用", "引用数", "引用量", "被引", "被引用", "引用次数", "被引次数", "被引用次数", "次"),
    "citations": ("次引用", "引用", "引用数", "引用量", "被引", "被引用", "引用次数", "被引次数", "被引用次数", "次"), "star": ("星",), "stars": ("星",),
    "serving": ("人份",), "servings": ("人份",), "day": ("天",), "days": ("天",), "word": ("字",),
    "words": ("字",), "dollar": ("美元", "刀"), "dollars": ("美元", "刀"), "usd": ("美元",),
    "yuan": ("元", "块"), "rmb": ("元", "块"), "cny": ("元",), "episode": ("集",), "episodes": ("集",),
    "runtime": ("片长", "时长"), "duration": ("时长",), "length": ("长度", "篇幅", "片长"),
    "time": ("时间", "用时", "耗时"), "rating": ("评分", "分"), "score": ("评分", "得分", "分"),
    "price": ("价格", "售价"), "cost": ("费用", "成本"), "budget": ("预算",), "count": ("数量",),
    "views": ("播放量", "观看次数"), "downloads": ("下载量",), "calories": ("卡路里", "大卡"),
    "year": ("年",), "years": ("年",), "rent": ("租金", "月租", "房租"), "salary": ("薪资", "薪水", "工资", "月薪", "年薪"),
    "pay": ("薪资", "工资"), "experience": ("经验", "工作经验"), "bedrooms": ("居室", "卧室", "室"),
    "bedroom": ("居室", "卧室", "室"), "area": ("面积",), "age": ("年龄",), "size": ("大小", "面积"),
    # nouns for string keys: next to one, a value is a facet ("泰国菜系", "剧情类型")
    "cuisine": ("菜系", "风味"), "course": ("菜",), "genre": ("类型", "题材", "类"),
    "country": ("国家", "地区"), "director": ("导演",), "author": ("作者",), "chef": ("厨师", "大厨"),
    "format": ("形式", "格式"), "field": ("领域", "方向"), "status": ("状态",), "lab": ("实验室",),
    "venue": ("会议", "期刊"), "kind": ("类型", "种类"), "type": ("类型",), "category": ("类别", "类"),
    "language": ("语言",), "region": ("地区",), "department": ("部门",), "team": ("团队",),
}
# Words that measure a quantity (a number next to one is read with the key that has it).
UNIT_WORDS_EN = {
    "minute", "minutes", "min", "mins", "hour", "hours", "page", "pages", "citation", "citations",
    "star", "stars", "serving", "servings", "day", "days", "word", "words", "dollar", "dollars",
    "usd", "yuan", "rmb", "cny", "episode", "episodes", "calories", "kcal", "views", "downloads",
    "euro", "euros", "eur", "bedroom", "bedrooms", "year", "years",
}
UNIT_ALIASES = {"min": "minutes", "mins": "minutes", "kcal": "calories"}
# a key whose name says "per period" takes the period as its unit: "6000 a month" for monthly_rent
PERIOD_UNITS = {
    "monthly": ("a month", "per month", "/month", "/mo", "a mo", "每月", "每个月", "一个月", "/月"),
    "weekly": ("a week", "per week", "/week", "每周"),
    "daily": ("a day", "per day", "/day", "每天", "每日"),
    "nightly": ("a night", "per night", "/night", "每晚"),
    "yearly": ("a year", "per year", "/year", "每年"), "annual": ("a year", "per year", "/year", "每年"),
    "hourly": ("an hour", "per hour", "/hour", "/hr", "每小时"),
}
# currency symbols written before the number, by the unit they stand for
CURRENCY_PREFIXES = {"yuan": ("¥", "￥", "rmb"), "cny": ("¥", "￥", "rmb"), "rmb": ("¥", "￥", "rmb"),
                     "dollar": ("$", "usd"), "dollars": ("$", "usd"), "usd": ("$",),
                     "euro": ("€",), "euros": ("€",), "eur": ("€",)}

# Words that name a document or a result: a value next to one is a facet.
DOC_NOUNS_EN = {
    "article", "articles", "doc", "docs", "document", "documents", "post", "posts",
    "entry", "entries", "page", "pages", "text", "texts", "source", "sources",
    "result", "results", "hit", "hits", "match", "matches", "passage", "passages",
    "chunk", "chunks", "item", "items", "record", "records", "paper", "papers",
    "report", "reports", "publication", "publications", "material", "materials",
    "content", "contents", "writing", "writings", "blog", "blogs", "manual",
    "manuals", "handbook", "handbooks", "encyclopedia", "encyclopedias", "guide",
    "guides", "file", "files", "literature", "category", "version", "versions",
    "translation", "translations", "edition", "editions",
}
DOC_NOUNS_ZH = {
    "文章", "文档", "资料", "内容", "文件", "条目", "结果", "材料", "帖子", "博客",
    "百科", "手册", "指南", "说明书", "信息", "文献", "报告", "博文", "百科全书",
    "使用手册", "员工手册", "操作手册", "版本", "译本",
}
# Function words and request phrasing: neither topic nor facet; removed from the
# query text when next to something that matched.
FILLER_EN = {
    "a", "an", "the", "about", "on", "in", "of", "for", "from", "to", "with", "by",
    "regarding", "concerning", "related", "relating", "covering", "and", "or",
    "any", "anything", "all", "some", "only", "just", "please", "me", "us", "i",
    "show", "find", "give", "get", "list", "search", "retrieve", "fetch", "want",
    "need", "looking", "look", "what", "which", "that", "is", "are", "was", "were",
    "be", "been", "has", "have", "had", "do", "does", "did", "published", "written",
    "released", "dated", "say", "says", "said", "write", "wrote", "describe",
    "describes", "cover", "covers", "mention", "mentions", "discuss", "discusses",
    "there", "those", "these", "their", "its", "much", "many", "can", "could",
    "would", "should", "will", "up", "also", "other", "whatever", "dating", "got",
    "recent", "latest", "newest", "new", "available", "here", "but", "anything", "everything",
    "ones", "one", "made", "directed", "produced", "cooked", "released", "set",
    "near", "around", "at", "into", "within", "per", "via", "across", "than", "as", "like",
    "yet", "already", "still", "currently", "right", "now",
}
# words between a value and the noun they both modify ("French new wave")
NOUN_MODIFIERS_EN = {"new", "recent", "latest", "newest", "old", "older", "other"}
# after a value word, a determiner shows the word is a verb ("films that feature a ...")
DETERMINERS_EN = {"a", "an", "the", "my", "your", "his", "her", "their", "our", "its",
                  "me", "us", "you", "him", "them", "it"}
# after "the X", a verb of being shows X is one thing talked about ("the room was smaller")
COPULAS_EN = {"is", "was", "are", "were", "has", "had", "looks", "looked", "seems", "seemed"}
# comparison words before a number ("under 30", "超过60"): the numeric rules and "key op value" read these
COMPARISON_BEFORE = {
    "more than": FilterOperator.GT, "greater than": FilterOperator.GT, "longer than": FilterOperator.GT, "higher than": FilterOperator.GT,
    "over": FilterOperator.GT, "above": FilterOperator.GT, "exceeding": FilterOperator.GT, "in excess of": FilterOperator.GT,
    "at least": FilterOperator.GTE, "no less than": FilterOperator.GTE, "not less than": FilterOperator.GTE, "no fewer than": FilterOperator.GTE,
    "no shorter than": FilterOperator.GTE, "not under": FilterOperator.GTE, "minimum of": FilterOperator.GTE, "a minimum of": FilterOperator.GTE,
    "less than": FilterOperator.LT, "fewer than": FilterOperator.LT, "shorter than": FilterOperator.LT, "lower than": FilterOperator.LT,
    "under": FilterOperator.LT, "below": FilterOperator.LT, "beneath": FilterOperator.LT,
    "at most": FilterOperator.LTE, "no more than": FilterOperator.LTE, "not more than": FilterOperator.LTE, "no longer than": FilterOperator.LTE,
    "not over": FilterOperator.LTE, "no higher than": FilterOperator.LTE, "up to": FilterOperator.LTE, "within": FilterOperator.LTE,
    "maximum of": FilterOperator.LTE, "a maximum of": FilterOperator.LTE, "max": FilterOperator.LTE,
    "exactly": FilterOperator.EQ,
    "大于等于": FilterOperator.GTE, "小于等于": FilterOperator.LTE,
    "超过": FilterOperator.GT, "多于": FilterOperator.GT, "大于": FilterOperator.GT, "高于": FilterOperator.GT, "长于": FilterOperator.GT, "超出": FilterOperator.GT,
    "至少": FilterOperator.GTE, "不少于": FilterOperator.GTE, "不低于": FilterOperator.GTE, "不短于": FilterOperator.GTE, "不小于": FilterOperator.GTE,
    "最少": FilterOperator.GTE, "起码": FilterOperator.GTE,
    "不到": FilterOperator.LT, "少于": FilterOperator.LT, "小于": FilterOperator.LT, "低于": FilterOperator.LT, "短于": FilterOperator.LT, "不足": FilterOperator.LT,
    "未满": FilterOperator.LT,
    "最多": FilterOperator.LTE, "不超过": FilterOperator.LTE, "不多于": FilterOperator.LTE, "不高于": FilterOperator.LTE, "不长于": FilterOperator.LTE,
    "不大于": FilterOperator.LTE, "至多": FilterOperator.LTE, "最长": FilterOperator.LTE,
}
# what a negation does to a comparison ("not before 2020" is ">= 2020", "not from 2021" is "!= 2021")
NEGATED_OPERATOR = {
    FilterOperator.EQ: FilterOperator.NE, FilterOperator.GT: FilterOperator.LTE,
    FilterOperator.GTE: FilterOperator.LT, FilterOperator.LT: FilterOperator.GTE,
    FilterOperator.LTE: FilterOperator.GT,
}
# Chinese measure words of a result count ("前5部", "给我3篇")
ZH_CLASSIFIERS = "个|条|篇|项|份|部|本|首|集"
QUESTION_EN = {"how", "why", "when", "where", "who", "whom", "whose", "what", "which"}
FILLER_ZH = {
    "的", "了", "关于", "有关", "相关", "或", "或者", "和", "与", "及", "以及", "中", "里",
    "在", "是", "有", "哪些", "有哪些", "类", "方面", "领域", "发布", "发表", "写", "请",
    "给", "给我", "我", "找", "查", "查找", "搜索", "返回", "只", "只要", "仅", "之间",
    "期间", "一些", "所有", "要", "看", "看看", "显示", "列出", "上", "下", "里面",
    "以外", "之外", "最新", "近期", "有没有", "是否", "有无", "还是", "或是", "由", "做", "的话",
    # making and publishing, like "made", "released" in English
    "拍", "拍摄", "拍的", "出品", "制作", "上映", "出版", "发行", "推出", "推荐", "还有", "其他", "其它", "任何",
}
QUESTION_ZH = ("什么", "如何", "为什么", "怎么", "怎样", "哪", "吗", "呢", "谁", "多少", "几")
# A Chinese value may be glued to one of these by jieba ("英文版", "生物类").
ZH_SUFFIXES = ("类", "版", "方面", "领域", "类别")
ZH_FACET_NEXT = {"类", "方面", "领域", "类别", "相关", "版"}
ZH_GLUE = FILLER_ZH | set(ZH_SUFFIXES) | {"非", "不是", "除了"}
# A negation right before a value (fillers allowed between) makes it != / nin.
NEGATION_EN = re.compile(
    r"(?<![A-Za-z])(?:not|isn't|aren't|wasn't|weren't|don't|doesn't|didn't|never|"
    r"except(?:\s+for)?|excluding|exclude|without|other\s+than|apart\s+from|anything\s+but|"
    r"rather\s+than|instead\s+of|non|no)"
    r"(?:\s+|\s*-\s*)(?:(?:in|the|a|an|any|are|is|be|from|written|published|made|directed|"
    r"produced|cooked|released|set|by|of|with)\s+)*$",
    re.IGNORECASE,
)
LIST_JOINER = re.compile(r"^\s*(?:,|、|，|and|or|nor|和|或|或者|与|及|以及)?\s*(?:or|and)?\s*$", re.IGNORECASE)
# the same negations one token each, for a negation too far from a value to be sure of
NEGATION_TOKENS_EN = {"not", "isn't", "aren't", "wasn't", "weren't", "don't", "doesn't", "didn't",
                      "never", "no", "non", "without", "except", "excluding", "exclude"}
NEGATION_TOKENS_ZH = {"非", "不是", "并非", "而非", "除了", "除", "不要", "别", "排除", "不包括", "不含",
                      "不包含", "不看"}
NEGATION_ZH = re.compile(r"(?:非|不是|并非|而非|除了|除|不要|别|排除|不包括|不含|不包含|不看)"
                         r"\s*(?:由|在|是|于|来自)?\s*$")
# "泰国菜除外", "除了X以外": a negation after the value
NEGATION_ZH_AFTER = re.compile(r"^\s*(?:除外|以外|之外)")
# Words that end the reach of a negation: "not spicy, but thai" negates nothing of "thai"
CLAUSE_BREAK = re.compile(r"[,.;:!?，。；：！？]|(?<!anything )(?<!nothing )(?<!all )\bbut\b|"
                          r"\b(?:however|though|although)\b|但是|但|而是|不过",
                          re.IGNORECASE)
DISJUNCTION = re.compile(r"(?<![A-Za-z])(?:or|either)(?![A-Za-z])|或者|或是|还是|要么|或", re.IGNORECASE)

NUMBER_WORDS = {
    "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
    "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "fifteen": 15,
    "twenty": 20, "thirty": 30, "fifty": 50,
}
ZH_DIGITS = {"零": 0, "〇": 0, "一": 1, "二": 2, "两": 2, "三": 3, "四": 4, "五": 5,
              "六": 6, "七": 7, "八": 8, "九": 9}
NUM_WORD_RE = "|".join(sorted(NUMBER_WORDS, key=len, reverse=True))
# what a magnitude after a number multiplies it by (3万, 1.5亿, 5k, 2M, two million)
MAGNITUDES = {
    "万": 1e4, "亿": 1e8, "千": 1e3, "百万": 1e6, "千万": 1e7, "万亿": 1e12,
    "k": 1e3, "K": 1e3, "M": 1e6, "thousand": 1e3, "million": 1e6, "billion": 1e9,
}
ZH_NUM_RE = "[零〇一二两三四五六七八九十百]+"


def parse_count(text: str) -> Optional[int]:
    """An Arabic, English or Chinese numeral (up to 999) as an int."""
    text = text.strip().lower()
    if text.isdigit():
        return int(text)
    if text in NUMBER_WORDS:
        return NUMBER_WORDS[text]
    if not text or any(ch not in ZH_DIGITS and ch not in "十百" for ch in text):
        return None
    total, current = 0, 0
    for ch in text:
        if ch in ZH_DIGITS:
            current = ZH_DIGITS[ch]
        elif ch == "十":
            total += (current or 1) * 10
            current = 0
        else:  # 百
            total += (current or 1) * 100
            current = 0
    return total + current


def plural_forms(term: str) -> Set[str]:
    """The term with its last word in singular and plural form (English only)."""
    forms = {term}
    head, _, last = term.rpartition(" ")
    if not last.isalpha() or len(last) < 3:
        return forms
    prefix = f"{head} " if head else ""
    if last.endswith("sis"):
        forms.add(prefix + last[:-3] + "ses")  # thesis -> theses, analysis -> analyses
    elif last.endswith("y") and last[-2] not in "aeiou":
        forms.add(prefix + last[:-1] + "ies")
    elif last.endswith(("s", "x", "ch", "sh")):
        forms.add(prefix + last + "es")
    else:
        forms.add(prefix + last + "s")
    if last.endswith("ses") and len(last) > 4:
        forms.add(prefix + last[:-3] + "sis")
    if last.endswith("ies") and len(last) > 4:
        forms.add(prefix + last[:-3] + "y")
    elif last.endswith("s") and not last.endswith("ss") and len(last) > 4:
        forms.add(prefix + last[:-1])
    return forms
