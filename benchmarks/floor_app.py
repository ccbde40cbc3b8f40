"""The floor of the proxy's stack (issue 29): the least a Flask app under the proxy's own gunicorn
gevent worker and HTTP client does for an OpenAI request in front of llama.cpp. It parses the body,
sends one request to `/completion`, and writes the JSON, or one SSE event per upstream event. No
template, validation, metrics or access record: what the proxy costs above this is its own Python.

    gunicorn --worker-class api_like_oai.worker.EventWorker --env FLOOR_UPSTREAMS='{"bench": URL}' \
        benchmarks.floor_app:app
"""

import json
import os

from flask import Flask, Response, request

from api_like_oai.backends.http import HTTPClient

app = Flask(__name__)
app.in_flight = 0  # what the proxy's worker waits for at shutdown (its middleware counts it): nothing here
UPSTREAMS = {
    model: HTTPClient(url, connect_timeout=5, read_timeout=600)
    for model, url in json.loads(os.environ["FLOOR_UPSTREAMS"]).items()
}


def choice(text: str, chat: bool, streamed: bool) -> dict:
    if not chat:
        return {"index": 0, "text": text}
    return {"index": 0, "delta" if streamed else "message": {"role": "assistant", "content": text}}


@app.post("/v1/chat/completions")
@app.post("/v1/completions")
def generate():
    body = request.get_json()
    chat, streamed = "messages" in body, bool(body.get("stream"))
    prompt = "\n".join(m["content"] for m in body["messages"]) if chat else body["prompt"]
    upstream = {
        "prompt": prompt,
        "n_predict": body.get("max_tokens", -1),
        "temperature": body.get("temperature", 1),
        "seed": body.get("seed", -1),
        "stream": streamed,
    }
    answer = UPSTREAMS[body["model"]].request("POST", "/completion", json.dumps(upstream).encode())
    if not streamed:
        event = json.loads(answer.read())
        return {"object": "chat.completion", "choices": [choice(event["content"], chat, False)]}

    def events():
        for piece in answer.iter_bytes():
            if piece.startswith(b"data: "):
                event = json.loads(piece[6:])
                yield b"data: " + json.dumps({"choices": [choice(event["content"], chat, True)]}).encode() + b"\n\n"
        yield b"data: [DONE]\n\n"

    return Response(events(), mimetype="text/event-stream")


@app.get("/health")
def health():
    return {"status": "ok"}
