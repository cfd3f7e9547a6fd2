"""The semantic cache's per-entry thresholds against every static threshold, on a labelled workload.

``python -m benchmarks.semantic_cache --json FILE [--smoke]``

The workload (``workload``) is generated and labelled here: questions in paraphrase groups whose
members have one answer (known equivalence), drawn with Zipf popularity, each worded from one of
several templates with optional openers and closers, so that exact repeats are rare. Half of the
families have near-miss negatives: groups a word apart with another answer ("the capital of
Austria" / "of Australia", "5 miles to km" / "5 km to miles", "is A larger than B" / "B than A"). The
other half are open questions on distinct topics, worded freely. The encoder is the light lexical one
the simulated engines serve (``engines.textvec``). A second workload (``in_context``, reported under
``in_context``) is the same questions each after a context ("for my blog post, ...", 16 of them):
prompts of different groups then share words, as prompts built from one template do.

Both policies run the same cache: the nearest entry in the scope, a miss inserts the model's answer,
a request not served is sent to the model. A static threshold serves whenever the similarity clears
it; the adaptive policy is the gateway's (``gateway.semcache.policy``), with its exploration and its
verification share, and inserts only when the model's answer differs from the neighbour's (vCache).
The error rate is the share of requests answered with a wrong cached answer; ``observed_error_rate``
comes with its Wilson interval, and the target is met when the interval's low end is at or under it.
``best_static`` is the static threshold with the highest hit rate among those whose error rate is at
or under the target. ``lookup_ms_p50`` is one lookup (encode the prompt, search the scope's index,
decide) against a scope holding ``--entries`` entries, in this process.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import orjson

from benchmarks.smoke import add_smoke_flag, apply_smoke
from engines import textvec
from evalkit.stats import wilson
from gateway.semcache.index import Entry, ScopeIndex
from gateway.semcache.policy import Policy
from gateway.upstream import UpstreamPool

# ------------------------------------------------------------------------------ the workload

OPENERS = ["", "", "hey, ", "quick question: ", "hi! ", "I was wondering, ", "please help: ", "so ", "ok ",
           "hello there, ", "one more: ", "question - ", "good morning! ", "help, "]  # fmt: skip
CLOSERS = ["", "", " thanks", " thank you!", " please", " asap", " (for a quiz)", " cheers", "??", " thx",
           " - need it for homework", " in one line", " briefly", " :)"]  # fmt: skip

NEAR_MISS_FAMILIES = {
    "capital": (
        [
            "What is the capital of {x}?",
            "What's the capital city of {x}?",
            "Name the capital of {x}.",
            "Which city is the capital of {x}?",
            "Tell me the capital of {x}",
            "capital of {x}?",
            "What city serves as the capital of {x}?",
        ],
        [
            "Austria",
            "Australia",
            "Iran",
            "Iraq",
            "Niger",
            "Nigeria",
            "Guinea",
            "Guyana",
            "Slovakia",
            "Slovenia",
            "Sweden",
            "Swaziland",
            "Mali",
            "Malawi",
            "Gambia",
            "Zambia",
            "Congo",
            "Togo",
            "Columbia",
            "Colombia",
        ],
    ),
    "convert": (
        [
            "Convert {x}.",
            "How much is {x}?",
            "What is {x}?",
            "{x}",
            "Please convert {x}",
            "Could you convert {x} for me?",
            "What do you get converting {x}?",
        ],
        [
            f"{n} {a} to {b}"
            for n in ("5", "50", "12", "21")
            for a, b in (
                ("miles", "kilometers"),
                ("kilometers", "miles"),
                ("pounds", "kilograms"),
                ("kilograms", "pounds"),
                ("feet", "meters"),
                ("meters", "feet"),
            )
        ],
    ),  # fmt: skip
    "compare": (
        [
            "Is {x}?",
            "Tell me whether {x}.",
            "Is it true that {x}?",
            "Check if {x}",
            "Would you say {x}?",
            "Quick check: {x}?",
        ],
        [
            f"{a} is {rel} than {b}"
            for a, b in (
                ("Jupiter", "Saturn"),
                ("Saturn", "Jupiter"),
                ("Mars", "Venus"),
                ("Venus", "Mars"),
                ("an elephant", "a whale"),
                ("a whale", "an elephant"),
            )
            for rel in ("larger", "smaller")
        ],
    ),  # fmt: skip
    "support": (
        [
            "How do I reset my password in the mobile banking app on {x}? I tried the reset link in the email, it "
            "opened the browser, showed an expired token error and sent me back to the login screen",
            "I can't reset my password in the mobile banking app on {x}: the reset link in the email opens the "
            "browser, shows an expired token error and sends me back to the login screen. What are the steps?",
            "Password reset in the mobile banking app on {x} fails: the email reset link opens the browser, shows "
            "an expired token error, then the login screen again. How do I reset it?",
            "The reset link in the email opened the browser, showed an expired token error and sent me back to "
            "the login screen: how can I reset my password in the mobile banking app on {x}?",
        ],
        ["an iPhone", "an iPad", "Android", "a Android tablet", "Windows", "a Mac", "Linux", "ChromeOS"],
    ),
    "recipe": (
        [
            "My bread recipe for {x} people needs 500 grams of flour, 10 grams of salt and 350 ml of water; how do I scale it?",
            "How should I scale a bread recipe of 500 grams of flour, 10 grams of salt and 350 ml of water for {x} people?",
            "Scale this bread recipe for {x} people: 500 grams of flour, 10 grams of salt, 350 ml of water",
            "I need to make bread for {x} people, the recipe says 500 grams of flour, 10 grams of salt and 350 ml of water; new amounts?",
        ],
        ["2", "3", "4", "6", "8", "10", "12", "16"],
    ),
    "translate": (
        [
            "Translate '{w}' into {l}.",
            "How do you say '{w}' in {l}?",
            "What is '{w}' in {l}?",
            "'{w}' in {l}, please",
            "Give me the {l} word for '{w}'",
            "{l} translation of '{w}'?",
        ],
        [
            (w, lang)
            for w in ("good morning", "thank you", "library", "butterfly", "see you tomorrow")
            for lang in ("French", "Spanish", "Italian", "Portuguese")
        ],
    ),  # fmt: skip
}

OPEN_TEMPLATES = [
    "Explain {x}.",
    "Can you give me an explanation of {x}?",
    "I'd like to understand {x}; could you walk me through it?",
    "Help me understand {x} in simple terms",
    "What should I know about {x}?",
    "Give an overview of {x}",
    "Describe {x} for a beginner.",
    "ELI5: {x}",
    "Write a short summary of {x}",
    "My teacher mentioned {x} and I got lost, what's the gist?",
    "In plain English, {x}?",
    "Break down {x} step by step",
]
OPEN_TOPICS = [
    "how photosynthesis turns sunlight into chemical energy", "the causes of the French revolution",
    "how vaccines train the immune system", "the rules of chess castling", "why the sky looks blue",
    "how a bill becomes law in the United States", "the water cycle and evaporation",
    "compound interest on savings accounts", "how airplanes generate lift", "the theory of plate tectonics",
    "how neural networks learn with backpropagation", "the difference between weather and climate",
    "how credit scores are calculated", "the life cycle of stars", "how blockchains reach consensus",
    "the basics of supply and demand", "how the heart pumps blood", "the history of the printing press",
    "how solar panels produce electricity", "the greenhouse effect", "how hash tables store keys",
    "the causes of inflation", "how tides follow the moon", "the structure of DNA",
    "how noise cancelling headphones work", "the fall of the Roman empire", "how GPS finds your location",
    "the basics of music theory chords", "how bees make honey", "the Pythagorean theorem",
    "how refrigerators keep food cold", "the rules of rugby scrums", "how volcanoes erupt",
    "the causes of the first world war", "how antibiotics kill bacteria", "the meaning of opportunity cost",
    "how compilers optimise loops", "the migration of monarch butterflies", "how earthquakes are measured",
    "the plot of Moby Dick", "how sourdough starters ferment", "the basics of stoic philosophy",
    "how electric cars regenerate braking energy", "the Krebs cycle in cells", "how public key encryption works",
    "the rules of cricket leg before wicket", "how glaciers carve valleys", "the origins of jazz music",
    "how index funds diversify risk", "the process of mitosis",
]  # fmt: skip


@dataclass(frozen=True, slots=True)
class Query:
    text: str
    group: str  # the paraphrase group: same group, same answer
    family: str


def groups() -> list[tuple[str, str, list[str]]]:
    """Every paraphrase group: (group id, family, its prompts without openers and closers)."""
    out = []
    for fam, (templates, slots) in NEAR_MISS_FAMILIES.items():
        for slot in slots:
            if isinstance(slot, tuple):
                prompts = [t.format(w=slot[0], l=slot[1]) for t in templates]
                gid = f"{fam}:{slot[0]}:{slot[1]}"
            else:
                prompts = [t.format(x=slot) for t in templates]
                gid = f"{fam}:{slot}"
            out.append((gid, fam, prompts))
    for topic in OPEN_TOPICS:
        out.append((f"open:{topic}", "open", [t.replace("{x}", "{topic}") for t in OPEN_TEMPLATES]))
    return out


# How people say the same thing in other words: each word of a topic found here is swapped for one of
# its alternatives half the time (a lexical encoder sees those as different words).
SYNONYMS = {
    "how": ["the way", "in what way"], "turns": ["converts", "changes"], "sunlight": ["light from the sun"],
    "causes": ["reasons for", "origins of"], "train": ["teach", "prepare"], "rules": ["regulations", "laws"],
    "why": ["for what reason"], "looks": ["appears", "seems"], "becomes": ["turns into"],
    "basics": ["fundamentals", "essentials"], "history": ["story", "development"], "works": ["functions"],
    "work": ["function", "operate"], "generate": ["produce", "create"], "learn": ["get trained", "improve"],
    "difference": ["distinction", "contrast"], "calculated": ["computed", "worked out"],
    "life": ["lifetime"], "cycle": ["stages"], "reach": ["arrive at", "achieve"], "heart": ["cardiac muscle"],
    "pumps": ["moves", "pushes"], "produce": ["make", "generate"], "store": ["keep", "hold"],
    "follow": ["track", "depend on"], "structure": ["makeup", "shape"], "find": ["determine", "work out"],
    "location": ["position", "whereabouts"], "make": ["produce", "create"], "keep": ["maintain"],
    "erupt": ["explode", "blow up"], "kill": ["destroy", "wipe out"], "meaning": ["definition", "idea"],
    "optimise": ["speed up", "improve"], "loops": ["iterations"], "measured": ["quantified", "rated"],
    "plot": ["storyline", "story"], "ferment": ["rise", "culture"], "electric": ["battery"],
    "cars": ["vehicles", "automobiles"], "carve": ["shape", "cut"], "origins": ["roots", "beginnings"],
    "diversify": ["spread"], "risk": ["exposure"], "process": ["stages", "steps"], "fall": ["collapse"],
    "first": ["1st"], "world": ["global"], "war": ["conflict"], "music": ["musical"],
    "immune": ["defence"], "system": ["mechanism"], "energy": ["power"], "chemical": ["stored"],
}  # fmt: skip


def _topic(topic: str, rng: random.Random) -> str:
    """An open question's topic as one person words it: some words in other words, one left out."""
    words = [rng.choice(SYNONYMS[w]) if w in SYNONYMS and rng.random() < 0.5 else w for w in topic.split()]
    if len(words) > 4 and rng.random() < 0.5:
        del words[rng.randrange(len(words))]
    return " ".join(words)


