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

from fastapi import APIRouter, Depends, Request
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
from .door import Door, door_of, tenant_of
from .memory_api import deposit
from .schemas import ExpiryText, NewSkill
from .service import Gateway
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
    """A skill version (a :class:`~skillgraft.skills.versions.SkillRecord`) as OpenAI's ``skill.version``."""
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


def _name_of(shelf: SkillShelf, sid: str, include_expired: bool = False) -> str:
    for name in shelf.names(include_expired=include_expired):
        if skill_id(name) == sid:
            return name
    raise SkillNotFoundError(sid)


def _described(shelf: SkillShelf, sid: str) -> dict:
    return skill_object(shelf.versions(_name_of(shelf, sid)))


def _add(shelf: SkillShelf, parts, skill: Optional[str], default: bool, expires: Optional[str]) -> tuple[str, int]:
    try:
        return shelf.add(read_upload(parts), skill=skill, default=default, expires=expires)
    except SkillFolderError as exc:
        raise upload_error(exc) from None


def shelf_of(tenant: Gateway = Depends(tenant_of)) -> SkillShelf:
    """The skills of the request's namespace (a FastAPI dependency)."""
    return SkillShelf(tenant)


# Included before skillgraft's ``/v1/skills/{ref}`` routes: a path with a skill id is OpenAI's.
router = APIRouter()


@router.post("/v1/skills")
async def create_skill(request: Request, door: Door = Depends(door_of), tenant: Gateway = Depends(tenant_of)):
    if request.headers.get("content-type", "").startswith("application/json"):
        try:
            skill = NEW_SKILL.validate_python(json.loads(await request.body()))
        except (ValueError, RecursionError) as exc:  # RecursionError: nested past the parser's depth
            if isinstance(exc, ValidationError):
                raise RequestValidationError(exc.errors()) from None
            raise ApiError(400, f"the body is not JSON ({exc})") from None
        return JSONResponse(jsonable_encoder(await deposit(skill, door, tenant)), status_code=201)
    parts, fields = await _uploaded(request)
    shelf = SkillShelf(tenant)
    name, _ = await door.in_thread(_add, shelf, parts, None, True, fields.get("expires_at"))  # text: no slot, no model
    return await door.in_thread(lambda: skill_object(shelf.versions(name)))


@router.get("/v1/skills")
async def list_skills(after: Optional[str] = None, limit: int = DEFAULT_LIMIT, order: str = "desc",
                      door: Door = Depends(door_of), shelf: SkillShelf = Depends(shelf_of)):
    items = await door.in_thread(lambda: [skill_object(shelf.versions(name)) for name in shelf.names()])
    return page(items, after=after, limit=limit, order=order, sort_key=lambda s: (s["created_at"], s["name"]))


@router.get("/v1/skills/{sid:skill_id}")
async def retrieve_skill(sid: str, door: Door = Depends(door_of), shelf: SkillShelf = Depends(shelf_of)):
    return await door.in_thread(_described, shelf, sid)


@router.post("/v1/skills/{sid:skill_id}")
async def update_skill(sid: str, body: UpdateSkill, door: Door = Depends(door_of),
                       shelf: SkillShelf = Depends(shelf_of)):
    if not body.model_fields_set:
        raise ApiError(400, "give default_version, expires_at or both", param="default_version")
    if body.expires_at is not None:
        try:
            expiry_time(body.expires_at)  # checked before anything changes
        except ExpiryError as exc:
            raise ApiError(400, str(exc), param="expires_at") from None
    name = await door.in_thread(_name_of, shelf, sid, True)
    if "default_version" in body.model_fields_set:
        version = _version_number(body.default_version, "default_version")
        await door.in_thread(shelf.set_default, name, version)
    if "expires_at" in body.model_fields_set:
        await door.in_thread(shelf.expire, name, body.expires_at)
    return await door.in_thread(lambda: skill_object(shelf.versions(name)))


@router.delete("/v1/skills/{sid:skill_id}")
async def delete_skill(sid: str, door: Door = Depends(door_of), shelf: SkillShelf = Depends(shelf_of)):
    await door.in_thread(lambda: shelf.remove(_name_of(shelf, sid, True)))
    return {"id": sid, "object": "skill.deleted", "deleted": True}


@router.get("/v1/skills/{sid:skill_id}/content")
async def skill_content(sid: str, door: Door = Depends(door_of), shelf: SkillShelf = Depends(shelf_of)):
    return await door.in_thread(lambda: _content(shelf, _name_of(shelf, sid), None))


@router.post("/v1/skills/{sid:skill_id}/versions")
async def create_version(request: Request, sid: str, door: Door = Depends(door_of),
                         shelf: SkillShelf = Depends(shelf_of)):
    name = await door.in_thread(_name_of, shelf, sid, True)
    parts, fields = await _uploaded(request)
    default = str(fields.get("default", "true")).strip().lower() not in ("false", "0", "no")
    _, version = await door.in_thread(_add, shelf, parts, name, default, fields.get("expires_at"))
    return version_object(await door.in_thread(shelf.skill, name, version))


@router.get("/v1/skills/{sid:skill_id}/versions")
async def list_versions(sid: str, after: Optional[str] = None, limit: int = DEFAULT_LIMIT, order: str = "desc",
                        door: Door = Depends(door_of), shelf: SkillShelf = Depends(shelf_of)):
    records = await door.in_thread(lambda: shelf.versions(_name_of(shelf, sid)))
    items = [version_object(record) for record in records]
    if after is not None and after.isascii() and after.isdigit() and len(after) <= 18 and records:
        after = version_id(records[0].name, int(after))  # a version number names its version
    return page(items, after=after, limit=limit, order=order, sort_key=lambda v: int(v["version"]))


@router.get("/v1/skills/{sid:skill_id}/versions/{version}")
async def retrieve_version(sid: str, version: str, door: Door = Depends(door_of),
                           shelf: SkillShelf = Depends(shelf_of)):
    number = _version_number(version, "version")
    return version_object(await door.in_thread(lambda: shelf.skill(_name_of(shelf, sid), number)))


@router.delete("/v1/skills/{sid:skill_id}/versions/{version}")
async def delete_version(sid: str, version: str, door: Door = Depends(door_of),
                         shelf: SkillShelf = Depends(shelf_of)):
    number = _version_number(version, "version")
    name = await door.in_thread(_name_of, shelf, sid, True)
    await door.in_thread(shelf.remove, name, number)
    return {"id": version_id(name, number), "object": "skill.version.deleted", "deleted": True,
            "version": str(number)}


@router.get("/v1/skills/{sid:skill_id}/versions/{version}/content")
async def version_content(sid: str, version: str, door: Door = Depends(door_of),
                          shelf: SkillShelf = Depends(shelf_of)):
    number = _version_number(version, "version")
    return await door.in_thread(lambda: _content(shelf, _name_of(shelf, sid), number))


def _content(shelf: SkillShelf, name: str, version: Optional[int]) -> Response:
    number, files = shelf.contents(name, version)
    return Response(zip_of(name, files), media_type="application/zip",
                    headers={"content-disposition": f'attachment; filename="{name}-v{number}.zip"'})
