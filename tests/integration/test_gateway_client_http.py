"""
gateway_client over real sockets: network faults from tiny local servers, and the sandbox.

The classification of ONE attempt: clients here use `ONE_ATTEMPT`; retries over real sockets
are in test_gateway_retry_http.py and test_gateway_sandbox_retries.py.
"""

from __future__ import annotations

import logging
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC

import pytest

from gateway_client import (
    AcquirerClient,
    AcquirerConfig,
    AuthenticationError,
    AuthorizationRequest,
    ConnectionFailedError,
    ConnectionLostError,
    IdempotencyConflictError,
    InvalidRequestError,
    MalformedResponseError,
    RateLimitedError,
    ResponseTimeoutError,
    RetryPolicy,
    UpstreamServerError,
)
from tests.support.sandbox import SandboxProcess

API_KEY = "sk_test_integration_Zq81"
ONE_ATTEMPT = RetryPolicy(max_attempts=1)

# -- a tiny local server for network faults --------------------------------------------------------

Behaviour = Callable[[socket.socket, bytes, threading.Event], None]


def read_request(conn: socket.socket) -> bytes:
    """Read one HTTP/1.1 request (head and Content-Length body) from `conn`."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(body) < length:
        chunk = conn.recv(65536)
        if not chunk:
            break
        body += chunk
    return head + b"\r\n\r\n" + body


class FaultServer:
    """Accepts connections on 127.0.0.1 and runs `behaviour` on each after reading the request."""

    def __init__(self, behaviour: Behaviour) -> None:
        self.behaviour = behaviour
        self.requests: list[bytes] = []
        self.stop = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.05)
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.threads: list[threading.Thread] = []
        self.acceptor = threading.Thread(target=self._accept, daemon=True)
        self.acceptor.start()

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            thread = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            self.threads.append(thread)
            thread.start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(5)
            self.requests.append(read_request(conn))
            self.behaviour(conn, self.requests[-1], self.stop)

    def close(self) -> None:
        self.stop.set()
        self.acceptor.join(timeout=2)
        self.listener.close()
        for thread in self.threads:
            thread.join(timeout=2)


@pytest.fixture
def fault_server() -> Iterator[Callable[[Behaviour], FaultServer]]:
    servers: list[FaultServer] = []

    def start(behaviour: Behaviour) -> FaultServer:
        server = FaultServer(behaviour)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.close()


def close_without_answer(conn: socket.socket, request: bytes, stop: threading.Event) -> None:
    conn.shutdown(socket.SHUT_RDWR)


def never_answer(conn: socket.socket, request: bytes, stop: threading.Event) -> None:
    stop.wait(5)


def reply(raw: bytes) -> Behaviour:
    def behaviour(conn: socket.socket, request: bytes, stop: threading.Event) -> None:
        conn.sendall(raw)

    return behaviour


def make_client(base_url: str, **overrides: object) -> AcquirerClient:
    fields: dict[str, object] = {
        "base_url": base_url,
        "api_key": API_KEY,
        "connect_timeout": 0.5,
        "read_timeout": 1.0,
    }
    fields.update(overrides)
    config = AcquirerConfig(**fields)  # type: ignore[arg-type]
    policy = ONE_ATTEMPT.replace(
        connect_timeout=config.connect_timeout, read_timeout=config.read_timeout
    )
    return AcquirerClient(config, policy=policy)


def authorization_request(
    payment_method: str = "tok_visa", *, amount: int = 1050, key: str | None = None
) -> AuthorizationRequest:
    return AuthorizationRequest(
        amount=amount,
        currency="EUR",
        payment_method=payment_method,
        payment_reference=f"pay_{uuid.uuid4().hex[:12]}",
        idempotency_key=key or f"acq_{uuid.uuid4()}",
    )


CHARGE_JSON = (
    b'{"id":"ch_1","status":"approved","decline_code":null,"amount":1050,"currency":"EUR",'
    b'"reference":"%s","created_at":"2026-11-29T17:00:00Z"}'
)


# -- network faults --------------------------------------------------------------------------------


def test_connection_refused_is_connection_failed() -> None:
    """A port that is bound but not listening refuses the connection: ConnectionFailedError."""
    with socket.socket() as closed_port:
        closed_port.bind(("127.0.0.1", 0))  # held, so nobody else can listen there
        port = closed_port.getsockname()[1]
        with (
            make_client(f"http://127.0.0.1:{port}") as client,
            pytest.raises(ConnectionFailedError) as info,
        ):
            client.authorize(authorization_request())
    assert info.value.status_code is None


@pytest.mark.skipif(sys.platform != "linux", reason="relies on Linux dropping SYNs to a full queue")
def test_full_accept_queue_is_connect_timeout() -> None:
    """A listener with a full accept queue never completes the handshake: ConnectionFailedError."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        address = listener.getsockname()
        fillers = []
        for _ in range(4):
            filler = socket.socket()
            filler.setblocking(False)
            filler.connect_ex(address)
            fillers.append(filler)
        try:
            time.sleep(0.05)
            with (
                make_client(f"http://127.0.0.1:{address[1]}", connect_timeout=0.2) as client,
                pytest.raises(ConnectionFailedError) as info,
            ):
                client.authorize(authorization_request())
            assert type(info.value.__cause__).__name__ == "ConnectTimeout"
        finally:
            for filler in fillers:
                filler.close()


