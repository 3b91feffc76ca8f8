"""Generic requests: what people ask a coding agent that is no skill's subject, the router's
prior for "none of these".

:data:`GENERIC_REQUESTS` is a hand-written list of everyday requests (chores on the code at
hand, a language's basics, small talk, general knowledge, writing chores) that no imported skill
is meant for, whatever the catalog. They name no product, tool or domain on purpose, so that a
request that does (a library, a service, a file format) stays nearer its skill. The router
embeds them once per encoder (:class:`GenericPrior`): an imported skill is not offered for a
query that one of them fits clearly better, by :data:`GENERIC_MARGIN` cosine or more, than the
skill's own nearest key (docs/routing.md). A plain block (a manual, a verified answer) is never
held against them: its examples are its owner's word.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Optional

import numpy as np

if TYPE_CHECKING:
    from ..protocols import TextEmbedder

__all__ = ["GENERIC_MARGIN", "GENERIC_REQUESTS", "GenericPrior"]

# How much nearer (cosine) a generic request must be than a skill's nearest key to keep it out.
GENERIC_MARGIN = 0.1

GENERIC_REQUESTS = (
    # chores on the code at hand
    "fix the bug in this function",
    "why is this code not working",
    "this throws an exception, what is wrong",
    "explain what this code does",
    "walk me through this snippet line by line",
    "rename this variable to something clearer",
    "add comments to this code",
    "write a docstring for this method",
    "make this function shorter",
    "clean up this code",
    "simplify this nested if statement",
    "split this long function into smaller ones",
    "remove the duplicated code in these two functions",
    "make this loop faster",
    "optimise this function, it is slow",
    "convert this for loop into a list comprehension",
    "turn this callback code into promises",
    "rewrite this class as a plain function",
    "port this snippet from python to javascript",
    "translate this function to go",
    "add a test for this function",
    "write tests for this class",
    "increase the test coverage of this file",
    "this test is failing, help me fix it",
    "mock this dependency in my test",
    "add input validation to this function",
    "handle the case where the list is empty",
    "add logging to this function",
    "catch the exception this call can raise",
    "add a command line flag to this script",
    "read a csv file and print the rows",
    "parse this json string",
    "write a function that checks if a number is prime",
    "write a function to merge two sorted lists",
    "implement binary search",
    "sort this list of dictionaries by a key",
    "remove duplicates from a list",
    "count the words in a string",
    "find the largest number in an array",
    "write a fizzbuzz program",
    "generate a random password",
    "format this date as year month day",
    "compute the average of these numbers",
    "write a regex that matches email addresses",
    "what does this error message mean",
    "my code gives the wrong output",
    "review this pull request",
    "is this code thread safe",
    "what is the time complexity of this function",
    "make this code more readable",
    "rename this file and update the imports",
    "move this function into its own module",
    "delete the unused imports",
    "fix the indentation in this file",
    "fix the typo in this variable name",
    "update this code to the newer syntax",
    "write a hello world program",
    "continue from where you stopped",
    "undo your last change",
    "apply the same change to the other file",
    "commit these changes",
    # a language's basics
    "what is a closure",
    "explain recursion with an example",
    "what is the difference between an interface and an abstract class",
    "how do pointers work",
    "what is a hash map",
    "what does the static keyword mean",
    "difference between == and ===",
    "how do I declare a constant",
    "how do I loop over a dictionary",
    "how do I read a file line by line",
    "how do I concatenate two strings",
    "how do I check if a key exists in a map",
    "what is object oriented programming",
    "what is a null pointer exception",
    "what is the difference between a process and a thread",
    "explain big o notation",
    "what is a linked list",
    "when should I use a set instead of a list",
    "what is dependency injection",
    "what is functional programming",
    # small talk
    "hello",
    "hi there",
    "good morning",
    "how are you today",
    "thanks, that helped",
    "thank you so much",
    "ok",
    "great, nice work",
    "who are you",
    "what can you do",
    "tell me a joke",
    "are you a robot",
    "I am bored",
    "what do you think about that",
    "never mind",
    "can you help me",
    "goodbye",
    "what is your favourite colour",
    "do you like music",
    "sorry, I meant the other one",
    # general knowledge and everyday life
    "what is the capital of australia",
    "who painted the mona lisa",
    "how far is the moon from the earth",
    "what time is it in tokyo",
    "what will the weather be like tomorrow",
    "how many days are there in a leap year",
    "who won the last world cup",
    "recommend a good book",
    "suggest a movie for tonight",
    "give me a recipe for pancakes",
    "how do I boil an egg",
    "what should I cook for dinner",
    "how do I get better sleep",
    "what are some tips to stay focused",
    "plan a weekend trip for me",
    "how much is 15 percent of 80",
    "convert 30 celsius to fahrenheit",
    "what is the square root of 144",
    "why is the sky blue",
    "how do vaccines work",
    "explain the theory of relativity simply",
    "what happened in 1969",
    "how do I say thank you in japanese",
    "what is the meaning of life",
    # writing chores
    "summarise this paragraph",
    "fix the grammar in this sentence",
    "make this email sound more polite",
    "shorten this text",
    "give me a synonym for important",
    "write a short poem about autumn",
    "translate this sentence into german",
    "write a birthday message for a friend",
    "proofread my paragraph",
    "rewrite this in plain english",
)


class GenericPrior:
    """The generic requests embedded by one encoder, on first use."""

    def __init__(self, embedder: "TextEmbedder") -> None:
        self.embedder = embedder
        self._vectors: Optional[np.ndarray] = None
        self._lock = threading.Lock()

    def nearness(self, vectors: np.ndarray) -> np.ndarray:
        """Per query vector, its cosine to the nearest generic request."""
        with self._lock:
            if self._vectors is None:
                self._vectors = np.asarray(self.embedder.encode(list(GENERIC_REQUESTS)), dtype=np.float32)
        return (np.asarray(vectors, dtype=np.float32) @ self._vectors.T).max(axis=1)