# The share of traffic each family gets: open questions, and questions with near-misses.
FAMILY_SHARES = {"open": 0.6, "support": 0.1, "recipe": 0.1, "capital": 0.05, "convert": 0.05,
                 "compare": 0.05, "translate": 0.05}  # fmt: skip


def workload(n: int, seed: int = 7, zipf: float = 1.0) -> list[Query]:
    """``n`` labelled queries: a family by its share, a group in it by Zipf popularity (random ranks),
    a wording at random."""
    rng = random.Random(seed)
    gs = groups()
    rng.shuffle(gs)
    weights = [0.0] * len(gs)
    for fam, share in FAMILY_SHARES.items():
        members = [i for i, g in enumerate(gs) if g[1] == fam]
        ranks = [1.0 / (r + 1) ** zipf for r in range(len(members))]
        for i, w in zip(members, ranks, strict=True):
            weights[i] = share * w / sum(ranks)
    picks = rng.choices(range(len(gs)), weights=weights, k=n)
    out = []
    for i in picks:
        gid, fam, prompts = gs[i]
        prompt = rng.choice(prompts)
        if fam == "open":
            prompt = prompt.format(topic=_topic(gid[5:], rng))
        text = rng.choice(OPENERS) + prompt + rng.choice(CLOSERS)
        out.append(Query(text, gid, fam))
    return out


