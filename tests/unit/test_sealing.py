"""The installation key and the tokens signed with it (thought signatures, encrypted_content)."""

from __future__ import annotations

import os
import stat
import time

import pytest

from api_like_oai import installation, sealing
from api_like_oai.sealing import Seal

from ..servers import free_port
from .test_store import make_store


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    monkeypatch.delenv(installation.SECRET_ENV, raising=False)
    return tmp_path / "api-like-oai"


def test_the_key_is_made_once_and_kept_private(data_dir):
    key = installation.secret()
    assert len(key) == 32
    assert installation.secret() == key  # every worker and restart reads the same key
    mode = stat.S_IMODE(os.stat(data_dir / "secret").st_mode)
    assert mode == 0o600


def test_the_key_from_the_environment_wins(data_dir, monkeypatch):
    monkeypatch.setenv(installation.SECRET_ENV, "shared by every instance")
    assert installation.secret() == b"shared by every instance"
    assert not (data_dir / "secret").exists()


def test_a_signature_verifies_only_its_text_and_purpose():
    seal = Seal(lambda: b"k" * 32)
    signature = seal.sign("thinking", "Paris is in France.")
    assert seal.verify("thinking", "Paris is in France.", signature)
    assert not seal.verify("thinking", "Paris is in Spain.", signature)
    assert not seal.verify("reasoning", "Paris is in France.", signature)
    assert not seal.verify("thinking", "Paris is in France.", None)
    assert not Seal(lambda: b"other" * 8).verify("thinking", "Paris is in France.", signature)
    assert not seal.verify("thinking", "Paris is in France.", "\u0080 not ASCII")  # refused, never an exception


@pytest.mark.parametrize("text", ["", "a thought", "ünïcode ✓ and\nnewlines", "x" * 10_000])
def test_a_wrapped_text_comes_back_whole(text):
    seal = Seal(lambda: b"k" * 32)
    assert seal.unwrap("reasoning", seal.wrap("reasoning", text)) == text


@pytest.mark.parametrize("token", [None, "", "garbage", "!!!.???", "YQ.bad-signature", "YQ.\u0080", "\u00e9.x"])
def test_tokens_this_installation_did_not_make_are_refused(token):
    assert Seal(lambda: b"k" * 32).unwrap("reasoning", token) is None


def test_a_token_changed_in_transit_is_refused():
    seal = Seal(lambda: b"k" * 32)
    body, signature = seal.wrap("reasoning", "keep this").split(".")
    forged = seal.wrap("reasoning", "forged").split(".")[0]
    assert seal.unwrap("reasoning", f"{forged}.{signature}") is None
    assert seal.unwrap("thinking", f"{body}.{signature}") is None


def test_the_key_is_read_only_when_first_needed():
    def no_key():
        raise AssertionError("read at construction")

    Seal(no_key)  # building the app must not touch the data directory


# --- several instances: the key comes from the store they share --------------------------------


@pytest.fixture
def redis_url(redis_server):
    return redis_server.url.rsplit("/", 1)[0] + "/3"  # a database of its own: its secret is made here


def test_instances_sharing_redis_sign_alike_without_a_shared_environment(data_dir, redis_url, tmp_path, monkeypatch):
    first = Seal(*installation.seal_key_sources(make_store("redis", redis_url)))
    signature = first.sign("thinking", "Paris is in France.")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "another machine"))  # another installation's own key
    second = Seal(*installation.seal_key_sources(make_store("redis", redis_url)))
    assert second.verify("thinking", "Paris is in France.", signature)
    assert second.key != installation.secret()  # not this installation's file key


def test_instances_with_their_own_stores_sign_with_their_own_keys(data_dir, tmp_path, monkeypatch):
    first = Seal(*installation.seal_key_sources(make_store("sqlite", str(tmp_path / "a.sqlite3"))))
    signature = first.sign("thinking", "Paris is in France.")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "another machine"))
    second = Seal(*installation.seal_key_sources(make_store("sqlite", str(tmp_path / "a.sqlite3"))))
    assert not second.verify("thinking", "Paris is in France.", signature)
    assert not Seal(*installation.seal_key_sources(None)).verify("thinking", "Paris is in France.", signature)


def test_a_fleets_boxes_sign_alike_whatever_their_stores_and_still_know_their_own(data_dir, tmp_path, monkeypatch):
    own = Seal(*installation.seal_key_sources(make_store("sqlite", str(tmp_path / "a.sqlite3"))))
    before = own.sign("thinking", "signed before it joined a fleet")
    first = Seal(*installation.seal_key_sources(make_store("sqlite", str(tmp_path / "a.sqlite3")), "the fleet's secret"))
    signature = first.sign("thinking", "Paris is in France.")
    assert first.verify("thinking", "signed before it joined a fleet", before)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "another machine"))
    second = Seal(*installation.seal_key_sources(make_store("sqlite", str(tmp_path / "b.sqlite3")), "the fleet's secret"))
    assert second.verify("thinking", "Paris is in France.", signature)
    assert not Seal(*installation.seal_key_sources(None, "another fleet")).verify("thinking", "Paris is in France.", signature)


def test_the_environment_key_wins_over_the_shared_store(data_dir, redis_url, monkeypatch):
    monkeypatch.setenv(installation.SECRET_ENV, "shared by every instance")
    seal = Seal(*installation.seal_key_sources(make_store("redis", redis_url)))
    assert seal.key == b"shared by every instance"


def test_while_the_shared_store_is_down_this_installation_signs_and_recognises_its_own(data_dir, monkeypatch):
    down = make_store("redis", f"redis://127.0.0.1:{free_port()}/0")
    seal = Seal(*installation.seal_key_sources(down))
    signature = seal.sign("thinking", "Paris is in France.")  # no exception: the request goes on
    assert seal.key == installation.secret()
    assert Seal(installation.secret).verify("thinking", "Paris is in France.", signature)


def test_a_key_source_that_failed_is_asked_again_later_and_old_signatures_still_verify(monkeypatch):
    answers = iter([None, b"shared" * 6])
    seal = Seal(lambda: next(answers), lambda: b"own" * 11)
    during_outage = seal.sign("thinking", "a thought")
    assert seal.sign("thinking", "a thought") == during_outage  # not asked again at once
    clock = time.monotonic() + sealing.RETRY_SECONDS + 1
    monkeypatch.setattr(sealing.time, "monotonic", lambda: clock)
    assert seal.key == b"shared" * 6
    assert seal.sign("thinking", "a thought") != during_outage
    assert seal.verify("thinking", "a thought", during_outage)
