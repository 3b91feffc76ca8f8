"""Progress: the one callback type long work reports through, ``progress(done, total)``."""

from typing import Callable, Optional

Progress = Optional[Callable[[int, int], None]]
