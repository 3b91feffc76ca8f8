"""The package's face: a sorted, public ``__all__`` that stays small, errors that are all
``SkillgraftError``s named ``...Error``, and a library that never prints."""

import skillgraft


def test_all_is_sorted_and_public():
    assert skillgraft.__all__ == sorted(skillgraft.__all__)
    for name in skillgraft.__all__:
        assert hasattr(skillgraft, name), name
    public = {n for n in vars(skillgraft) if not n.startswith("_")}
    modules = {n for n in public if type(getattr(skillgraft, n)).__name__ == "module"}
    assert public - modules - {"__version__"} == set(skillgraft.__all__)


def test_the_top_level_is_a_small_face():
    """The facade, its results and the base errors; the rest lives in documented subpackages."""
    assert len(skillgraft.__all__) <= 24
    assert {"SkillMemory", "Answer", "AnswerNote", "AnswerEnd", "AnswerOptions", "SkillgraftError"} <= set(skillgraft.__all__)


def test_every_error_is_a_skillgraft_error_and_named_error():
    from skillgraft import errors

    for name in dir(errors):
        value = getattr(errors, name)
        if isinstance(value, type) and issubclass(value, Exception) and value.__module__ == errors.__name__:
            assert issubclass(value, skillgraft.SkillgraftError)
            assert name.endswith("Error")
            assert name in errors.__doc__


def test_library_never_prints():
    import pathlib
    import re

    root = pathlib.Path(skillgraft.__file__).parent
    for path in root.rglob("*.py"):
        if path.name in {"cli.py"}:
            continue
        text = path.read_text()
        assert not re.search(r"^\s*print\(", text, re.M), path.name
        assert "basicConfig" not in text, path.name
