"""The Files and Batch APIs' requests and answers as OpenAI writes them (pure; the schema in
/openapi.json). What they do is files.py and batches.py."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr

from ..protocol import Request

# What may be uploaded (OpenAI's purposes); `batch_output` is written by the proxy only.
UPLOAD_PURPOSES = ("assistants", "batch", "fine-tune", "vision", "user_data", "evals")
BATCH_ENDPOINTS = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses")
MIN_EXPIRY_SECONDS, MAX_EXPIRY_SECONDS = 3600, 30 * 24 * 3600  # OpenAI's bounds on expires_after
Metadata = dict[Annotated[StrictStr, Field(max_length=64)], Annotated[StrictStr, Field(max_length=512)]]


class ExpiresAfter(Request):
    anchor: Literal["created_at"]
    seconds: StrictInt = Field(ge=MIN_EXPIRY_SECONDS, le=MAX_EXPIRY_SECONDS)


class FileUpload(Request):
    """The form of POST /v1/files besides the file itself (multipart/form-data)."""

    purpose: Literal[UPLOAD_PURPOSES]
    expires_after: ExpiresAfter | None = None


class FileObject(BaseModel):
    id: str
    object: Literal["file"] = "file"
    bytes: int
    created_at: int
    expires_at: int | None = None
    filename: str
    purpose: str
    status: Literal["uploaded", "processed", "error"] = "processed"
    status_details: str | None = None


class FileList(BaseModel):
    object: Literal["list"] = "list"
    data: list[FileObject]
    first_id: str | None = None
    last_id: str | None = None
    has_more: bool


class FileDeleted(BaseModel):
    id: str
    object: Literal["file"] = "file"
    deleted: bool


class FileListQuery(BaseModel):
    """GET /v1/files' query; numbers come as text, so types are not strict here."""

    model_config = ConfigDict(extra="ignore")
    after: str | None = None
    limit: int = Field(10_000, ge=1, le=10_000)
    order: Literal["asc", "desc"] = "desc"
    purpose: str | None = None


class BatchListQuery(BaseModel):
    """GET /v1/batches' query: the newest first."""

    model_config = ConfigDict(extra="ignore")
    after: str | None = None
    limit: int = Field(20, ge=1, le=100)


class BatchCreate(Request):
    input_file_id: StrictStr
    endpoint: Literal[BATCH_ENDPOINTS]
    completion_window: StrictStr = Field("24h", description='How long the batch may run: "24h" (or any "90m", "2h", "3d").')
    metadata: Metadata | None = Field(None, max_length=16)
    output_expires_after: ExpiresAfter | None = None


class RequestCounts(BaseModel):
    total: int
    completed: int
    failed: int


class BatchError(BaseModel):
    code: str
    message: str
    param: str | None = None
    line: int | None = None


class BatchErrors(BaseModel):
    object: Literal["list"] = "list"
    data: list[BatchError]


class Batch(BaseModel):
    id: str
    object: Literal["batch"] = "batch"
    endpoint: str
    errors: BatchErrors | None = None
    input_file_id: str
    completion_window: str
    status: Literal["validating", "failed", "in_progress", "finalizing", "completed", "expired", "cancelling", "cancelled"]
    output_file_id: str | None = None
    error_file_id: str | None = None
    created_at: int
    in_progress_at: int | None = None
    expires_at: int | None = None
    finalizing_at: int | None = None
    completed_at: int | None = None
    failed_at: int | None = None
    expired_at: int | None = None
    cancelling_at: int | None = None
    cancelled_at: int | None = None
    request_counts: RequestCounts
    metadata: dict[str, str] | None = None
    usage: dict | None = None


class BatchList(BaseModel):
    object: Literal["list"] = "list"
    data: list[Batch]
    first_id: str | None = None
    last_id: str | None = None
    has_more: bool


def endpoints() -> list[tuple]:
    """The Files and Batch APIs' documented routes (routes/docs.py's table): (method, path, summary,
    request model, answer model). POST /v1/files takes multipart/form-data: its form is FileUpload."""
    return [
        ("post", "/v1/files", "Upload a file (multipart/form-data: file, purpose, expires_after)", None, FileObject),
        ("get", "/v1/files", "The key's files", None, FileList),
        ("get", "/v1/files/{file_id}", "A file", None, FileObject),
        ("get", "/v1/files/{file_id}/content", "A file's content", None, None),
        ("delete", "/v1/files/{file_id}", "Delete a file", None, FileDeleted),
        ("post", "/v1/batches", "Create a batch of requests from a file, run in the background", BatchCreate, Batch),
        ("get", "/v1/batches", "The key's batches, newest first", None, BatchList),
        ("get", "/v1/batches/{batch_id}", "A batch", None, Batch),
        ("post", "/v1/batches/{batch_id}/cancel", "Cancel a batch", None, Batch),
    ]


def message_batch_endpoints() -> list[tuple]:
    """Anthropic's Message Batches' documented routes (its descriptor's, routes/apis.py: errors in its shape)."""
    return [
        (
            "post",
            "/v1/messages/batches",
            "Create a Message Batch (Anthropic's), run in the background",
            MessageBatchCreate,
            MessageBatch,
        ),
        ("get", "/v1/messages/batches", "The key's Message Batches, newest first", None, MessageBatchList),
        ("get", "/v1/messages/batches/{batch_id}", "A Message Batch", None, MessageBatch),
        ("post", "/v1/messages/batches/{batch_id}/cancel", "Cancel a Message Batch", None, MessageBatch),
        ("delete", "/v1/messages/batches/{batch_id}", "Delete an ended Message Batch", None, MessageBatchDeleted),
        ("get", "/v1/messages/batches/{batch_id}/results", "A Message Batch's results (JSONL)", None, None),
    ]


def queries() -> dict:
    """The list routes' queries, described by their models (routes/docs.py)."""
    return {"/v1/files": FileListQuery, "/v1/batches": BatchListQuery, "/v1/messages/batches": MessageBatchListQuery}


class MessageBatchRequest(Request):
    custom_id: StrictStr = Field(pattern=r"^[a-zA-Z0-9_-]{1,64}$")
    params: dict = Field(description="A Messages API request (POST /v1/messages' body); `stream` is answered whole.")


class MessageBatchCreate(Request):
    """Anthropic's Message Batches: POST /v1/messages/batches."""

    requests: list[MessageBatchRequest] = Field(min_length=1, max_length=100_000)


class MessageBatchCounts(BaseModel):
    processing: int
    succeeded: int
    errored: int
    canceled: int
    expired: int


class MessageBatch(BaseModel):
    id: str
    type: Literal["message_batch"] = "message_batch"
    processing_status: Literal["in_progress", "canceling", "ended"]
    request_counts: MessageBatchCounts
    ended_at: str | None = None
    created_at: str
    expires_at: str
    archived_at: str | None = None
    cancel_initiated_at: str | None = None
    results_url: str | None = None


class MessageBatchList(BaseModel):
    data: list[MessageBatch]
    has_more: bool
    first_id: str | None = None
    last_id: str | None = None


class MessageBatchDeleted(BaseModel):
    id: str
    type: Literal["message_batch_deleted"] = "message_batch_deleted"


class MessageBatchListQuery(BaseModel):
    """GET /v1/messages/batches' query: the newest first, a page after `after_id` or before `before_id`."""

    model_config = ConfigDict(extra="ignore")
    after_id: str | None = None
    before_id: str | None = None
    limit: int = Field(20, ge=1, le=1000)
