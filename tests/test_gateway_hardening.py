"""An attacker's pass over `skillgraft serve`: each finding of that pass, replayed against a real
gateway (with an API key, a deposit key and tight limits) over raw sockets where the framing
matters. docs/limits.md lists these tests in its threat model.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time

import httpx
import pytest

from tests.conftest import GIT_MANUAL
from tests.required import need
from tests.required import require_llama_server

need("fastapi", "skillgraft[serve]")

API_KEY, DEPOSIT_KEY = "api-4b1d", "deposit-9c2e"
READ = {"Authorization": f"Bearer {API_KEY}"}
WRITE = {"Authorization": f"Bearer {DEPOSIT_KEY}"}
CANARY = "gateway-env-canary-5517"
LIMITS = ["--header-timeout", "2", "--body-timeout", "3", "--max-connections", "6", "--max-client-connections", "4"]
VAULT = "Skill manual: the vault. The vault door opens with the code kept by the night guard, never by phone."


@pytest.fixture(scope="module")
def home(tmp_path_factory, smollm2, embedder):
    from skillgraft.memory import SkillMemory

    folder = tmp_path_factory.mktemp("hardening") / "store"
    with SkillMemory(folder, engine=smollm2, embedder=embedder) as memory:
        memory.add_manual("vault", VAULT, examples=["how do I open the vault?"])
        memory.add_manual("git-squash", GIT_MANUAL, examples=["how do I squash my last commits?"])
        memory.add_solution("What is 17 * 23?", "391", method="print(17 * 23)", verifier="python")
    return folder


@pytest.fixture(scope="module")
def gateway(home, tmp_path_factory):
    from skillgraft.bench.serve import GatewayProcess

    require_llama_server()
    os.environ[CANARY] = "1"  # in the gateway's environment: no method may see it
    log = tmp_path_factory.mktemp("hardening-log") / "gateway.log"
    try:
        process = GatewayProcess(home, servers=1, model=None, log_path=log, extra_args=[
            "--api-key", API_KEY, "--allow-deposits", "--deposit-key", DEPOSIT_KEY, "--deposits-per-minute", "4",
            "--slot-wait", "1", *LIMITS,
        ])
    finally:
        del os.environ[CANARY]
    process.log_path = log
    try:
        yield process
    finally:
        assert process.stop() == 0


def _address(gateway) -> tuple[str, int]:
    host, port = gateway.url.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


def _connect(gateway, source: str = "127.0.0.1", timeout: float = 10) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    sock.bind((source, 0))
    sock.connect(_address(gateway))
    return sock


def _read_all(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (a timeout fails the test)."""
    data = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            return data
        data += chunk


def _status(response: bytes) -> int:
    return int(response.split(b" ", 2)[1])


def _skill_names(gateway) -> set[str]:
    return {row["name"] for row in httpx.get(gateway.url + "/v1/skillgraft/skills", headers=READ, trust_env=False).json()["data"]}


def test_a_smuggled_request_after_ambiguous_framing_is_never_read(gateway):
    """Content-Length and Transfer-Encoding together: 400, the connection closed, the smuggled
    DELETE never answered (RFC 9112 6.3)."""
    smuggled = (f"DELETE /v1/skills/vault HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {DEPOSIT_KEY}\r\n"
                "Content-Length: 0\r\n\r\n").encode()
    request = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {API_KEY}\r\n"
               "Content-Type: application/json\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n").encode()
    with _connect(gateway) as sock:
        sock.sendall(request + b"2\r\n{}\r\n0\r\n\r\n" + smuggled)
        response = _read_all(sock)
    assert _status(response) == 400 and response.count(b"HTTP/1.1") == 1, response
    assert b"Content-Length and Transfer-Encoding" in response
    assert "vault" in _skill_names(gateway)
    with _connect(gateway) as sock:  # two differing Content-Length headers: the same
        sock.sendall(request.replace(b"Transfer-Encoding: chunked", b"Content-Length: 5") + b"{}{}" + smuggled)
        response = _read_all(sock)
    assert _status(response) == 400 and response.count(b"HTTP/1.1") == 1, response
    assert "vault" in _skill_names(gateway)


@pytest.mark.parametrize("sent", [
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n",  # half the headers
    (f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {API_KEY}\r\n"
     "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"model\":").encode(),  # half the body
    b"",  # nothing at all
])
def test_a_slow_request_is_cut_off_with_408(gateway, sent):
    started = time.monotonic()
    with _connect(gateway) as sock:
        sock.sendall(sent)
        response = _read_all(sock)
    assert time.monotonic() - started < 8
    assert _status(response) == 408 and b"request_timeout" in response, response


def test_the_key_is_checked_before_the_body_is_read(gateway):
    """A keyless POST declaring a 4,000,000-byte body is refused from its headers."""
    with _connect(gateway, timeout=1.5) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 4000000\r\n\r\n")
        response = _read_all(sock)  # the server closes after its 401
    assert _status(response) == 401 and b"invalid_api_key" in response, response


def test_connections_are_limited_per_client(gateway):
    held = [_connect(gateway) for _ in range(4)]
    try:
        with _connect(gateway) as fifth:
            response = _read_all(fifth)
        assert _status(response) == 429 and b"too_many_connections" in response, response
        with _connect(gateway, "127.0.0.2") as fresh:  # another loopback address is the same host: no fresh budget
            response = _read_all(fresh)
        assert _status(response) == 429 and b"too_many_connections" in response, response
    finally:
        for sock in held:
            sock.close()
    time.sleep(0.5)
    assert httpx.get(gateway.url + "/healthz", trust_env=False).status_code == 200


