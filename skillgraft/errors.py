"""Every error skillgraft raises on purpose.

The tree::

    SkillgraftError
    ├── ConfigError                    a setting or argument is invalid
    │   ├── ModelNotFoundError         unknown model name, missing GGUF or missing extra
    │   │   └── ModelPartError         a chunk package of a model is missing or not the pinned bytes
    │   ├── ServerBuildError           llama-server could not be built or found
    │   ├── EncoderMismatchError       the store's vectors were made by another text encoder
    │   └── EncoderNotChosenError      the store records an endpoint or folder encoder nobody named
    ├── InputError                     bad user input (empty text, bad bytes, bad file)
    │   ├── ContextOverflowError       text does not fit the context window
    │   ├── FormatError                tools or a response format that cannot be honoured
    │   ├── PinBudgetError             pinned skill states would outgrow the cache's budget
    │   ├── SkillFolderError           an Agent Skills folder that cannot be imported
    │   │   └── SkillUploadError       an uploaded skill (files or a zip) refused unread
    │   ├── NamespaceError             a namespace name that cannot name a memory
    │   ├── ExpiryError                an expiry that is malformed or absurd
    │   └── SlotFileError              a slot file or payload has the wrong layout
    ├── EngineError                    llama.cpp refused an operation
    │   ├── FingerprintMismatchError   a block was captured under another runtime
    │   ├── RestoreRejectedError       the engine did not restore a checked state whole
    │   └── ServerError                llama-server failed, refused or is unreachable
    │       ├── DeadlineError          a request ran past its deadline and was stopped
    │       ├── DamagedCellsError      the server's cells hold NaN: restarted before it serves again
    │       └── SlotReuseError         a graft re-prefilled instead of reusing its slot
    ├── StoreError                     the block store cannot do what was asked
    │   ├── BlockNotFoundError         no block with that id or name
    │   │   ├── SkillNotFoundError     no imported skill (or version) with that name
    │   │   └── ExpiredError           the skill or solution asked for is past its expiry
    │   ├── BlockIntegrityError        a payload's size or SHA-256 is wrong
    │   ├── NameTakenError             another block already has that name
    │   ├── DuplicateBlockError        the same text is already stored as another block
    │   ├── SharedBaseError            a namespace asked to change the shared base it only reads
    │   ├── AppNotFoundError           no app prefix with that name
    │   ├── AppTakenError              an app prefix with that name is stored already
    │   ├── NamespaceNotFoundError     no namespace with that name in the home or the shared store
    │   └── BundleError                an export bundle is malformed or unsafe
    ├── RouterError                    embedding, index or calibration failed
    │   └── EmbedderError              an embedder (an embeddings endpoint) failed or answered badly
    └── VerificationError              a solution failed or could not be verified
        └── ConflictError              the question is stored with another answer

Each error carries the ids, sizes or names involved in its message, so the CLI can print it as one line."""

from __future__ import annotations

from typing import Optional

__all__ = [
    "AppNotFoundError", "AppTakenError", "BlockIntegrityError", "BlockNotFoundError", "BundleError", "ConfigError",
    "ConflictError", "ContextOverflowError", "DamagedCellsError", "DeadlineError", "DuplicateBlockError",
    "EmbedderError", "EncoderMismatchError", "EncoderNotChosenError", "EngineError", "ExpiredError", "ExpiryError",
    "FingerprintMismatchError", "FormatError", "InputError", "ModelNotFoundError", "ModelPartError", "NameTakenError",
    "NamespaceError", "NamespaceNotFoundError", "PinBudgetError", "RestoreRejectedError", "RouterError",
    "ServerBuildError", "ServerError", "SharedBaseError", "SkillFolderError", "SkillNotFoundError", "SkillUploadError",
    "SkillgraftError", "SlotFileError", "SlotReuseError", "StoreError", "VerificationError",
]


class SkillgraftError(Exception):
    """Base class of every error skillgraft raises on purpose."""


class ConfigError(SkillgraftError):
    """A setting or argument is invalid."""


class ModelNotFoundError(ConfigError):
    """A model name is unknown, or the package that carries it is not installed."""


