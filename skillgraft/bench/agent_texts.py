"""The texts of one ``bench agent`` run (full size or quick) and the routing threshold it runs at."""

from __future__ import annotations

from . import agent_data as data
from ..routing.calibration import DEFAULT_THRESHOLD, THRESHOLD_SETTING

__all__ = ["QUICK_THRESHOLD", "Texts"]

QUICK_THRESHOLD = DEFAULT_THRESHOLD


class Texts:
    """The prompts of one run: full size, or (quick) the first line of each app's rules and of
    two of its tools, and the first three lines of each manual — routed at the threshold of
    uncalibrated stores of other encoders (:data:`QUICK_THRESHOLD`): three lines hold too little
    for the default one."""

    def __init__(self, quick: bool) -> None:
        def app(rules: str, tools: tuple) -> str:
            return data.agent_system(rules, tools[:2], lines=1) if quick else data.agent_system(rules, tools)

        self.agent = app(data.RULES, tuple(range(len(data.TOOLS))))
        self.agent_questions = data.AGENT_QUESTIONS + data.AGENT_MORE_QUESTIONS[: 2 if quick else None]
        self.manuals = {name: (data.manual_text(name, lines=3 if quick else 0), list(examples))
                        for name, (_, examples) in data.MANUALS.items()}
        self.apps = [(app(rules, tools), manual, questions) for (rules, tools), manual, questions in data.APPS]
        self.threshold = QUICK_THRESHOLD if quick else None

    def settle_threshold(self, store) -> None:
        """Set this run's routing threshold in ``store`` (a quick run's; a full run keeps the default)."""
        if self.threshold is not None:
            store.set_setting(THRESHOLD_SETTING, repr(self.threshold))
