"""The installation key and the tokens signed with it (thought signatures, encrypted_content)."""

from __future__ import annotations

import os
import stat

import pytest

from api_like_oai import installation
from api_like_oai.sealing import Seal


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    monkeypatch.delenv(installation.SECRET_ENV, raising=False)
    return tmp_path / "api-like-oai"


def test_the_key_is_made_once_and_kept_private(data_dir):
    key = installation.secret()
    assert len(key) == 32
    assert installation.secret() == key    # every worker and restart reads the same key
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
    assert not seal.verify("thinking", "Paris is in France.", "\u0080 not ASCII")   # refused, never an exception


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
    Seal(no_key)   # building the app must not touch the data directory