# What people say before a question about why they ask (the same answer with or without it). A second
# workload puts one of these before every question: prompts of different groups then share words
# (boilerplate), as app prompts built from one template do, so near-misses come closer than they
# are on their own and a static threshold must sit higher.
CONTEXTS = ["", "for my blog post, ", "I'm writing a school report and ", "my manager asked me: ",
            "for a presentation tomorrow, ", "my kid wants to know: ", "for a trivia night, ",
            "as a non-native speaker, ", "for our team wiki, ", "while studying for an exam, ",
            "for a podcast episode, ", "my friend and I argued: ", "for a newsletter, ",
            "in the context of a travel plan, ", "for a customer email, ", "during a job interview prep, "]  # fmt: skip


def in_context(queries: list[Query], seed: int = 7) -> list[Query]:
    """The same questions, each after a context drawn at random (``CONTEXTS``)."""
    rng = random.Random(seed + 100)
    return [Query(rng.choice(CONTEXTS) + q.text, q.group, q.family) for q in queries]


def oracle_hit_rate(queries: list[Query]) -> float:
    """The most any cache can answer right: every request whose paraphrase group was asked before
    (a group's first request must go to the model). Over the best static threshold's hit rate, it
    bounds the ratio any policy can reach on this workload."""
    seen: set[str] = set()
    served = 0
    for q in queries:
        served += q.group in seen
        seen.add(q.group)
    return served / len(queries) if queries else 0.0