class ModelPartError(ModelNotFoundError):
    """A chunk package of a model is missing, or its part is not the pinned bytes.
    ``model`` is the model's name, ``part`` the distribution, ``extra`` the pip extra that
    installs it and ``reason`` what was found."""

    def __init__(self, model: str, part: str, extra: str, reason: str) -> None:
        self.model, self.part, self.extra, self.reason = model, part, extra, reason
        super().__init__(
            f"model {model!r}: the package {part} {reason}: install it with pip install 'skillgraft[{extra}]'"
        )


class ServerBuildError(ConfigError):
    """llama-server could not be built or found."""


class EncoderMismatchError(ConfigError):
    """A store's routing vectors were made by another text encoder than the one opening it.
    ``stored`` and ``given`` are the two encoders' records (name, dimension, digest)."""

    def __init__(self, stored: dict, given: dict, home: str = "") -> None:
        self.stored, self.given, self.home = stored, given, home
        where = f"the store {home}" if home else "the store"
        spec = stored.get("spec") or stored.get("name")
        super().__init__(
            f"{where} was embedded with {_encoder_text(stored)}, not {_encoder_text(given)}: open it with "
            f"--embedder {spec} (or SKILLGRAFT_EMBEDDER={spec}), or re-embed it with "
            f"`skillgraft reembed --embedder {given.get('spec') or given.get('name')}`"
        )


def _encoder_text(record: dict) -> str:
    details = [f"{record['dimension']}-d" if record.get("dimension") else "", str(record.get("digest") or "")[:12]]
    details = [d for d in details if d]
    return f"{record.get('name')!r}" + (f" ({', '.join(details)})" if details else "")


class EncoderNotChosenError(ConfigError):
    """A store's vectors were made by an encoder it records as an endpoint URL or a folder
    (``record``): skillgraft never contacts or loads what a store merely records, so routing
    waits until the operator names that encoder."""

    def __init__(self, record: dict) -> None:
        self.record = dict(record)
        spec = str(record.get("spec") or "")
        shown = spec if len(spec) <= 120 else spec[:117] + "..."
        kind = "an embeddings endpoint" if spec.startswith(("http://", "https://", "openai:")) else "a model folder"
        super().__init__(
            f"this store's vectors were made by {record.get('name')!r}, recorded as {kind} ({shown!r}); a store's "
            "record is never followed to a URL or a folder: to route, name the encoder yourself with --embedder SPEC, "
            "SKILLGRAFT_EMBEDDER=SPEC or SkillMemory.open(embedder=SPEC), or re-embed the store (skillgraft reembed)"
        )


class InputError(SkillgraftError, ValueError):
    """User input cannot be used as given (also a ``ValueError``)."""


class ContextOverflowError(InputError):
    """A text does not fit the context window."""

    def __init__(self, n_tokens: int, n_ctx: int, what: str = "text", *, hint: str = "") -> None:
        self.n_tokens = n_tokens
        self.n_ctx = n_ctx
        self.what = what
        self.hint = hint
        super().__init__(f"{what} is {n_tokens} tokens but the context holds {n_ctx}" + (f": {hint}" if hint else ""))


