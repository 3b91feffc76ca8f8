"""skillgraft: a verified memory of skills for a frozen local language model.

Skill manuals and verified solutions are prefilled once; their KV state is captured
byte-exactly into block files and grafted back into fresh contexts at their own position.
"""

from .config import EngineSettings
from .engine import Engine, KVState
from .errors import (
    BlockIntegrityError,
    BlockNotFoundError,
    BundleError,
    ConfigError,
    ConflictError,
    ContextOverflowError,
    EngineError,
    FingerprintMismatchError,
    InputError,
    ModelNotFoundError,
    RouterError,
    SkillgraftError,
    StoreError,
    VerificationError,
)
from .fingerprint import RuntimeFingerprint

__version__ = "0.1.0"

__all__ = [
    "BlockIntegrityError",
    "BlockNotFoundError",
    "BundleError",
    "ConfigError",
    "ConflictError",
    "ContextOverflowError",
    "Engine",
    "EngineError",
    "EngineSettings",
    "FingerprintMismatchError",
    "InputError",
    "KVState",
    "ModelNotFoundError",
    "RouterError",
    "RuntimeFingerprint",
    "SkillgraftError",
    "StoreError",
    "VerificationError",
]
