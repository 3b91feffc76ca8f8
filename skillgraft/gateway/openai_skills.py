"""The OpenAI Skills API on ``/v1/skills``, over the memory's imported skills, so the ``openai``
client's ``client.skills`` works against the gateway.

A skill's id is ``skill_`` and 32 hex digits of the SHA-256 of its name (stable: the same name
is the same id in every store); a version's id is ``skillver_<the same digits>_<number>``.
The routes (writes are deposits, :mod:`.access`):

- ``POST /v1/skills`` (multipart ``files[]``, or one zip in ``files``): a new skill, version 1;
  a name already held is a 409 (add a version instead). A JSON body is skillgraft's own deposit
  (``/v1/skillgraft/skills``), kept here for the clients that send it.
- ``GET /v1/skills`` (``after``, ``limit`` 1-100, default 20, ``order`` ``asc``/``desc`` by
  creation, default ``desc``): a cursor page (``has_more``, ``first_id``, ``last_id``).
- ``GET``/``DELETE /v1/skills/{id}``; ``POST /v1/skills/{id}`` with ``{"default_version"}`` and/or
  ``{"expires_at"}`` (an ISO 8601 time or a duration such as ``30d``; null removes it).
- ``GET /v1/skills/{id}/content``: the default version's files as a zip (one top-level folder).
- ``POST``/``GET /v1/skills/{id}/versions`` (``default``: make it the default, true unless
  ``false``; an upload equal to a stored version is that version), ``GET``/``DELETE
  /v1/skills/{id}/versions/{version}`` and its ``/content``.

An upload may carry the form field ``expires_at`` too. A skill past its expiry is hidden like a
missing one (listed, read and routed to by no one) but for changing, versioning or deleting it.
Uploads are checked by :mod:`.uploads` and imported by :class:`.skill_shelf.SkillShelf`; a
refused upload is a 400 (413 past a size or count bound, 409 for a taken name), never a 500.
"""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
from datetime import datetime
from typing import Optional, Union

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError
from starlette.convertors import Convertor, register_url_convertor
from starlette.datastructures import UploadFile

from ..core.expiry import expiry_time
from ..core.sha import SKILL_ID, SKILL_ID_DIGITS
from ..errors import ExpiryError, SkillFolderError, SkillNotFoundError, SkillUploadError
from .access import ApiError
from .schemas import ExpiryText, NewSkill
from .skill_shelf import SkillShelf
from .uploads import MAX_UPLOAD_FILES, read_upload

DEFAULT_LIMIT, MAX_LIMIT = 20, 100
FILE_FIELDS = ("files[]", "files")
NEW_SKILL = TypeAdapter(NewSkill)


def skill_id(name: str) -> str:
    return "skill_" + hashlib.sha256(name.encode("utf-8")).hexdigest()[:SKILL_ID_DIGITS]


def version_id(name: str, version: int) -> str:
    return f"skillver_{skill_id(name)[6:]}_{version}"


class SkillIdConvertor(Convertor):
    """Path segments of the form of a skill id: other ``/v1/skills/{ref}`` paths stay skillgraft's."""

    regex = SKILL_ID.pattern

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("skill_id", SkillIdConvertor())


def _unix(stamp: str) -> int:
    try:
        return int(datetime.fromisoformat(stamp).timestamp())
    except (TypeError, ValueError):
        return 0


def version_object(record) -> dict:
    """A skill version (a :class:`~skillgraft.memory.skills.SkillRecord`) as OpenAI's ``skill.version``."""
    return {"id": version_id(record.name, record.version), "object": "skill.version", "skill_id": skill_id(record.name),
            "name": record.name, "description": record.description, "version": str(record.version),
            "created_at": _unix(record.created_at)}


def skill_object(versions: list) -> dict:
    """A skill (the records of its versions, oldest first) as OpenAI's ``skill``."""
    default = next((r for r in versions if r.version == r.default_version), versions[-1])
    return {"id": skill_id(default.name), "object": "skill", "name": default.name, "description": default.description,
            "default_version": str(default.default_version), "latest_version": str(max(default.versions)),
            "created_at": _unix(versions[0].created_at),
            "expires_at": _unix(default.expires_at) if default.expires_at else None}


