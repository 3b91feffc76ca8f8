"""Routing: the router and its abstain threshold, the sentence embedder, the key index."""