# ------------------------------------------------------------------------------ the cache, simulated


@dataclass(slots=True)
class Outcome:
    requests: int = 0
    hits: int = 0
    wrong: int = 0
    verified: int = 0
    verified_wrong: int = 0
    entries: int = 0
    families: dict | None = None  # family -> [requests, hits, wrong]

    def count(self, family: str, hit: bool, wrong: bool) -> None:
        c = self.families.setdefault(family, [0, 0, 0])
        c[0] += 1
        c[1] += hit
        c[2] += wrong

    def summary(self) -> dict:
        lo, hi = wilson(self.wrong, self.requests)
        return {
            "hit_rate": self.hits / self.requests if self.requests else 0.0,
            "error_rate": self.wrong / self.requests if self.requests else 0.0,
            "error_interval": [lo, hi],
            "hits": self.hits,
            "wrong_hits": self.wrong,
            "entries": self.entries,
            "by_family": {
                f: {"requests": n, "hit_rate": h / n, "error_rate": w / n}
                for f, (n, h, w) in sorted(self.families.items())
            },
        }


def run(queries: list[Query], vecs: np.ndarray, *, static: float | None = None, policy: Policy | None = None,
        verify_share: float = 0.05, rng: random.Random | None = None) -> Outcome:  # fmt: skip
    """One pass of the workload through a cache with one policy (a static threshold, or ``policy``)."""
    rng = rng or random.Random(1)
    index = ScopeIndex(vecs.shape[1])
    answers: dict[int, str] = {}
    out = Outcome(families={})
    never = float("inf")
    for i, q in enumerate(queries):
        out.requests += 1
        found = index.nearest(vecs[i], now=0.0)
        if found is None:
            out.count(q.family, False, False)
            answers[i] = q.group
            index.add(i, vecs[i], never)
            continue
        entry, s = found
        right = answers[entry.key] == q.group
        if static is not None:
            out.count(q.family, s >= static, s >= static and not right)
            if s >= static:
                out.hits += 1
                out.wrong += not right
            else:
                answers[i] = q.group
                index.add(i, vecs[i], never)
            continue
        if policy.serve(entry.ll, s) and rng.random() >= verify_share:
            out.hits += 1
            out.wrong += not right
            out.count(q.family, True, not right)
            continue
        out.count(q.family, False, False)
        # Sent to the model: its answer teaches the entry; a different answer becomes an entry.
        entry.observe(s, right)
        policy.learned(entry.ll, entry.n)
        if not right:
            answers[i] = q.group
            # As the gateway does: the new entry starts with the near-miss it was made for.
            index.add(i, vecs[i], never).observe(s, False)
    out.entries = len(index)
    return out