def page(items: list[dict], *, after: Optional[str], limit: int, order: str, sort_key) -> dict:
    """One cursor page of ``items`` (OpenAI's list shape), after the item whose id is ``after``."""
    if not 1 <= limit <= MAX_LIMIT:
        raise ApiError(400, f"limit must be from 1 to {MAX_LIMIT}, got {limit}", param="limit")
    if order not in ("asc", "desc"):
        raise ApiError(400, f"order must be asc or desc, got {order!r}", param="order")
    items = sorted(items, key=sort_key, reverse=order == "desc")
    if after is not None:
        ids = [item["id"] for item in items]
        if after not in ids:
            raise ApiError(400, f"after: no item with the id {after!r} in this list", param="after")
        items = items[ids.index(after) + 1:]
    data = items[:limit]
    return {"object": "list", "data": data, "has_more": len(items) > limit,
            "first_id": data[0]["id"] if data else None, "last_id": data[-1]["id"] if data else None}


def zip_of(name: str, files: list[tuple[str, bytes]]) -> bytes:
    """The files of a skill version as a zip with one top-level folder, ``NAME/``."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for path, data in files:
            info = zipfile.ZipInfo(f"{name}/{path}", date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = 0o100644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, data)
    return buffer.getvalue()


def upload_error(exc: SkillFolderError) -> ApiError:
    """The HTTP form of a refused upload or an unimportable skill."""
    if isinstance(exc, SkillUploadError):
        status = 413 if exc.too_large else 409 if exc.code == "skill_exists" else 400
        return ApiError(status, str(exc), code=exc.code, param="files")
    return ApiError(400, str(exc), code="invalid_skill", param="files")


def _version_number(text: Union[str, int], param: str) -> int:
    try:
        number = int(str(text).strip())
    except ValueError:
        number = 0
    if number < 1:
        raise ApiError(400, f"{param} must be a version number (1, 2, ...), got {text!r}", param=param)
    return number


class UpdateSkill(BaseModel):
    """``POST /v1/skills/{id}``: the version to make the default, and/or the skill's expiry (null: none)."""

    model_config = ConfigDict(extra="forbid")

    default_version: Optional[Union[str, int]] = None
    expires_at: Optional[ExpiryText] = None


async def _uploaded(request: Request) -> tuple[list[tuple[str, bytes]], dict]:
    """The uploaded files (``files[]`` or ``files``) and the other form fields of a multipart body."""
    if not request.headers.get("content-type", "").startswith("multipart/form-data"):
        raise ApiError(400, "send the skill as multipart/form-data: its files as files[], or one zip as files",
                       param="files")
    form = await request.form(max_files=4 * MAX_UPLOAD_FILES, max_fields=16)
    try:
        parts, fields = [], {}
        for key, value in form.multi_items():
            if key in FILE_FIELDS:
                if not isinstance(value, UploadFile):
                    raise ApiError(400, f"{key} must be files, not text fields", param="files")
                parts.append((value.filename or "", await value.read()))
            elif not isinstance(value, UploadFile):
                fields[key] = value
        return parts, fields
    finally:
        await form.close()


