"""OpenAI's Files API: POST /v1/files (multipart), GET /v1/files[/{id}[/content]], DELETE /v1/files/{id}
(batch/files.py)."""

from __future__ import annotations

from flask import Blueprint, Response, jsonify, request
from pydantic import ValidationError

from ..batch import files
from ..batch.models import FileListQuery, FileUpload
from ..errors import InvalidRequest
from . import invalid_request
from .declare import OWN, route
from .scope import admitted_scope

bp = Blueprint("files", __name__)


@route(
    bp,
    "/v1/files",
    summary="Upload a file (multipart/form-data: file, purpose, expires_after)",
    access=OWN,
    request="api_like_oai.batch.models:FileUpload",
    answer="api_like_oai.batch.models:FileObject",
    body="multipart",
    statuses=(429,),
    metered="requests",
)
def create():
    scope = admitted_scope()
    upload = request.files.get("file")
    if upload is None:
        raise InvalidRequest("send the file as the multipart/form-data field 'file'", param="file")
    return jsonify(files.create(scope, upload.filename or "file", upload.read(), _upload_form()))


def _upload_form() -> FileUpload:
    """`purpose` and `expires_after[anchor]`, `expires_after[seconds]` (the SDK's form fields); 400 naming a bad one."""
    form = request.form
    # the form's other fields too, refused by name as a JSON body's unknown fields are
    fields: dict = {name: value for name, value in form.items() if not name.startswith("expires_after[")}
    fields["purpose"] = form.get("purpose")
    if "expires_after[anchor]" in form or "expires_after[seconds]" in form:
        seconds = form.get("expires_after[seconds]", "")
        fields["expires_after"] = {
            "anchor": form.get("expires_after[anchor]"),
            "seconds": int(seconds) if seconds.strip().isdigit() else seconds,
        }
    try:
        return FileUpload.model_validate(fields)
    except ValidationError as exc:
        raise invalid_request(exc) from None


@route(
    bp,
    "/v1/files",
    methods=("GET",),
    summary="The key's files",
    access=OWN,
    answer="api_like_oai.batch.models:FileList",
    query="api_like_oai.batch.models:FileListQuery",
    metered="requests",
)
def listing():
    return jsonify(files.listing(admitted_scope(), list_query(FileListQuery)))


@route(
    bp,
    "/v1/files/<file_id>",
    methods=("GET",),
    summary="A file",
    access=OWN,
    answer="api_like_oai.batch.models:FileObject",
    metered="requests",
)
def retrieve(file_id: str):
    return jsonify(files.retrieve(admitted_scope(), file_id))


@route(
    bp,
    "/v1/files/<file_id>/content",
    methods=("GET",),
    summary="A file's content",
    access=OWN,
    media=("application/octet-stream",),
    metered="requests",
)
def content(file_id: str):
    data, _ = files.content(admitted_scope(), file_id)
    return Response(data, mimetype="application/octet-stream")


@route(
    bp,
    "/v1/files/<file_id>",
    methods=("DELETE",),
    summary="Delete a file",
    access=OWN,
    answer="api_like_oai.batch.models:FileDeleted",
    metered="requests",
)
def delete(file_id: str):
    return jsonify(files.delete(admitted_scope(), file_id))


def list_query(model):
    """The list's query as `model`; 400 naming a bad field."""
    try:
        return model.model_validate(request.args.to_dict())
    except ValidationError as exc:
        raise invalid_request(exc) from None
