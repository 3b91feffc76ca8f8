"""Routing: the router and its abstain threshold, the sentence embedder, the key index."""

from .calibration import RouterCalibration
from .feedback import FeedbackResult
from .router import Embedder

__all__ = ["Embedder", "FeedbackResult", "RouterCalibration"]
