"""
Retries and the deadline over real sockets: tiny local servers that trickle, hang up or refuse.

Real time here (a slow server is the point); every bound asserted is generous on the upper side.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator

import pytest

from gateway_client import (
    AcquirerClient,
    AcquirerConfig,
    AuthorizationRequest,
    ConnectionFailedError,
    ConnectionLostError,
    ResponseTimeoutError,
    RetryPolicy,
)

API_KEY = "sk_test_retry_http_Wq4"
TOKEN = "tok_visa_secret_token_77"
FAST = RetryPolicy(backoff_base=0.01, backoff_cap=0.02)

Behaviour = Callable[[socket.socket, int], None]


class Server:
    """A threaded HTTP/1.1 server on 127.0.0.1 whose answers `behaviour(conn, n)` writes."""

    def __init__(self, behaviour: Behaviour) -> None:
        self.behaviour = behaviour
        self.requests: list[bytes] = []
        self.connections = 0
        self.stop = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.05)
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.threads: list[threading.Thread] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.connections += 1
            thread = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            self.threads.append(thread)
            thread.start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(5)
            while not self.stop.is_set():
                request = _read_request(conn)
                if not request:
                    return
                self.requests.append(request)
                try:
                    self.behaviour(conn, len(self.requests))
                except OSError:
                    return

    def idempotency_keys(self) -> list[str]:
        keys = []
        for request in self.requests:
            for line in request.split(b"\r\n"):
                if line.lower().startswith(b"idempotency-key:"):
                    keys.append(line.split(b":", 1)[1].strip().decode())
        return keys

    def close(self) -> None:
        self.stop.set()
        self.listener.close()
        for thread in self.threads:
            # Daemon threads; a trickling one ends at its next write to the closed socket.
            thread.join(timeout=0.1)


def _read_request(conn: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        try:
            chunk = conn.recv(65536)
        except OSError:
            return b""
        if not chunk:
            return b""
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(body) < length:
        body += conn.recv(65536)
    return head + b"\r\n\r\n" + body


@pytest.fixture
def server() -> Iterator[Callable[[Behaviour], Server]]:
    servers: list[Server] = []

    def start(behaviour: Behaviour) -> Server:
        servers.append(Server(behaviour))
        return servers[-1]

    yield start
    for each in servers:
        each.close()


def authorization_request(reference: str | None = None) -> AuthorizationRequest:
    reference = reference or f"pay_{uuid.uuid4().hex[:12]}"
    return AuthorizationRequest(
        amount=1050,
        currency="EUR",
        payment_method=TOKEN,
        payment_reference=reference,
        idempotency_key=f"authorize-{reference}",
    )


def charge_body(reference: str) -> bytes:
    return (
        b'{"id":"ch_1","status":"approved","decline_code":null,"amount":1050,"currency":"EUR",'
        b'"reference":"%s","created_at":"2026-11-29T17:00:00Z"}' % reference.encode()
    )


def client_for(url: str, policy: RetryPolicy = FAST, **config: object) -> AcquirerClient:
    return AcquirerClient(
        AcquirerConfig(base_url=url, api_key=API_KEY, **config),  # type: ignore[arg-type]
        policy=policy,
    )


def test_body_trickling_one_byte_per_second_is_cut_off_at_the_deadline(server) -> None:
    """A 201 whose body comes at 1 byte/s (never a 3 s read timeout) ends at the 1.5 s deadline."""

    def trickle(conn: socket.socket, n: int) -> None:
        conn.sendall(b"HTTP/1.1 201 Created\r\nContent-Length: 200\r\n\r\n")
        for _ in range(200):
            conn.sendall(b"{")
            time.sleep(1.0)

    acquirer = server(trickle)
    with client_for(acquirer.url, RetryPolicy(deadline=1.5, read_timeout=3.0)) as client:
        started = time.monotonic()
        with pytest.raises(ResponseTimeoutError) as info:
            client.authorize(authorization_request())
        elapsed = time.monotonic() - started
    assert 1.4 <= elapsed < 2.5
    assert info.value.status_code == 201
    assert len(acquirer.requests) == 1


def test_status_line_trickling_is_cut_off_at_the_deadline(server) -> None:
    """A server dribbling its status line (one byte per 0.3 s) is cut off at the 1 s deadline."""

    def dribble(conn: socket.socket, n: int) -> None:
        for byte in b"HTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n":
            conn.sendall(bytes([byte]))
            time.sleep(0.3)

    acquirer = server(dribble)
    with client_for(acquirer.url, RetryPolicy(deadline=1.0, read_timeout=3.0)) as client:
        started = time.monotonic()
        with pytest.raises(ResponseTimeoutError):
            client.authorize(authorization_request())
        assert time.monotonic() - started < 2.0


def test_pooled_connection_is_also_held_to_the_deadline(server) -> None:
    """The second call on a kept-alive connection is cut off at its deadline too."""

    def first_fast_then_trickle(conn: socket.socket, n: int) -> None:
        if n == 1:
            body = b'{"data":[]}'
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
            return
        conn.sendall(b"HTTP/1.1 201 Created\r\nContent-Length: 100\r\n\r\n")
        for _ in range(100):
            conn.sendall(b" ")
            time.sleep(0.5)

    acquirer = server(first_fast_then_trickle)
    with client_for(acquirer.url, RetryPolicy(deadline=1.0, max_attempts=1)) as client:
        assert client.lookup("pay_x") == []
        started = time.monotonic()
        with pytest.raises(ResponseTimeoutError):
            client.authorize(authorization_request())
        assert time.monotonic() - started < 2.0
    assert acquirer.connections == 1


def test_keep_alive_still_works_under_the_deadline_wrapper(server) -> None:
    """Three quick calls reuse one connection: the deadline wrapper leaves pooling intact."""
    request = authorization_request("pay_keepalive1")

    def ok(conn: socket.socket, n: int) -> None:
        body = charge_body(request.payment_reference)
        conn.sendall(b"HTTP/1.1 201 Created\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))

    acquirer = server(ok)
    with client_for(acquirer.url) as client:
        for _ in range(3):
            assert client.authorize(request).approved is True
    assert acquirer.connections == 1


def test_connection_refused_is_retried_then_raised_with_attempts() -> None:
    """A port nobody listens on: three attempts, ConnectionFailedError with attempts == 3."""
    with socket.socket() as closed_port:
        closed_port.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{closed_port.getsockname()[1]}"
        with client_for(url) as client, pytest.raises(ConnectionFailedError) as info:
            client.authorize(authorization_request())
    assert info.value.attempts == 3


def test_hang_up_after_the_request_is_resent_with_the_same_key(server) -> None:
    """Closed after reading the request (ambiguous): re-sent with the same key, then approved."""
    request = authorization_request()

    def hang_up_twice(conn: socket.socket, n: int) -> None:
        if n <= 2:
            conn.shutdown(socket.SHUT_RDWR)
            raise OSError("closed")
        body = charge_body(request.payment_reference)
        conn.sendall(b"HTTP/1.1 201 Created\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))

    acquirer = server(hang_up_twice)
    with client_for(acquirer.url) as client:
        assert client.authorize(request).approved is True
    assert acquirer.idempotency_keys() == [request.idempotency_key] * 3


def test_hang_up_is_not_resent_when_keys_are_not_honoured(server) -> None:
    """Without key honouring, a hang-up after sending is raised as ConnectionLostError at once."""

    def hang_up(conn: socket.socket, n: int) -> None:
        conn.shutdown(socket.SHUT_RDWR)
        raise OSError("closed")

    acquirer = server(hang_up)
    with (
        client_for(acquirer.url, honours_idempotency_keys=False) as client,
        pytest.raises(ConnectionLostError),
    ):
        client.authorize(authorization_request())
    assert len(acquirer.requests) == 1


def test_503_retry_after_is_honoured_in_real_time(server) -> None:
    """Retry-After: 1 on a 503: the second request arrives at least 1 s after the first."""
    request = authorization_request()
    arrivals: list[float] = []

    def unavailable_once(conn: socket.socket, n: int) -> None:
        arrivals.append(time.monotonic())
        if n == 1:
            conn.sendall(b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\n"
                         b"Content-Length: 0\r\n\r\n")  # fmt: skip
            return
        body = charge_body(request.payment_reference)
        conn.sendall(b"HTTP/1.1 201 Created\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))

    acquirer = server(unavailable_once)
    with client_for(acquirer.url) as client:
        assert client.authorize(request).approved is True
    assert arrivals[1] - arrivals[0] >= 1.0


def test_no_secret_in_any_log_record_at_debug_over_real_http(server, caplog) -> None:
    """With DEBUG on every logger (httpx, httpcore included), across retries: no key or token."""
    for name in (None, "httpx", "httpcore", "gateway_client"):
        caplog.set_level(logging.DEBUG, logger=name)
    request = authorization_request()

    def fail_then_ok(conn: socket.socket, n: int) -> None:
        if n == 1:
            echo = f'{{"code":"x","detail":"Bearer {API_KEY} {TOKEN}"}}'.encode()
            conn.sendall(b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: %d\r\n\r\n%s"
                         % (len(echo), echo))  # fmt: skip
            return
        body = charge_body(request.payment_reference)
        conn.sendall(b"HTTP/1.1 201 Created\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))

    acquirer = server(fail_then_ok)
    with client_for(acquirer.url) as client:
        client.authorize(request)
    names = {record.name.split(".")[0] for record in caplog.records}
    # httpx's own logger writes only from an httpx.Client, which the client does not use (it
    # sends on the transport, ADR 0033); httpcore logs every step of the exchange.
    assert {"gateway_client", "httpcore"} <= names
    for record in caplog.records:
        text = record.getMessage() + repr(vars(record))
        assert API_KEY not in text
        assert "Bearer" not in text
        assert TOKEN not in text
