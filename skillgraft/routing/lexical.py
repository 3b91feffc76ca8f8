"""Lexical evidence for routing: BM25 over one document per routed entry (an imported skill's
name, description and headings; a plain block's keys), held in memory and rebuilt from the
catalog's key texts whenever the catalog changes, so it works the same over SQLite and
PostgreSQL.

:meth:`LexicalIndex.coverage` is BM25 scaled to ``[0, 1]``: the share of the query's
information (its words' inverse document frequency, words no document has counting at the
highest) that an entry's document holds, each word's term frequency saturating as BM25's does.
A query none of whose informative words a skill mentions scores 0 for it, whatever its length.

A product's name is written as one word in one place and two in another ("SeatGeek" and
``seat-geek``, "Meta Ads" and ``metaads``): each document also holds the join of every two
neighbouring words (``seatgeek``), and a document holding the join of two neighbouring query
words holds each of them, so either spelling meets the other.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Iterable, Mapping

import numpy as np

__all__ = ["LexicalIndex", "joins", "terms"]

K1 = 1.2
B = 0.75
MAX_QUERY_TERMS = 64
MAX_TERM_CHARS = 40
_WORD = re.compile(r"[a-z0-9]+")
# Words that say nothing about which skill fits: function words and the ways requests are phrased.
STOPWORDS = frozenset("""
a about above after again all also am an and any are as at be because been before being below between both but by
can could did do does doing down during each few for from further had has have having he her here hers him his how
i if in into is it its itself just let me more most my no nor not of off on once only or other our ours out over own
please same she should so some such than that the their theirs them then there these they this those through to too
under until up very was we were what when where which while who whom why will with would you your yours
want need help like get use using used give tell show make way thing things something someone anyone
skill skills user users asks ask asked when whenever
""".split())


def _stem(word: str) -> str:
    """A light suffix strip, so that ``tests``/``testing``/``tested`` meet (never below 3 letters)."""
    for suffix in ("ings", "ing", "ies", "ied", "es", "ed", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3 and not word.endswith("ss"):
            stem = word[: -len(suffix)]
            return stem + "y" if suffix in ("ies", "ied") else stem
    return word


def terms(text: str) -> list[str]:
    """The text's index terms: lower-cased words (letters and digits), stop words out, stemmed."""
    return [_stem(w[:MAX_TERM_CHARS]) for w in _WORD.findall(text.lower()) if w not in STOPWORDS]


def joins(text: str) -> list[tuple[str, str, str]]:
    """``(term, next term, their join)`` for each two neighbouring words of the text that are no
    stop words: ``"Meta Ads"`` gives ``("meta", "ads", "metaad")``, stemmed as :func:`terms` does."""
    words = _WORD.findall(text.lower())
    return [(_stem(a[:MAX_TERM_CHARS]), _stem(b[:MAX_TERM_CHARS]), _stem((a + b)[:MAX_TERM_CHARS]))
            for a, b in zip(words, words[1:]) if a not in STOPWORDS and b not in STOPWORDS]


@dataclass(frozen=True)
class LexicalIndex:
    """BM25 postings over the documents of ``owners`` (in order)."""

    owners: tuple
    postings: dict      # term -> (document positions, BM25 term-frequency weights)
    idf: dict           # term -> inverse document frequency
    unseen_idf: float   # the idf a word no document holds counts with

    @classmethod
    def build(cls, documents: Mapping[str, Iterable[str]]) -> "LexicalIndex":
        """From ``{owner: texts}``: each owner's texts are one document."""
        owners = tuple(documents)
        counts, lengths = [], []
        for owner in owners:
            bag: dict[str, int] = {}
            length = 0
            for text in documents[owner]:
                words = terms(text)
                length += len(words)
                for term in words + [joined for _, _, joined in joins(text)]:  # joins held, not counted in the length
                    bag[term] = bag.get(term, 0) + 1
            counts.append(bag)
            lengths.append(length)
        n = len(owners)
        lengths = np.array(lengths, dtype=np.float64)
        average = float(lengths.mean()) if n and lengths.sum() else 1.0
        gathered: dict[str, tuple[list, list]] = {}
        for position, bag in enumerate(counts):
            norm = K1 * (1 - B + B * lengths[position] / average)
            for term, tf in bag.items():
                docs, weights = gathered.setdefault(term, ([], []))
                docs.append(position)
                weights.append(tf * (K1 + 1) / (tf + norm))
        postings = {t: (np.array(d, dtype=np.int64), np.array(w, dtype=np.float64)) for t, (d, w) in gathered.items()}
        idf = {t: math.log(1 + (n - len(d) + 0.5) / (len(d) + 0.5)) for t, (d, _) in postings.items()}
        return cls(owners, postings, idf, math.log(1 + (n + 0.5) / 0.5))

    def coverage(self, query: str) -> np.ndarray:
        """Per owner, the share in ``[0, 1]`` of the query's information its document holds; a
        document holding the join of two neighbouring query words holds each of them as often."""
        scores = np.zeros(len(self.owners), dtype=np.float64)
        wanted = list(dict.fromkeys(terms(query)))[:MAX_QUERY_TERMS]
        total = sum(self.idf.get(t, self.unseen_idf) for t in wanted)
        if not total or not self.owners:
            return scores
        for term in wanted:
            if term in self.postings:
                docs, weights = self.postings[term]
                scores[docs] += self.idf[term] * np.minimum(weights, 1.0)
        held: dict[str, np.ndarray] = {}  # a word's share per document, once a join may raise it
        chosen = set(wanted)
        for first, second, joined in joins(query)[:MAX_QUERY_TERMS]:
            if joined not in self.postings or joined in (first, second):
                continue
            docs, weights = self.postings[joined]
            for term in (first, second):
                if term not in chosen:
                    continue
                if term not in held:
                    held[term] = np.zeros(len(self.owners), dtype=np.float64)
                    if term in self.postings:
                        own_docs, own_weights = self.postings[term]
                        held[term][own_docs] = self.idf[term] * np.minimum(own_weights, 1.0)
                share = self.idf.get(term, self.unseen_idf) * np.minimum(weights, 1.0)
                gain = np.maximum(share - held[term][docs], 0.0)
                scores[docs] += gain
                held[term][docs] += gain
        return scores / total
