"""KV caches kept across a swap (llama-server's --slot-save-path), saved and restored checked.

A restore is not trusted: llama.cpp has been seen to answer a restore without restoring (#26676), and
a cache saved by a server started with other flags (another context size, cache type, model file or
build) cannot fit the new one. So each saved slot has a note beside it (`<file>.json`) with the count
of tokens saved and a fingerprint of the command line that saved it; a restore is attempted only into
a server with the same fingerprint, and counts only if llama-server says it restored that many tokens.
Anything else is a warning in the log naming the cause, never an error for a client: the model then
starts with an empty cache, as without slot_save.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import dataclass

from .process import Child, http_request

log = logging.getLogger("api_like_oai.supervisor")

RESTORE_TIMEOUT_SECONDS = 60
NOT_FINGERPRINTED = ("--port", "--host")  # chosen per start or the same for all: no part of the cache


@dataclass
class RestoreReport:
    """What restoring one replica's slots came to."""

    restored_tokens: int = 0
    failures: int = 0  # a restore tried and refused, or one that restored fewer tokens than saved
    skipped: int = 0  # a cache saved by a server started with other flags: not tried

    def add(self, other: RestoreReport) -> None:
        self.restored_tokens += other.restored_tokens
        self.failures += other.failures
        self.skipped += other.skipped


def fingerprint(argv: list[str]) -> str:
    """What a saved cache depends on: the command line (binary, model, flags) less its port and host,
    and the model file's and the binary's size and modification time (a file replaced under its name)."""
    kept, skip_next = [], False
    for arg in argv:
        if skip_next:
            skip_next = False
        elif arg in NOT_FINGERPRINTED:
            skip_next = True
        elif not arg.startswith(tuple(flag + "=" for flag in NOT_FINGERPRINTED)):
            kept.append(arg)
    files = [_file_stamp(path) for path in (argv[0], _model_path(argv))]
    return hashlib.sha256(json.dumps([kept, files]).encode()).hexdigest()[:32]


def _model_path(argv: list[str]) -> str:
    for flag in ("--model", "-m"):
        if flag in argv[:-1]:
            return argv[argv.index(flag) + 1]
    return ""


def _file_stamp(path: str) -> list:
    try:
        stat = os.stat(path)
    except OSError:
        return [path, None, None]
    return [path, stat.st_size, stat.st_mtime_ns]


def slot_file(name: str, replica: int, slot_id: int) -> str:
    return f"{name}-{replica}-{slot_id}.bin"


async def save_all(child: Child, slot_dir: str, name: str, replica: int) -> None:
    """Save every slot of one replica, each with its note (tokens saved, fingerprint)."""
    for slot_id in await _slot_ids(child):
        filename = slot_file(name, replica, slot_id)
        status, body = await _slot_action(child, slot_id, "save", filename)
        if status != 200:
            log.warning("[%s] slot %s not saved: %d %s", child.label, slot_id, status, _error_text(body))
            continue
        saved = _number(body, "n_saved")
        if saved == 0:  # an unused slot: nothing to restore (a restore of it would read as a failure)
            _remove(os.path.join(slot_dir, filename), os.path.join(slot_dir, filename + ".json"))
            continue
        with open(os.path.join(slot_dir, filename + ".json"), "w", encoding="utf-8") as file:
            json.dump({"n_saved": saved, "fingerprint": fingerprint(child.argv)}, file)


async def restore_all(child: Child, slot_dir: str, name: str, replica: int) -> RestoreReport:
    """Restore every slot of one replica that has a saved cache, checked against its note."""
    report = RestoreReport()
    for slot_id in await _slot_ids(child):
        filename = slot_file(name, replica, slot_id)
        if os.path.exists(os.path.join(slot_dir, filename)):
            report.add(await _restore_one(child, slot_dir, slot_id, filename))
    return report


async def _restore_one(child: Child, slot_dir: str, slot_id: int, filename: str) -> RestoreReport:
    note = _read_note(os.path.join(slot_dir, filename + ".json"))
    if note.get("fingerprint") != fingerprint(child.argv):
        why = (
            "was saved by a llama-server started with other flags (or another model file or build)"
            if note
            else "has no note of what saved it"
        )
        log.warning("[%s] slot %s not restored: its cache %s %s", child.label, slot_id, filename, why)
        return RestoreReport(skipped=1)
    status, body = await _slot_action(child, slot_id, "restore", filename)
    if status != 200:
        log.warning(
            "[%s] slot %s not restored from %s: llama-server answered %d: %s",
            child.label,
            slot_id,
            filename,
            status,
            _error_text(body),
        )
        return RestoreReport(failures=1)
    restored, saved = _number(body, "n_restored"), note.get("n_saved")
    if restored <= 0 or (saved is not None and restored != saved):
        log.warning(
            "[%s] slot %s restore from %s did not take: %d tokens restored of %s saved",
            child.label,
            slot_id,
            filename,
            restored,
            saved,
        )
        return RestoreReport(failures=1)
    return RestoreReport(restored_tokens=restored)


def _remove(*paths: str) -> None:
    for path in paths:
        try:
            os.remove(path)
        except OSError:
            pass


def _read_note(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as file:
            note = json.load(file)
        return note if isinstance(note, dict) else {}
    except (OSError, ValueError):
        return {}


async def _slot_ids(child: Child) -> list[int]:
    status, body = await http_request(child.port, "GET", "/slots", api_key=child.api_key)
    try:
        return [slot["id"] for slot in json.loads(body)] if status == 200 else []
    except (ValueError, TypeError, KeyError):
        return []


async def _slot_action(child: Child, slot_id: int, action: str, filename: str) -> tuple[int, bytes]:
    return await http_request(
        child.port,
        "POST",
        f"/slots/{slot_id}?action={action}",
        json.dumps({"filename": filename}).encode(),
        timeout=RESTORE_TIMEOUT_SECONDS,
        api_key=child.api_key,
    )


def _number(body: bytes, key: str) -> int:
    try:
        value = json.loads(body).get(key)
    except (ValueError, AttributeError):
        return 0
    return value if isinstance(value, int) else 0


def _error_text(body: bytes) -> str:
    """llama-server's error message out of its JSON error, else the body's start."""
    try:
        return str(json.loads(body)["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return body[:200].decode("utf-8", "replace") or "no answer"