def test_server_closing_after_request_is_connection_lost(fault_server) -> None:
    """A server that reads the request and hangs up without answering: ConnectionLostError."""
    server = fault_server(close_without_answer)
    with make_client(server.url) as client, pytest.raises(ConnectionLostError) as info:
        client.authorize(authorization_request())
    assert len(server.requests) == 1
    assert b"POST /charges" in server.requests[0]
    assert info.value.status_code is None


def test_server_never_answering_is_response_timeout(fault_server) -> None:
    """A server that reads the request and never answers trips the read timeout."""
    server = fault_server(never_answer)
    started = time.monotonic()
    with (
        make_client(server.url, read_timeout=0.2) as client,
        pytest.raises(ResponseTimeoutError),
    ):
        client.authorize(authorization_request())
    assert time.monotonic() - started < 2


def test_body_breaking_off_after_201_is_connection_lost(fault_server) -> None:
    """A 201 whose body is cut short leaves the outcome unknown: ConnectionLostError."""
    server = fault_server(reply(b'HTTP/1.1 201 Created\r\nContent-Length: 500\r\n\r\n{"id":"ch_'))
    with make_client(server.url) as client, pytest.raises(ConnectionLostError) as info:
        client.authorize(authorization_request())
    assert info.value.status_code == 201


