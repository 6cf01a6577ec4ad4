"""The words the rule-based spec generator reads: synonyms, document nouns, fillers, negations, numerals.

Data tables for :mod:`~llama_index_ext_recursive.auto.rules`, in English and
Chinese; kept apart so the rules read as an algorithm and the words can be
reviewed (and extended) as lists.
"""

from __future__ import annotations

import re
from typing import Dict, Optional, Set, Tuple

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
}

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
    "recent", "latest", "newest", "new", "available", "here",
}
QUESTION_EN = {"how", "why", "when", "where", "who", "whom", "whose", "what", "which"}
FILLER_ZH = {
    "的", "了", "关于", "有关", "相关", "或", "或者", "和", "与", "及", "以及", "中", "里",
    "在", "是", "有", "哪些", "有哪些", "类", "方面", "领域", "发布", "发表", "写", "请",
    "给", "给我", "我", "找", "查", "查找", "搜索", "返回", "只", "只要", "仅", "之间",
    "期间", "一些", "所有", "要", "看", "看看", "显示", "列出", "上", "下", "里面",
    "以外", "之外", "最新", "近期", "有没有", "是否", "有无",
}
QUESTION_ZH = ("什么", "如何", "为什么", "怎么", "怎样", "哪", "吗", "呢", "谁", "多少", "几")
# A Chinese value may be glued to one of these by jieba ("英文版", "生物类").
ZH_SUFFIXES = ("类", "版", "方面", "领域", "类别")
ZH_FACET_NEXT = {"类", "方面", "领域", "类别", "相关"}
ZH_GLUE = FILLER_ZH | set(ZH_SUFFIXES) | {"非", "不是", "除了"}
# A negation right before a value (fillers allowed between) makes it != / nin.
NEGATION_EN = re.compile(
    r"(?<![A-Za-z])(?:not|except(?:\s+for)?|excluding|exclude|without|other\s+than|non|no)"
    r"(?:\s+|\s*-\s*)(?:(?:in|the|a|an|any|are|is|from|written|published|by|of)\s+)*$",
    re.IGNORECASE,
)
LIST_JOINER = re.compile(r"^\s*(?:,|、|，|and|or|nor|和|或|或者|与|及|以及)?\s*(?:or|and)?\s*$", re.IGNORECASE)
NEGATION_ZH = re.compile(r"(?:非|不是|除了|除|不要|排除|不包括|不含|不包含|不看)\s*$")

NUMBER_WORDS = {
    "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
    "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "fifteen": 15,
    "twenty": 20, "thirty": 30, "fifty": 50,
}
ZH_DIGITS = {"零": 0, "〇": 0, "一": 1, "二": 2, "两": 2, "三": 3, "四": 4, "五": 5,
              "六": 6, "七": 7, "八": 8, "九": 9}
NUM_WORD_RE = "|".join(sorted(NUMBER_WORDS, key=len, reverse=True))
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
    if last.endswith("y") and last[-2] not in "aeiou":
        forms.add(prefix + last[:-1] + "ies")
    elif last.endswith(("s", "x", "ch", "sh")):
        forms.add(prefix + last + "es")
    else:
        forms.add(prefix + last + "s")
    if last.endswith("ies") and len(last) > 4:
        forms.add(prefix + last[:-3] + "y")
    elif last.endswith("s") and not last.endswith("ss") and len(last) > 4:
        forms.add(prefix + last[:-1])
    return forms