@pytest.mark.parametrize("field", [
    {"frequency_penalty": 0.5}, {"presence_penalty": 0.5}, {"top_k": 40}, {"min_p": 0.05}, {"repetition_penalty": 1.1},
    {"best_of": 2}, {"echo": True}, {"max_tokens": "3"},
])
def test_fields_the_gateway_ignores_or_mistypes_are_a_400_naming_them(gateway, field):
    body = {"model": "smollm2-135m", "messages": [{"role": "user", "content": "What is 17 * 23?"}], **field}
    response = httpx.post(gateway.url + "/v1/chat/completions", json=body, headers=READ, timeout=60, trust_env=False)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == next(iter(field))


def test_deposits_need_the_deposit_key(gateway):
    manual = {"kind": "manual", "name": "n", "text": "Skill manual: nothing."}
    for headers in ({}, READ):
        refused = httpx.post(gateway.url + "/v1/skills", json=manual, headers=headers, trust_env=False)
        assert refused.status_code == 401 and refused.json()["error"]["code"] == "invalid_deposit_key"
        assert httpx.delete(gateway.url + "/v1/skills/vault", headers=headers, trust_env=False).status_code == 401
    assert "vault" in _skill_names(gateway)


def test_an_http_deposit_cannot_read_the_host_and_no_timing_is_served(gateway, home):
    """The file oracle: a method that reads /etc/machine-id, /etc/passwd, the store's catalog or
    any process's environment (the gateway's holds a canary) finds nothing, so "hidden" is what
    it verifies; neither answer nor listing carries verify_seconds."""
    paths = ["/etc/machine-id", "/etc/passwd", str(home / "catalog.db"), str(home)]
    method = (
        "import glob, os\nseen = []\n"
        f"for path in {paths!r} + glob.glob('/proc/*/environ'):\n"
        "    try:\n        data = open(path, 'rb').read()\n    except OSError:\n        continue\n"
        f"    if 'environ' not in path or {CANARY.encode()!r} in data:\n        seen.append(path)\n"
        f"if {CANARY!r} in os.environ:\n    seen.append('environ')\n"
        "print('hidden' if not seen else seen)\n"
    )
    deposit = {"kind": "solution", "question": "Which host files can a method read?", "answer": "hidden", "method": method}
    stored = httpx.post(gateway.url + "/v1/skills", json=deposit, headers=WRITE, timeout=120, trust_env=False)
    assert stored.status_code == 201, stored.text
    assert "verify_seconds" not in stored.json() and "verifier_output_sha256" not in stored.json()
    rows = httpx.get(gateway.url + "/v1/skillgraft/skills", headers=READ, trust_env=False).json()["data"]
    assert rows and not any("verify_seconds" in row for row in rows)


def test_deposits_are_rate_limited_per_client(gateway):
    """Each deposit is one bit out of the sandbox at most: a client gets a few a minute."""
    statuses = []
    for _ in range(6):
        response = httpx.post(gateway.url + "/v1/skills", json={}, headers=WRITE, trust_env=False)
        statuses.append(response.status_code)
        if response.status_code == 429:
            assert int(response.headers["retry-after"]) >= 1
            break
    assert statuses[-1] == 429 and len(statuses) <= 5, statuses  # 4 a minute; earlier tests took some
    assert httpx.get(gateway.url + "/v1/models", headers=READ, trust_env=False).status_code == 200


def test_no_free_slot_is_a_503_and_one_log_line(gateway):
    long_answer = "Write a long story about a dragon who learns to bake bread, with many chapters."
    body = {"model": "smollm2-135m", "messages": [{"role": "user", "content": long_answer}],
            "max_tokens": 400, "stream": True}
    holding, answered = threading.Event(), threading.Event()

    def hold_the_slot():
        """Read the stream slowly until the busy request is answered, then leave (the slot is given back)."""
        with httpx.stream("POST", gateway.url + "/v1/chat/completions", json=body, headers=READ, timeout=120,
                          trust_env=False) as response:
            for _ in response.iter_lines():
                holding.set()
                if answered.is_set():
                    break
                time.sleep(0.05)

    holder = threading.Thread(target=hold_the_slot)
    holder.start()
    try:
        assert holding.wait(60)
        busy = httpx.post(gateway.url + "/v1/chat/completions", json={**body, "stream": False}, headers=READ,
                          timeout=60, trust_env=False)
    finally:
        answered.set()
        holder.join(120)
    deadline = time.monotonic() + 30  # the holder left: its slot is given back (the metrics say; /healthz does not, keyed)
    while "skillgraft_slots_leased 0.0" not in httpx.get(gateway.url + "/metrics", headers=READ, trust_env=False).text:
        assert time.monotonic() < deadline, "the slot of a client that left was not given back"
        time.sleep(0.1)
    assert busy.status_code == 503 and busy.json()["error"]["code"] == "busy" and busy.headers["retry-after"]
    log = gateway.log_path.read_text()
    assert "503 busy" in log and "Traceback" not in log, log[-3000:]


def test_the_gateway_still_answers_after_all_of_it(gateway):
    body = {"model": "smollm2-135m", "messages": [{"role": "user", "content": "What is 17 * 23?"}]}
    response = httpx.post(gateway.url + "/v1/chat/completions", json=body, headers=READ, timeout=120, trust_env=False)
    assert response.status_code == 200 and response.json()["choices"][0]["message"]["content"] == "391"
    assert json.loads(response.text)["skillgraft"]["decision"] == "exact"
