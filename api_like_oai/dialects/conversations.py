"""OpenAI's APIs of stored objects: the Conversations API's requests and answers, and the stored
responses' item list and deletion. The schema in /openapi.json; what they do is services/'s
stored_responses.py and conversations.py."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictStr

from ..protocol import Request
from .responses import InputItem

MAX_ITEMS_PER_REQUEST = 20  # OpenAI's limit on the items one request adds to a conversation
# OpenAI's bounds on metadata: 16 pairs, keys of at most 64 characters, values of at most 512.
Metadata = dict[Annotated[StrictStr, Field(max_length=64)], Annotated[StrictStr, Field(max_length=512)]]


class ConversationCreate(Request):
    items: list[InputItem] | None = Field(None, max_length=MAX_ITEMS_PER_REQUEST, description="The conversation's first items.")
    metadata: Metadata | None = Field(None, max_length=16)


class ConversationUpdate(Request):
    metadata: Metadata = Field(max_length=16)


class ItemsCreate(Request):
    items: list[InputItem] = Field(min_length=1, max_length=MAX_ITEMS_PER_REQUEST)


class ItemListQuery(BaseModel):
    """The query of a list of items; the numbers come as text, so types are not strict here."""

    model_config = ConfigDict(extra="ignore")
    limit: int = Field(20, ge=1, le=100)
    after: str | None = None
    order: Literal["asc", "desc"] = "desc"


class Conversation(BaseModel):
    id: str
    object: Literal["conversation"]
    created_at: int
    metadata: dict[str, str]


class ConversationDeleted(BaseModel):
    id: str
    object: Literal["conversation.deleted"]
    deleted: Literal[True]


class ResponseDeleted(BaseModel):
    id: str
    object: Literal["response"]
    deleted: Literal[True]


class Item(BaseModel):
    """An input or output item of the Responses API, as stored: with its id (and type, status)."""

    model_config = ConfigDict(extra="allow")
    id: str
    type: str


class ItemList(BaseModel):
    """Items in order (`order`), each with an id; `first_id` and `last_id` are null for an empty page."""

    object: Literal["list"]
    data: list[Item]
    first_id: str | None
    last_id: str | None
    has_more: bool
