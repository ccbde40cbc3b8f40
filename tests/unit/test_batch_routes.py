"""The Files and Batch routes without a server (the app's test client): with `--store none` they say
storage is off, and bad input is the API's error shape (Anthropic's on /v1/messages/batches)."""

from __future__ import annotations

import io

from .conftest import make_app


def test_without_a_store_the_routes_say_storage_is_off():
    client = make_app("--chat-prompt-model", "chatml", "--store", "none").test_client()
    upload = client.post("/v1/files", data={"purpose": "batch", "file": (io.BytesIO(b"{}\n"), "x.jsonl")})
    assert upload.status_code == 400 and "--store none" in upload.get_json()["error"]["message"]
    assert client.get("/v1/batches").status_code == 400
    refused = client.post("/v1/messages/batches", json={"requests": [{"custom_id": "a", "params": {}}]})
    assert refused.status_code == 400 and refused.get_json()["type"] == "error"  # Anthropic's shape


def test_bad_input_names_the_field(tmp_path):
    client = make_app("--chat-prompt-model", "chatml", "--store", f"sqlite:///{tmp_path}/s.sqlite3").test_client()
    wrong = client.post("/v1/files", data={"purpose": "nonsense", "file": (io.BytesIO(b"x"), "x.txt")})
    assert wrong.status_code == 400 and wrong.get_json()["error"]["param"] == "purpose"
    seconds = {"purpose": "user_data", "expires_after[anchor]": "created_at", "expires_after[seconds]": "soon"}
    assert client.post("/v1/files", data={**seconds, "file": (io.BytesIO(b"x"), "x.txt")}).get_json()["error"]["param"] == (
        "expires_after.seconds"
    )
    assert client.get("/v1/files?limit=0").get_json()["error"]["param"] == "limit"
    assert client.get("/v1/files/file-none/content").status_code == 404
    window = client.post(
        "/v1/batches", json={"input_file_id": "file-x", "endpoint": "/v1/embeddings", "completion_window": "soon"}
    )
    assert window.status_code == 404  # the file is looked up first
    batch_file = client.post("/v1/files", data={"purpose": "batch", "file": (io.BytesIO(b"{}\n"), "in.jsonl")}).get_json()
    window = client.post(
        "/v1/batches", json={"input_file_id": batch_file["id"], "endpoint": "/v1/embeddings", "completion_window": "soon"}
    )
    assert window.status_code == 400 and window.get_json()["error"]["param"] == "completion_window"
    made = client.post("/v1/batches", json={"input_file_id": batch_file["id"], "endpoint": "/v1/embeddings"}).get_json()
    assert (
        made["status"] == "validating" and made["completion_window"] == "24h" and made["expires_at"] - made["created_at"] == 86400
    )
    twice = {"requests": [{"custom_id": "a", "params": {}}, {"custom_id": "a", "params": {}}]}
    duplicate = client.post("/v1/messages/batches", json=twice)
    assert duplicate.status_code == 400 and duplicate.get_json()["error"]["type"] == "invalid_request_error"
    bad_id = client.post("/v1/messages/batches", json={"requests": [{"custom_id": "no spaces", "params": {}}]})
    assert bad_id.status_code == 400
    assert client.get("/v1/messages/batches/msgbatch_none/results").status_code == 404
