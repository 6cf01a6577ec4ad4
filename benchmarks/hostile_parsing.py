"""How long the auto-retriever rules take on crafted long queries (issue 23).

An app that passes user text to ``RuleBasedSpecGenerator`` must not be stalled
by a query built to be slow: repeated years, values, counts, negations, ranges,
long digit runs, Chinese runs and runs of spaces, at 1, 10 and 100 kB. Each
query runs once (after one warm-up of the generator on a normal query) with a
time limit; the report is the seconds per query and the worst, against a
normal query. ``--read-all`` lifts ``MAX_RULE_CHARS`` so the rules read every
character: the cost of the rules themselves, which should grow in proportion
to the query's length.

Usage::

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/hostile_parsing.py [--sizes 1000,10000,100000] [--limit 60] [--read-all]

Figures: docs/BENCHMARKS.md, "Hostile input: rule parsing time (issue 23)".
"""

from __future__ import annotations

from datetime import date

from harness import cli, timing
from harness.report import Table
from llama_index.core.vector_stores.types import MetadataInfo, VectorStoreInfo

# one unit of each crafted query; repeated to the size asked
UNITS = {
    "years": "2019 ",
    "year ranges": "between 2019 and 2021 ",
    "negated years": "not from 2020 ",
    "values": "biology food travel ",
    "negated values": "not biology ",
    "or lists": "biology or food or ",
    "counts": "top 5 ",
    "numbers": "under 30 minutes ",
    "number ranges": "between 1.5万 and 2万 yuan ",
    "digits": "1",
    "thousands": "1,000,",
    "exponents": "1e3",
    "negations": "not ",
    "chinese values": "生物 ",
    "chinese run": "关于蜜蜂的文章",
    "chinese negations": "不是 ",
    "chinese counts": "前5部",
    "key ops": "year >= ",
    "punctuation": "'\"(),;:-",
    "spaces": " ",
    "key op values": "monthly_rent < 3万 ",
    "chinese not-values": "不是生物 ",
    "chinese ranges": "在1到2之间",
    "filler": "the ",
    "of phrases": "the history of food ",
    "requests": "give me 3 ",
}
NORMAL = "biology articles in English from 2021, top 3"
NORMAL_ZH = "2021年以后的生物文章，前3篇"


def generators():
    from llama_index_ext_recursive import load_sample_documents
    from llama_index_ext_recursive.auto.rules import RuleBasedSpecGenerator
    from llama_index_ext_recursive.sample import sample_vector_store_info
    from llama_index_ext_recursive.schema import metadata_vocabulary

    docs = load_sample_documents()
    sample = RuleBasedSpecGenerator(sample_vector_store_info(), metadata_vocabulary(docs), today=date(2026, 6, 1))
    rent_info = VectorStoreInfo(
        content_info="Rental listings",
        metadata_info=[
            MetadataInfo(name="city", type="str", description="City of the property"),
            MetadataInfo(name="monthly_rent", type="int", description="Monthly rent in yuan"),
            MetadataInfo(name="minutes", type="int", description="Commute in minutes"),
        ],
    )
    rent = RuleBasedSpecGenerator(
        rent_info,
        {"city": {"shanghai", "beijing"}, "monthly_rent": {3000, 6000}, "minutes": {10, 40}},
        today=date(2026, 6, 1),
    )
    return {"sample": sample, "numeric": rent}


def main(argv: list[str] | None = None) -> None:
    from llama_index_ext_recursive.auto import rules

    p = cli.parser(__doc__)
    p.add_argument("--sizes", type=cli.csv(int), default=[1000, 10000, 100000])
    p.add_argument("--limit", type=int, default=60, help="seconds before a query counts as hung")
    p.add_argument(
        "--read-all",
        action="store_true",
        help="read every character for filters (lift MAX_RULE_CHARS): the rules' own cost",
    )
    args = p.parse_args(argv)
    if args.read_all:
        rules.MAX_RULE_CHARS = max(args.sizes)
    gens = generators()
    for gen in gens.values():  # warm up: compiled patterns, and jieba's dictionary for Chinese
        gen.read(NORMAL)
        gen.read(NORMAL_ZH)

    def timed(generator, query: str) -> float:
        return timing.limited_seconds(lambda: generator.read(query), args.limit)

    normal = min(timed(gens["sample"], NORMAL) for _ in range(20))
    print(f"normal query: {normal * 1000:.2f} ms")
    worst = {size: (0.0, "") for size in args.sizes}
    table = Table(["unit", *(f"{size // 1000} kB" for size in args.sizes)])
    print("seconds, the worse generator's; > limit: hung")
    print(table.header())
    for name, unit in UNITS.items():
        row = []
        for size in args.sizes:
            query = (unit * (size // len(unit) + 1))[:size]
            seconds = max(timed(gen, query) for gen in gens.values())
            row.append(f"{seconds:.3f}" if seconds != float("inf") else f"> {args.limit}")
            if seconds > worst[size][0]:
                worst[size] = (seconds, name)
        print(table.row(name, *row), flush=True)
    for size, (seconds, name) in worst.items():
        print(f"worst at {size // 1000} kB: {seconds:.3f} s ({name})")


if __name__ == "__main__":
    main()
