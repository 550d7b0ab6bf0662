"""merchant_client's deadline holds on a real socket: an API that trickles its answer one byte at
a time never trips a per-read timeout, and is cut off at the call's deadline all the same
(resilience's deadline-aware sockets, installed on the client's transport)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from merchant_client import DEFAULT_POLICY, MerchantClient, OutcomeUnknown


@pytest.fixture
def trickling_api() -> Iterator[str]:
    """A server that answers every request with a 201 whose 100 kB body comes 1 byte / 50 ms,
    and closes the connection after 200 bytes (10 s) without finishing it."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve(conn: socket.socket) -> None:
        with conn:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 201 Created\r\nContent-Type: application/json\r\n"
                         b"Content-Length: 100000\r\n\r\n{")  # fmt: skip
            for _ in range(200):
                if stop.is_set():
                    return
                try:
                    conn.sendall(b" ")
                except OSError:
                    return
                time.sleep(0.05)

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    stop.set()
    listener.close()


def test_a_trickled_answer_is_cut_off_at_the_deadline(trickling_api):
    """Each byte arrives well within the 10 s read timeout; the 1 s deadline ends the call, as
    an unknown outcome (the payment may exist: re-send the same key). Without the deadline on
    the sockets the call would end only when the server closes, 10 s later, as a protocol
    error instead of a timeout."""
    policy = DEFAULT_POLICY.replace(deadline=1.0, max_attempts=1)
    client = MerchantClient(trickling_api, "sk_test", policy=policy)
    with client, pytest.raises(OutcomeUnknown) as raised:
        client.create_payment(1999, "EUR", "tok_visa", idempotency_key="trickle-1")

    assert raised.value.attempts == 1 and raised.value.idempotency_key == "trickle-1"
    assert isinstance(raised.value.__cause__, httpx.ReadTimeout)
