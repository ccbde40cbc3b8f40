"""The Ollama bench rows' arithmetic and NDJSON watch (benchmarks/ollama_rows.py, issue 38)."""

from __future__ import annotations

from benchmarks.ollama_rows import LineTextWatch, OllamaRow, ollama_body, section, targets


def test_the_watch_notes_the_first_line_with_text_even_split_across_chunks():
    watch = LineTextWatch()
    watch.feed(b'{"model":"m","message":{"role":"assistant","content":""},"done":false}\n{"model":"m","mes')
    assert watch.seen_at is None
    watch.feed(b'sage":{"role":"assistant","content":"Hi"},"done":false}\n')
    assert watch.seen_at is not None


def test_the_targets_are_judged_against_the_openai_route():
    cpu = OllamaRow("non-streamed", cpu_us={"openai": 1000.0, "ollama": 1080.0}, requests={"openai": 9, "ollama": 9})
    slow = OllamaRow("streamed", cpu_us={"openai": 1000.0, "ollama": 1200.0}, requests={"openai": 9, "ollama": 9})
    ttft = OllamaRow("real", ttft_ms={"direct": 10.0, "openai": 10.5, "ollama": 10.6}, requests={"direct": 6})
    checks = targets([cpu, ttft])
    assert [check.met for check in checks] == [True, True]
    assert [check.met for check in targets([cpu, slow])] == [False]
    assert "1.08x" in checks[0].measured and "+0.60 ms" in checks[1].measured and "0.10 ms apart" in checks[1].measured
    assert "/api/chat" in section([cpu, ttft])


def test_the_body_is_the_openai_rows_chat_in_ollamas_words():
    body = ollama_body(True, "bench")
    assert body["stream"] is True and body["options"]["num_predict"] == 64 and body["messages"]
