"""The workers' end of the supervisor's socket (supervisor/client.py): a supervisor that dies is the same
SupervisorGone however its end goes, closed or reset, so that a request waiting for a lease asks the next
supervisor instead of failing with a 500 (a supervisor SIGKILLed with a request it had not read yet
resets the connection: seen in tests/e2e/test_models_recovery.py)."""

from __future__ import annotations

import socket

import pytest

from api_like_oai.supervisor import messages
from api_like_oai.supervisor.client import LineReader, SupervisorClient, SupervisorGone


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


def test_a_supervisor_that_died_before_reading_a_request_is_asked_again(tmp_path, monkeypatch):
    """A supervisor SIGKILLed just after taking a connection breaks the worker's send (EPIPE): nothing of
    the request was acted on, so it is sent again to the supervisor the master starts, not a 503."""
    path = str(tmp_path / "supervisor.sock")
    real_socket, sends = socket.socket, []

    class DiesOnce(real_socket):
        def sendall(self, data, *flags):
            sends.append(data)
            if len(sends) == 1:
                raise BrokenPipeError(32, "Broken pipe")
            return super().sendall(data, *flags)

    with real_socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(path)
        listener.listen()
        monkeypatch.setattr(socket, "socket", DiesOnce)
        request = messages.request_of({"op": "status"})
        connection, _ = SupervisorClient(path)._open(request)
        monkeypatch.undo()
        broken, _ = listener.accept()  # the connection the dead supervisor took: closed, nothing on it
        accepted, _ = listener.accept()
        with connection, broken, accepted:
            assert broken.recv(65536) == b"" and accepted.recv(65536) == messages.encode(request) and len(sends) == 2