class FormatError(InputError):
    """Tools, a tool choice or a response format that cannot be honoured as given; ``field``
    names the request field (``tools``, ``tool_choice``, ``response_format``, ...)."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(f"{field}: {message}")


class PinBudgetError(InputError):
    """Pinning skill ``name`` would keep ``pinned_bytes`` of states the cache never evicts,
    more than its ``budget`` (bytes a runtime's derived states may take)."""

    def __init__(self, name: str, pinned_bytes: int, budget: int) -> None:
        self.name, self.pinned_bytes, self.budget = name, pinned_bytes, budget
        super().__init__(f"pinning skill {name!r} would keep {pinned_bytes} bytes of pinned states, over the cache's "
                         f"budget of {budget} bytes: unpin another skill or raise the budget")


class SkillFolderError(InputError):
    """An Agent Skills folder (a ``SKILL.md`` and its files) cannot be imported as it is.
    ``path`` is the folder (or the file in it at fault) and ``reason`` says why in one phrase."""

    def __init__(self, path, reason: str) -> None:
        self.path, self.reason = str(path), reason
        super().__init__(f"skill folder {self.path!r}: {reason}")


class SkillUploadError(SkillFolderError):
    """An uploaded skill (its files, or one zip of them) is refused before anything is written.

    ``path`` is the entry at fault (as uploaded), ``reason`` why, ``code`` one word for it
    (``invalid_path``, ``link``, ``duplicate_path``, ``too_many_files``, ``file_too_large``,
    ``upload_too_large``, ``zip_bomb``, ``invalid_zip``, ``no_skill_md``, ``name_mismatch``);
    ``too_large`` is true when a bound on size or count was passed.
    """

    SIZE_CODES = frozenset({"too_many_files", "file_too_large", "upload_too_large", "zip_bomb"})

    def __init__(self, path, reason: str, code: str = "invalid_upload") -> None:
        self.code = code
        super().__init__(path, reason)

    @property
    def too_large(self) -> bool:
        return self.code in self.SIZE_CODES


class NamespaceError(InputError):
    """A namespace name that cannot name a memory (``namespace``: the name given)."""

    def __init__(self, namespace: object) -> None:
        self.namespace = namespace
        shown = repr(namespace) if len(repr(namespace)) <= 80 else repr(namespace)[:77] + "..."
        super().__init__(f"namespace {shown} is not a namespace name: 1-64 of a-z 0-9 . _ - (opening with a letter "
                         "or digit)")


class ExpiryError(InputError):
    """An expiry that is malformed or absurd (``value``: what was given, ``reason``: why not)."""

    def __init__(self, value: object, reason: str) -> None:
        self.value, self.reason = value, reason
        shown = repr(value) if len(repr(value)) <= 80 else repr(value)[:77] + "..."
        super().__init__(f"expiry {shown} {reason}")


class SlotFileError(InputError):
    """A slot file or block payload does not have the layout the conversion needs."""


class EngineError(SkillgraftError):
    """llama.cpp refused an operation."""


class ServerError(EngineError):
    """llama-server could not be started or reached, or refused a request."""


class DeadlineError(ServerError):
    """A request ran past its deadline (``what``: generation or the whole request, ``seconds``):
    its slot was given back and the server told to stop (the stream to it closed)."""

    def __init__(self, what: str, seconds: float) -> None:
        self.what, self.seconds = what, seconds
        super().__init__(f"the {what} ran past its deadline of {seconds:g} s; it was stopped")


class DamagedCellsError(ServerError):
    """The cells of the llama-server at ``url`` hold NaN (no model makes it): restarted before it serves again."""

    def __init__(self, url: str = "") -> None:
        self.url = url
        where = f" at {url}" if url else ""
        super().__init__(f"llama-server{where} sent null log-probabilities (NaN logits): its cells are damaged")


class SlotReuseError(ServerError):
    """A graft's completion did not reuse the restored slot: the server re-prefilled."""

    def __init__(self, block_id: str, slot: int, cache_n: int, n_block: int, prompt_n: int, n_query: int) -> None:
        self.block_id, self.slot = block_id, slot
        self.cache_n, self.n_block, self.prompt_n, self.n_query = cache_n, n_block, prompt_n, n_query
        super().__init__(
            f"graft of {block_id or 'a block'} in slot {slot} was not served from the restored state: "
            f"cache_n {cache_n} (expected {n_block} restored cells), prompt_n {prompt_n} (expected {n_query} new tokens); "
            "another request may have taken the slot"
        )


class FingerprintMismatchError(EngineError):
    """A block was captured under a runtime other than the current one."""

    def __init__(self, differences: dict[str, tuple[object, object]], block_id: str = "") -> None:
        self.differences = differences
        self.block_id = block_id
        fields = ", ".join(
            f"{name} (block {have!r} vs runtime {want!r})" for name, (have, want) in sorted(differences.items())
        )
        subject = f"block {block_id}" if block_id else "block"
        super().__init__(f"{subject} was captured under another runtime: {fields}")


class RestoreRejectedError(EngineError):
    """An engine did not restore a state that passed the checks: the bytes it read or the
    last position it holds are not those of the block."""

    def __init__(
        self, block_id: str, n_bytes: int, read: int, n_tokens: int, last_position: int, detail: str = ""
    ) -> None:
        self.block_id, self.n_bytes, self.read = block_id, n_bytes, read
        self.n_tokens, self.last_position = n_tokens, last_position
        super().__init__(
            f"the engine rejected the state of {block_id or 'a block'}: read {read} of {n_bytes} bytes, "
            f"last position {last_position} instead of {n_tokens - 1}" + (f" ({detail})" if detail else "")
        )


class StoreError(SkillgraftError):
    """The block store cannot do what was asked."""


class BlockNotFoundError(StoreError):
    """No block has that id or name."""


class SkillNotFoundError(BlockNotFoundError):
    """No imported skill has that name, or it has no such version (``name``, ``version``)."""

    def __init__(self, name: str, version: Optional[int] = None) -> None:
        self.name, self.version = name, version
        what = f"version {version} of skill {name!r}" if version is not None else f"skill {name!r}"
        super().__init__(f"no {what} is stored: see `skillgraft skills list`")


class ExpiredError(BlockNotFoundError):
    """The skill or solution ``name`` expired at ``expires_at``: hidden, kept until removed."""

    def __init__(self, name: str, expires_at: str) -> None:
        self.name, self.expires_at = name, expires_at
        super().__init__(f"{name!r} expired at {expires_at}: set a new expiry (skillgraft skills expire) to use it")


class AppNotFoundError(StoreError):
    """No app prefix has that name (``name``)."""

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"no app {name!r} is stored: see `skillgraft apps list`")


