"""The workers' end of the supervisor's socket (supervisor/client.py): a supervisor that dies is the same
SupervisorGone however its end goes, closed or reset, so that a request waiting for a lease asks the next
supervisor instead of failing with a 500 (a supervisor SIGKILLed with a request it had not read yet
resets the connection: seen in tests/e2e/test_models_recovery.py)."""

from __future__ import annotations

import socket

import pytest

from api_like_oai.supervisor.client import LineReader, SupervisorGone


@pytest.mark.parametrize("unread", [b"", b'{"op": "acquire", "model": "a"}\n'])
def test_a_supervisor_gone_closed_or_reset_is_supervisor_gone(unread):
    worker, supervisor = socket.socketpair()
    with worker:
        worker.sendall(unread)  # left unread by the supervisor: its end resets rather than closes
        supervisor.close()
        with pytest.raises(SupervisorGone):
            LineReader(worker).next()


def test_messages_are_read_a_line_at_a_time():
    worker, supervisor = socket.socketpair()
    with worker, supervisor:
        supervisor.sendall(b'{"wait": "loading"}\n{"ok": true}\n')
        reader = LineReader(worker)
        assert reader.next() == {"wait": "loading"} and reader.next() == {"ok": True}