def test_garbled_201_is_malformed(fault_server) -> None:
    """A complete 201 with a body that is not JSON is a MalformedResponseError."""
    body = b"<html>oops</html>"
    server = fault_server(
        reply(b"HTTP/1.1 201 Created\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    )
    with make_client(server.url) as client, pytest.raises(MalformedResponseError):
        client.authorize(authorization_request())


def test_429_retry_after_over_http(fault_server) -> None:
    """A real 429 with Retry-After is RateLimitedError with the delay read."""
    server = fault_server(
        reply(b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 12\r\nContent-Length: 0\r\n\r\n")
    )
    with make_client(server.url) as client, pytest.raises(RateLimitedError) as info:
        client.authorize(authorization_request())
    assert (info.value.retry_after, info.value.retry_after_header) == (12.0, "12")


def test_headers_on_the_wire(fault_server) -> None:
    """The request on the wire carries the Bearer key, the idempotency key and JSON."""
    request = authorization_request(key="acq_wire_key_1")
    body = CHARGE_JSON % request.payment_reference.encode()
    server = fault_server(
        reply(b"HTTP/1.1 201 Created\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    )
    with make_client(server.url) as client:
        assert client.authorize(request).approved is True
    head = server.requests[0].split(b"\r\n\r\n")[0].lower()
    assert f"authorization: bearer {API_KEY}".lower().encode() in head
    assert b"idempotency-key: acq_wire_key_1" in head
    assert b"content-type: application/json" in head


def test_proxy_environment_is_ignored(fault_server, monkeypatch) -> None:
    """Proxy variables in the environment are not used: the client is handed its config."""
    with socket.socket() as dead_proxy:
        dead_proxy.bind(("127.0.0.1", 0))
        proxy = f"http://127.0.0.1:{dead_proxy.getsockname()[1]}"
        for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "all_proxy"):
            monkeypatch.setenv(name, proxy)
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        request = authorization_request()
        body = CHARGE_JSON % request.payment_reference.encode()
        server = fault_server(
            reply(b"HTTP/1.1 201 Created\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        )
        with make_client(server.url) as client:
            assert client.authorize(request).approved is True


def test_no_secret_in_logs_over_real_http(fault_server, caplog) -> None:
    """With DEBUG logging of httpx and httpcore, no record carries the key or the header."""
    caplog.set_level(logging.DEBUG)
    server = fault_server(close_without_answer)
    with make_client(server.url) as client, pytest.raises(ConnectionLostError):
        client.authorize(authorization_request())
    assert caplog.records
    for record in caplog.records:
        text = record.getMessage() + repr(vars(record))
        assert API_KEY not in text
        assert "Bearer" not in text


class WaveServer:
    """A keep-alive HTTP/1.1 server on 127.0.0.1 answering every GET with ``{"data": []}`` once
    ``wave`` requests are in flight together (a barrier), counting the connections it accepted
    and those its clients closed."""

    def __init__(self, wave: int) -> None:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        together = threading.Barrier(wave, timeout=10)
        counts = self.counts = {"accepted": 0, "closed": 0}
        counting = threading.Lock()  # the handlers' threads end together

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                together.wait()
                body = b'{"data": []}'
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def finish(self) -> None:
                super().finish()
                with counting:
                    counts["closed"] += 1  # the client closed it (or the server is shutting down)

            def log_message(self, *args: object) -> None:
                pass

        class Server(ThreadingHTTPServer):
            daemon_threads = True
            request_queue_size = 128

            def verify_request(self, request: object, client_address: object) -> bool:
                counts["accepted"] += 1  # one per accepted connection
                return True

        self.server = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_calls_in_flight_keep_their_connections_open_for_the_next_calls() -> None:
    """The default transport keeps a connection per call in flight open between calls
    (`ShardedTransport`, ADR 0054): two waves of 40 concurrent look-ups against a keep-alive
    HTTP/1.1 server open 40 connections, not 40 and then 20 more (httpx's default keeps 20
    open and closes the rest after their call)."""
    from concurrent.futures import ThreadPoolExecutor

    wave = 40
    server = WaveServer(wave)
    config = AcquirerConfig(
        base_url=server.url, api_key=API_KEY, connect_timeout=2.0, read_timeout=5.0,
        name="keep-alive",
    )  # fmt: skip
    try:
        with AcquirerClient(config, policy=ONE_ATTEMPT) as client, ThreadPoolExecutor(wave) as pool:
            for _ in range(2):
                looked_up = list(
                    pool.map(lambda i: client.lookup(f"pay_{uuid.uuid4().hex}"), range(wave))
                )
                assert looked_up == [[]] * wave
    finally:
        server.close()
    assert server.counts["accepted"] == wave


def test_the_sharded_transport_keeps_connections_per_pool_and_closes_them_all() -> None:
    """`ShardedTransport`: a thread's calls go to one pool, each pool keeps its own
    ``keep_alive_per_shard``: four threads over two pools keeping one each open four
    connections, then two more in the second wave (two pools kept one each); with two kept per
    pool, no more than the first four. `close` closes every pool's connections."""
    import ssl

    import httpx

    from gateway_client._transport import ShardedTransport

    def two_waves(keep_alive_per_shard: int) -> dict[str, int]:
        server = WaveServer(4)
        transport = ShardedTransport(shards=2, keep_alive_per_shard=keep_alive_per_shard)
        go = threading.Barrier(4, timeout=10)

        def calls() -> None:
            for _ in range(2):
                go.wait()
                answer = transport.handle_request(httpx.Request("GET", server.url + "/"))
                assert answer.read() == b'{"data": []}'
                answer.close()

        threads = [threading.Thread(target=calls) for _ in range(4)]
        try:
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(10)
            assert transport.deadline_sockets
            transport.close()
            for _ in range(1000):  # the server's threads see the closes (never a timed check)
                if server.counts["closed"] == server.counts["accepted"]:
                    break
                time.sleep(0.01)
        finally:
            server.close()
        return server.counts

    # One TLS context for every pool (a context per pool cost 0.5 s a client), verifying.
    probe = ShardedTransport()
    contexts = {pool._pool._ssl_context for pool in probe._pools}
    probe.close()
    assert len(contexts) == 1
    assert all(c.verify_mode == ssl.CERT_REQUIRED and c.check_hostname for c in contexts)
    assert two_waves(keep_alive_per_shard=1) == {"accepted": 6, "closed": 6}
    assert two_waves(keep_alive_per_shard=2) == {"accepted": 4, "closed": 4}
    with pytest.raises(ValueError, match="at least 1"):
        ShardedTransport(shards=0)


# -- against the sandbox acquirer ------------------------------------------------------------------


@pytest.fixture(scope="module")
def sandbox() -> Iterator[SandboxProcess]:
    with SandboxProcess.start(extra_args=("--hang-seconds", "1.5")) as process:
        yield process


@pytest.fixture
def acquirer(sandbox: SandboxProcess) -> Iterator[AcquirerClient]:
    sandbox.reset()
    client = AcquirerClient(
        AcquirerConfig(
            base_url=sandbox.url,
            api_key=sandbox.api_key,
            connect_timeout=1.0,
            read_timeout=3.0,
            name="sandbox",
        ),
        policy=ONE_ATTEMPT,
    )
    with client:
        yield client


def test_sandbox_approves(acquirer: AcquirerClient, sandbox: SandboxProcess) -> None:
    """tok_visa is approved: a fresh Authorization with the sandbox's charge id."""
    request = authorization_request("tok_visa")
    authorization = acquirer.authorize(request)
    assert authorization.approved is True
    assert authorization.decline_code is None
    assert authorization.acquirer_reference.startswith("ch_")
    assert (authorization.amount, authorization.currency) == (1050, "EUR")
    assert authorization.payment_reference == request.payment_reference
    assert authorization.created_at.tzinfo is UTC
    assert authorization.replayed is False
    assert sandbox.stats()["charges_total"] == 1


def test_sandbox_declines_with_code(acquirer: AcquirerClient) -> None:
    """tok_decline comes back as a declined Authorization, not an exception."""
    authorization = acquirer.authorize(authorization_request("tok_decline"))
    assert authorization.approved is False
    assert authorization.decline_code == "do_not_honor"


def test_sandbox_replays_same_key(acquirer: AcquirerClient, sandbox: SandboxProcess) -> None:
    """The same request and key again is answered from the store: replayed, one charge."""
    request = authorization_request("tok_visa")
    first = acquirer.authorize(request)
    second = acquirer.authorize(request)
    assert second.replayed is True
    assert second.acquirer_reference == first.acquirer_reference
    assert sandbox.stats()["charges_total"] == 1


def test_sandbox_key_reused_with_other_amount_is_invalid(acquirer: AcquirerClient) -> None:
    """The same key with another amount is refused with 422: permanent."""
    key = f"acq_{uuid.uuid4()}"
    first = authorization_request(amount=1000, key=key)
    acquirer.authorize(first)
    other = AuthorizationRequest(
        amount=2000,
        currency="EUR",
        payment_method="tok_visa",
        payment_reference=first.payment_reference,
        idempotency_key=key,
    )
    with pytest.raises(InvalidRequestError) as info:
        acquirer.authorize(other)
    assert (info.value.status_code, info.value.code) == (422, "idempotency_key_reused")


def test_sandbox_bad_api_key_is_authentication_error(sandbox: SandboxProcess) -> None:
    """A wrong API key gets a 401: AuthenticationError, the key kept out of the message."""
    wrong_key = "sk_wrong_key_Hx5"
    config = AcquirerConfig(base_url=sandbox.url, api_key=wrong_key)
    with (
        AcquirerClient(config, policy=ONE_ATTEMPT) as client,
        pytest.raises(AuthenticationError) as info,
    ):
        client.authorize(authorization_request())
    assert info.value.status_code == 401
    assert info.value.code == "invalid_api_key"
    assert wrong_key not in str(info.value)


def test_sandbox_500_after_commit_is_ambiguous_and_reconcilable(
    acquirer: AcquirerClient,
) -> None:
    """A 500 after the charge was recorded is ambiguous; look-up and re-send find the charge."""
    request = authorization_request("tok_500_after_commit")
    with pytest.raises(UpstreamServerError) as info:
        acquirer.authorize(request)
    assert info.value.status_code == 500
    (found,) = acquirer.lookup(request.payment_reference)
    assert found.approved is True
    resent = acquirer.authorize(request)
    assert resent.replayed is True
    assert resent.acquirer_reference == found.acquirer_reference


def test_sandbox_timeout_after_commit_is_response_timeout(sandbox: SandboxProcess) -> None:
    """A reply slower than the read timeout is a ResponseTimeoutError; the charge exists."""
    config = AcquirerConfig(base_url=sandbox.url, api_key=sandbox.api_key, read_timeout=0.3)
    request = authorization_request("tok_timeout_after_commit")
    policy = ONE_ATTEMPT.replace(read_timeout=0.3)
    with AcquirerClient(config, policy=policy) as client:
        with pytest.raises(ResponseTimeoutError):
            client.authorize(request)
        assert len(client.lookup(request.payment_reference)) == 1
        assert client.authorize(request).replayed is True


def test_sandbox_key_in_flight_is_idempotency_conflict(acquirer: AcquirerClient) -> None:
    """A second request while the first holds the key gets 409: IdempotencyConflictError."""
    request = authorization_request("tok_slow_1500")
    first: list[object] = []
    thread = threading.Thread(target=lambda: first.append(acquirer.authorize(request)))
    thread.start()
    try:
        time.sleep(0.3)
        with pytest.raises(IdempotencyConflictError) as info:
            acquirer.authorize(request)
        assert info.value.status_code == 409
    finally:
        thread.join(timeout=5)
    assert len(first) == 1


def test_sandbox_lookup_of_unknown_reference_is_empty(acquirer: AcquirerClient) -> None:
    """Looking up a reference the acquirer never saw returns an empty list."""
    assert acquirer.lookup(f"pay_{uuid.uuid4().hex}") == []