class AppTakenError(StoreError):
    """An app prefix with that name is stored already (``name``)."""

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"an app named {name!r} is stored already: remove it first, or replace it")


class NamespaceNotFoundError(StoreError):
    """No namespace ``namespace`` in ``where`` (a home's folder, or a shared store's catalog)."""
    def __init__(self, namespace: str, where: str) -> None:
        self.namespace, self.where = namespace, where
        super().__init__(f"no namespace {namespace!r} in {where}: see `skillgraft namespaces list`")


class BlockIntegrityError(StoreError):
    """A block payload does not have the size or SHA-256 the catalog records.
    ``block_id``, ``n_bytes`` (the payload's size), ``expected_bytes`` and ``sha256`` (the
    recorded digest) are set where the raiser knows them."""

    def __init__(
        self,
        message: str,
        *,
        block_id: str = "",
        n_bytes: Optional[int] = None,
        expected_bytes: Optional[int] = None,
        sha256: str = "",
    ) -> None:
        self.block_id, self.n_bytes, self.expected_bytes, self.sha256 = block_id, n_bytes, expected_bytes, sha256
        super().__init__(message)


class NameTakenError(StoreError):
    """Another block already has the name asked for."""

    def __init__(self, name: str, block_id: str) -> None:
        self.name, self.block_id = name, block_id
        super().__init__(f"the name {name!r} is taken by block {block_id}: pick another or update that block")


class DuplicateBlockError(StoreError):
    """The same text is already stored, under the same runtime, as another block."""

    def __init__(self, block_id: str, name: str, asked_name: str) -> None:
        self.block_id, self.name, self.asked_name = block_id, name, asked_name
        super().__init__(
            f"the text of {asked_name!r} is already stored as block {block_id} named {name!r}: "
            f"rename that block or use it"
        )


class SharedBaseError(StoreError):
    """``ref`` is the shared base's, which namespace ``namespace`` reads but never changes."""

    def __init__(self, ref: str, namespace: str) -> None:
        self.ref, self.namespace = ref, namespace
        super().__init__(f"{ref!r} belongs to the shared base, which namespace {namespace!r} can read but not change")


class BundleError(StoreError):
    """An export bundle is malformed or unsafe."""


class RouterError(SkillgraftError):
    """Embedding, indexing or calibration failed."""


class EmbedderError(RouterError):
    """An embedder could not be reached or answered with something that is not a vector per text."""


class VerificationError(SkillgraftError):
    """A solution failed verification or could not be verified."""


class ConflictError(VerificationError):
    """The normalized question is already stored with a different answer."""

    def __init__(self, question: str, stored_id: str, stored_answer: str, answer: str, block_id: str = "") -> None:
        self.question, self.stored_id, self.block_id = question, stored_id, block_id
        self.block_ids = (stored_id, block_id) if block_id else (stored_id,)
        self.answers = (stored_answer, answer)
        subject = f" (block {block_id})" if block_id else ""
        super().__init__(
            f"question {question!r} is stored as block {stored_id} with answer {stored_answer!r}, not {answer!r}{subject}"
        )