def lookup_latency(entries: int, lookups: int, dims: int, seed: int = 3) -> dict:
    """One lookup against a scope of ``entries`` entries: encode, nearest, decide (ms)."""
    qs = workload(entries + lookups, seed=seed, zipf=0.0)
    index = ScopeIndex(dims)
    t0 = time.perf_counter()
    batch = 5000
    for start in range(0, entries, batch):
        chunk = qs[start : start + batch]
        vecs = np.stack([textvec.encode(f"{q.text} #{start + j}", dims) for j, q in enumerate(chunk)])
        keys = np.arange(start, start + len(chunk))
        index.index.add(keys, vecs)
        for k in keys:
            index.entries[int(k)] = Entry(int(k), float("inf"))
    build_s = time.perf_counter() - t0
    embed_times = asyncio.run(_embedding_round_trips([q.text for q in qs[entries:]], dims))
    policy = Policy(0.02, rng=random.Random(seed))
    times, encode_times = [], []
    for q in qs[entries:]:
        t = time.perf_counter()
        v = textvec.encode(q.text, dims)
        t_enc = time.perf_counter()
        found = index.nearest(v, now=0.0)
        if found is not None:
            policy.serve(found[0].ll, found[1])
        end = time.perf_counter()
        times.append(end - t)
        encode_times.append(t_enc - t)
    with_embedding = [a + b for a, b in zip(times, embed_times, strict=True)]
    return {
        "lookup_ms_p50": statistics.median(times) * 1000,
        # What a lookup adds in the gateway: the embedding deployment's round trip on top.
        "lookup_with_embedding_ms_p50": statistics.median(with_embedding) * 1000,
        "embedding_round_trip_ms_p50": statistics.median(embed_times) * 1000,
        "lookup_ms_p95": float(np.percentile(times, 95) * 1000),
        "encode_ms_p50": statistics.median(encode_times) * 1000,
        "index_build_s": build_s,
        "entries": len(index),
    }