def register_openai_skill_routes(app: FastAPI, tenant_of, in_thread, deposit) -> None:
    """Add the OpenAI Skills API's routes to ``app``, each over the skills of the request's
    namespace (``await tenant_of(request)``: its gateway); ``deposit`` takes skillgraft's own JSON
    deposit (a :class:`~skillgraft.gateway.schemas.NewSkill`, and the request). Registered
    before skillgraft's ``/v1/skills/{ref}`` routes: a path with a skill id is OpenAI's."""

    async def shelf_of(request: Request) -> SkillShelf:
        return SkillShelf(await tenant_of(request))

    def name_of(shelf: SkillShelf, sid: str, include_expired: bool = False) -> str:
        for name in shelf.names(include_expired=include_expired):
            if skill_id(name) == sid:
                return name
        raise SkillNotFoundError(sid)

    def described(shelf: SkillShelf, sid: str) -> dict:
        return skill_object(shelf.versions(name_of(shelf, sid)))

    def add(shelf: SkillShelf, parts, skill: Optional[str], default: bool, expires: Optional[str]) -> tuple[str, int]:
        try:
            return shelf.add(read_upload(parts), skill=skill, default=default, expires=expires)
        except SkillFolderError as exc:
            raise upload_error(exc) from None

    @app.post("/v1/skills")
    async def create_skill(request: Request):
        if request.headers.get("content-type", "").startswith("application/json"):
            try:
                skill = NEW_SKILL.validate_python(json.loads(await request.body()))
            except (ValueError, RecursionError) as exc:  # RecursionError: nested past the parser's depth
                if isinstance(exc, ValidationError):
                    raise RequestValidationError(exc.errors()) from None
                raise ApiError(400, f"the body is not JSON ({exc})") from None
            return JSONResponse(jsonable_encoder(await deposit(skill, request)), status_code=201)
        parts, fields = await _uploaded(request)
        shelf = await shelf_of(request)
        name, _ = await in_thread(add, shelf, parts, None, True, fields.get("expires_at"))  # text: no slot held, no model run
        return await in_thread(lambda: skill_object(shelf.versions(name)))

    @app.get("/v1/skills")
    async def list_skills(request: Request, after: Optional[str] = None, limit: int = DEFAULT_LIMIT,
                          order: str = "desc"):
        shelf = await shelf_of(request)

        def listed() -> list[dict]:
            return [skill_object(shelf.versions(name)) for name in shelf.names()]

        items = await in_thread(listed)
        return page(items, after=after, limit=limit, order=order, sort_key=lambda s: (s["created_at"], s["name"]))

    @app.get("/v1/skills/{sid:skill_id}")
    async def retrieve_skill(request: Request, sid: str):
        shelf = await shelf_of(request)
        return await in_thread(described, shelf, sid)

    @app.post("/v1/skills/{sid:skill_id}")
    async def update_skill(request: Request, sid: str, body: UpdateSkill):
        shelf = await shelf_of(request)
        if not body.model_fields_set:
            raise ApiError(400, "give default_version, expires_at or both", param="default_version")
        if body.expires_at is not None:
            try:
                expiry_time(body.expires_at)  # checked before anything changes
            except ExpiryError as exc:
                raise ApiError(400, str(exc), param="expires_at") from None
        name = await in_thread(name_of, shelf, sid, True)
        if "default_version" in body.model_fields_set:
            version = _version_number(body.default_version, "default_version")
            await in_thread(shelf.set_default, name, version)
        if "expires_at" in body.model_fields_set:
            await in_thread(shelf.expire, name, body.expires_at)
        return await in_thread(lambda: skill_object(shelf.versions(name)))

    @app.delete("/v1/skills/{sid:skill_id}")
    async def delete_skill(request: Request, sid: str):
        shelf = await shelf_of(request)
        await in_thread(lambda: shelf.remove(name_of(shelf, sid, True)))
        return {"id": sid, "object": "skill.deleted", "deleted": True}

    @app.get("/v1/skills/{sid:skill_id}/content")
    async def skill_content(request: Request, sid: str):
        shelf = await shelf_of(request)
        return await in_thread(lambda: _content(shelf, name_of(shelf, sid), None))

    @app.post("/v1/skills/{sid:skill_id}/versions")
    async def create_version(request: Request, sid: str):
        shelf = await shelf_of(request)
        name = await in_thread(name_of, shelf, sid, True)
        parts, fields = await _uploaded(request)
        default = str(fields.get("default", "true")).strip().lower() not in ("false", "0", "no")
        _, version = await in_thread(add, shelf, parts, name, default, fields.get("expires_at"))
        return version_object(await in_thread(shelf.skill, name, version))

    @app.get("/v1/skills/{sid:skill_id}/versions")
    async def list_versions(request: Request, sid: str, after: Optional[str] = None, limit: int = DEFAULT_LIMIT,
                            order: str = "desc"):
        shelf = await shelf_of(request)
        records = await in_thread(lambda: shelf.versions(name_of(shelf, sid)))
        items = [version_object(record) for record in records]
        if after is not None and after.isascii() and after.isdigit() and len(after) <= 18 and records:
            after = version_id(records[0].name, int(after))  # a version number names its version
        return page(items, after=after, limit=limit, order=order, sort_key=lambda v: int(v["version"]))

    @app.get("/v1/skills/{sid:skill_id}/versions/{version}")
    async def retrieve_version(request: Request, sid: str, version: str):
        shelf = await shelf_of(request)
        number = _version_number(version, "version")
        return version_object(await in_thread(lambda: shelf.skill(name_of(shelf, sid), number)))

    @app.delete("/v1/skills/{sid:skill_id}/versions/{version}")
    async def delete_version(request: Request, sid: str, version: str):
        shelf = await shelf_of(request)
        number = _version_number(version, "version")
        name = await in_thread(name_of, shelf, sid, True)
        await in_thread(shelf.remove, name, number)
        return {"id": version_id(name, number), "object": "skill.version.deleted", "deleted": True,
                "version": str(number)}

    @app.get("/v1/skills/{sid:skill_id}/versions/{version}/content")
    async def version_content(request: Request, sid: str, version: str):
        shelf = await shelf_of(request)
        number = _version_number(version, "version")
        return await in_thread(lambda: _content(shelf, name_of(shelf, sid), number))


def _content(shelf: SkillShelf, name: str, version: Optional[int]) -> Response:
    number, files = shelf.contents(name, version)
    return Response(zip_of(name, files), media_type="application/zip",
                    headers={"content-disposition": f'attachment; filename="{name}-v{number}.zip"'})