async def _embedding_round_trips(texts: list[str], dims: int) -> list[float]:
    """Each text's ``POST /v1/embeddings`` through the gateway's upstream client (``http1``, kept-alive)
    to a server on localhost that answers with the light encoder, as the simulated engines do (in
    this process and event loop: its work is counted, as it would share a CPU host's cores)."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                req = orjson.loads(await reader.readexactly(length))
                vec = textvec.encode(req["input"], dims).tolist()
                body = orjson.dumps(
                    {"object": "list", "data": [{"object": "embedding", "index": 0, "embedding": vec}]}
                )
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%b"
                    % (len(body), body)
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass  # the client closed, or the server is shutting down: the run is over
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1/embeddings"
    client = UpstreamPool(connect_timeout=5.0, idle_timeout=30.0)
    out = []
    try:
        for text in texts:
            t = time.perf_counter()
            resp = await client.post(
                url, orjson.dumps({"model": "emb", "input": text, "encoding_format": "float"})
            )
            data = await resp.read_all()
            resp.release()
            np.asarray(orjson.loads(data)["data"][0]["embedding"], dtype=np.float32)
            out.append(time.perf_counter() - t)
    finally:
        await client.close()
        server.close()
    return out


def compare(queries: list[Query], a: argparse.Namespace, label: str) -> dict:
    """The adaptive policy against every static threshold on one workload."""
    vecs = np.stack([textvec.encode(q.text, a.dims) for q in queries])
    # Every static threshold from 1.000 down in steps of 0.005, until the error rate has been over twice
    # the target three times in a row (lower ones only serve more wrong answers).
    statics: dict[float, dict] = {}
    over = 0
    for th in [round(1.0 - i / 200, 3) for i in range(0, 101)]:
        statics[th] = run(queries, vecs, static=th).summary()
        print(
            f"{label}, static {th:.3f}: hit rate {statics[th]['hit_rate']:.3f}  error {statics[th]['error_rate']:.4f}"
        )
        over = over + 1 if statics[th]["error_rate"] > 2 * a.target else 0
        if over >= 3:
            break
    ok = {th: r for th, r in statics.items() if r["error_rate"] <= a.target}
    best_th = max(ok, key=lambda th: ok[th]["hit_rate"]) if ok else None
    best = ok[best_th] if best_th is not None else {"hit_rate": 0.0, "error_rate": 0.0}

    policy = Policy(a.target, rng=random.Random(a.seed))
    adaptive = run(queries, vecs, policy=policy, verify_share=a.verify_share, rng=random.Random(a.seed + 1))
    ad = adaptive.summary()
    lo, hi = ad["error_interval"]
    ratio = ad["hit_rate"] / best["hit_rate"] if best["hit_rate"] else None
    oracle = oracle_hit_rate(queries)
    print(
        f"\n{label}: adaptive at target {a.target:.3f}: hit rate {ad['hit_rate']:.3f}, error {ad['error_rate']:.4f} "
        f"[{lo:.4f}, {hi:.4f}]; best static {best_th}: hit rate {best['hit_rate']:.3f} "
        f"(error {best['error_rate']:.4f}); ratio {ratio if ratio is None else round(ratio, 2)}"
    )
    print(
        f"{label}: a perfect cache (every request whose group was asked before, never wrong) would answer "
        f"{oracle:.3f}: at most {oracle / best['hit_rate'] if best['hit_rate'] else 0:.2f}x the best static "
        "threshold on this workload\n"
    )
    return {
        "target_error_rate": a.target,
        "observed_error_rate": ad["error_rate"],
        "observed_error_interval": [lo, hi],
        "target_met": lo <= a.target,
        "hit_rate": ad["hit_rate"],
        "best_static_threshold": best_th,
        "best_static_hit_rate": best["hit_rate"],
        "best_static_error_rate": best["error_rate"],
        "hit_rate_ratio": ratio,
        "oracle_hit_rate": oracle,
        "ratio_ceiling": oracle / best["hit_rate"] if best["hit_rate"] else None,
        "distinct_prompts": len({q.text for q in queries}),
        "adaptive": ad,
        "static": {f"{th:.3f}": v for th, v in statics.items()},
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--json", dest="json_path")
    p.add_argument("--queries", type=int, default=30000)
    p.add_argument("--target", type=float, default=0.02)
    p.add_argument("--verify-share", type=float, default=0.05)
    p.add_argument("--entries", type=int, default=100_000, help="entries in the scope for lookup_ms_p50")
    p.add_argument("--lookups", type=int, default=2000)
    p.add_argument("--dims", type=int, default=textvec.DEFAULT_DIMS)
    p.add_argument("--seed", type=int, default=7)
    add_smoke_flag(p, queries=1500, entries=2000, lookups=100)
    a = apply_smoke(p.parse_args(argv))
    queries = workload(a.queries, seed=a.seed)
    cmp = compare(queries, a, "questions")
    ctx = compare(in_context(queries, a.seed), a, "questions in context")
    lat = lookup_latency(a.entries, a.lookups, a.dims)
    fams: dict[str, int] = {}
    for q in queries:
        fams[q.family] = fams.get(q.family, 0) + 1
    r = {
        **cmp,
        # The same questions after a context each (``in_context``): prompts of different groups share words.
        "in_context": ctx,
        **lat,
        "conditions": {
            "queries": a.queries,
            "groups": len(groups()),
            "families": fams,
            "family_shares": FAMILY_SHARES,
            "zipf": 1.0,
            "encoder": textvec.NAME,
            "dims": a.dims,
            "verify_share": a.verify_share,
            "index": "usearch HNSW, int8, connectivity 12, expansion 40/32, one scope",
            "lookup": f"median of {a.lookups} lookups (encode + nearest + decide) at {lat['entries']} entries, "
            "in this process (no Redis, no HTTP); with_embedding: plus POST /v1/embeddings to a light-encoder "
            "server on localhost through the gateway's http1 client, in the same event loop",
            "cores": os.cpu_count(),
            "load_average": os.getloadavg(),
            "python": sys.version.split()[0],
            "seed": a.seed,
        },
        "smoke": a.smoke,
    }
    print(
        f"lookup p50 {lat['lookup_ms_p50']:.3f} ms at {lat['entries']} entries (encode {lat['encode_ms_p50']:.3f} ms); "
        f"with the embedding round trip {lat['lookup_with_embedding_ms_p50']:.3f} ms"
    )
    if a.json_path:
        Path(a.json_path).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json_path).write_text(json.dumps(r, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
