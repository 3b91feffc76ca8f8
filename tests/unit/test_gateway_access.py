"""The gateway's header checks (skillgraft.gateway.access), its framing rule and its request
schema, driven directly over ASGI; the real server's behaviour is in tests/test_gateway_hardening.py."""

from __future__ import annotations

import anyio
import pytest

from tests.required import need

need("fastapi", "skillgraft[serve]")

from pydantic import ValidationError  # noqa: E402

from skillgraft.errors import ConfigError  # noqa: E402
from skillgraft.deposit_policy import ALL_CLIENTS_FACTOR, DepositPolicy, DepositRate  # noqa: E402
from skillgraft.web.clients import address_key  # noqa: E402
from skillgraft.gateway.access import guard  # noqa: E402
from skillgraft.web.http_guard import HttpLimits, framing_problem  # noqa: E402
from skillgraft.gateway.schemas import ChatCompletionRequest  # noqa: E402


async def _inner(scope, receive, send):
    """The app behind the checks: reads the body, then answers 200."""
    await receive()
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"{}"})


def _request(app, method: str, path: str, headers: dict, client: str = "127.0.0.1") -> tuple[int, dict, bool]:
    """(status, response headers, whether the body was read); a declared body never comes."""
    read = []
    sent: list[dict] = []

    async def receive():
        read.append(True)
        if headers.get("content-length") == "0":
            return {"type": "http.request", "body": b"", "more_body": False}
        await anyio.sleep(3600)

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": method, "path": path, "client": (client, 5000),
             "headers": [(k.lower().encode(), v.encode()) for k, v in {"host": "127.0.0.1", **headers}.items()]}

    async def run():
        with anyio.move_on_after(1):
            await app(scope, receive, send)

    anyio.run(run)
    start = next((message for message in sent if message["type"] == "http.response.start"), {})
    return start.get("status", 0), {k.decode(): v.decode() for k, v in start.get("headers", [])}, bool(read)


def _app(api_key=None, deposits=DepositPolicy()):
    return guard(_inner, api_key=api_key, allowed_hosts=None if api_key else ["127.0.0.1"], deposits=deposits)


def test_the_key_is_checked_before_any_body_is_read():
    big = {"content-length": "4000000"}
    status, headers, read = _request(_app("k"), "POST", "/v1/chat/completions", big)
    assert (status, read, headers.get("connection")) == (401, False, "close")
    status, _, read = _request(_app("k"), "POST", "/v1/chat/completions", {**big, "authorization": "Bearer k"})
    assert status == 0 and read  # the key is right: the body is waited for


@pytest.mark.parametrize("declared", ["1" * 5000, "9" * 40, "-1", "1e3", "\uff19"])
def test_a_content_length_that_is_no_count_within_the_limit_is_a_413(declared):
    status, headers, read = _request(_app(None, DepositPolicy(allowed=True)), "POST", "/v1/chat/completions",
                                     {"content-length": declared})
    assert (status, read, headers.get("connection")) == (413, False, "close")


def test_a_content_length_of_leading_zeros_is_its_count():
    app = _app(None, DepositPolicy(allowed=True))
    assert _request(app, "POST", "/v1/chat/completions", {"content-length": "0" * 5000})[0] == 0  # waits for the body
    assert _request(app, "POST", "/v1/chat/completions", {"content-length": "0" * 5000 + "5" * 8})[0] == 413


def test_writes_are_off_unless_allowed_and_need_the_deposit_key():
    sid = "skill_" + "0" * 32
    for method, path in (("POST", "/v1/skills"), ("DELETE", "/v1/skills/vault"), ("POST", "/v1/skills/feedback"),
                         ("DELETE", "/v1/skills/feedback/3"), ("POST", f"/v1/skills/{sid}"),
                         ("POST", f"/v1/skills/{sid}/versions"), ("DELETE", f"/v1/skills/{sid}/versions/2"),
                         ("POST", "/v1/skillgraft/skills"), ("DELETE", "/v1/skillgraft/skills/vault"),
                         ("POST", "/v1/skillgraft/skills/feedback")):
        assert _request(_app(), method, path, {})[0] == 403
        assert _request(_app("k"), method, path, {"authorization": "Bearer k"})[0] == 403
    keyed = _app("k", DepositPolicy(allowed=True, key="d"))
    assert _request(keyed, "POST", "/v1/skills", {"authorization": "Bearer k"})[0] == 401
    assert _request(keyed, "DELETE", "/v1/skills/x", {"authorization": "Bearer d", "content-length": "0"})[0] == 200
    assert _request(keyed, "POST", "/v1/skills/feedback", {"authorization": "Bearer d", "content-length": "0"})[0] == 200
    assert _request(keyed, "GET", "/v1/skills", {"authorization": "Bearer d"})[0] == 401  # reads need the API key
    assert _request(keyed, "GET", "/v1/skills/feedback", {"authorization": "Bearer k", "content-length": "0"})[0] == 200
    assert _request(keyed, "GET", "/v1/skills", {"authorization": "Bearer k", "content-length": "0"})[0] == 200
    assert _request(_app(None, DepositPolicy(allowed=True)), "DELETE", "/v1/skills/x", {"content-length": "0"})[0] == 200
    for path in ("/v1/skills/recall", "/v1/skillgraft/skills/recall"):  # a recall reads
        assert _request(_app(), "POST", path, {"content-length": "0"})[0] == 200


def test_deposits_are_rate_limited_per_client():
    app = _app(None, DepositPolicy(allowed=True, per_minute=2))
    statuses = [_request(app, "POST", "/v1/skills", {"content-length": "0"})[0] for _ in range(3)]
    assert statuses[:2] == [200, 200] and statuses[2] == 429
    status, headers, read = _request(app, "POST", "/v1/skills", {"content-length": "0"})
    assert status == 429 and int(headers["retry-after"]) >= 1 and not read
    assert _request(app, "POST", "/v1/skills", {"content-length": "0"}, client="192.0.2.7")[0] == 200
    assert _request(app, "DELETE", "/v1/skills/x", {"content-length": "0"})[0] == 429  # a delete is a write too
    assert _request(app, "DELETE", "/v1/skills/x", {"content-length": "0"}, client="192.0.2.8")[0] == 200


def test_fresh_addresses_of_one_host_get_no_fresh_budget():
    """Before: each loopback address (or IPv6 address of one /64) had its own budget, so 12
    writes in under a second passed a 3-a-minute limit."""
    app = _app(None, DepositPolicy(allowed=True, per_minute=3))
    loopback = [_request(app, "POST", "/v1/skills", {"content-length": "0"}, client=f"127.0.0.{i}")[0] for i in range(1, 13)]
    assert loopback.count(200) == 3
    app = _app(None, DepositPolicy(allowed=True, per_minute=3))
    six = [_request(app, "POST", "/v1/skills", {"content-length": "0"}, client=f"2001:db8::{i:x}")[0] for i in range(1, 13)]
    assert six.count(200) == 3


def test_with_a_deposit_key_the_limit_is_the_credentials_wherever_it_comes_from():
    app = _app("k", DepositPolicy(allowed=True, key="d", per_minute=3))
    keyed = {"authorization": "Bearer d", "content-length": "0"}
    statuses = [_request(app, "POST", "/v1/skills", keyed, client=f"198.51.100.{i}")[0] for i in range(1, 13)]
    assert statuses.count(200) == 3


def test_all_clients_together_are_capped():
    rate = DepositRate(3, clock=lambda: 0.0)
    assert sum(rate.take(f"addr:192.0.2.{i}") == 0.0 for i in range(100)) == 3 * ALL_CLIENTS_FACTOR


def test_addresses_are_folded_by_host():
    assert address_key("127.0.0.1") == address_key("127.9.9.9") == address_key("::1") == address_key("::ffff:127.0.0.2")
    assert address_key("2001:db8::1") == address_key("2001:db8::ffff:1") != address_key("2001:db8:0:1::1")
    assert address_key("192.0.2.1") != address_key("192.0.2.2")


def test_the_rate_refills_with_time():
    now = [0.0]
    rate = DepositRate(6, clock=lambda: now[0])
    assert [rate.take("a") for _ in range(6)] == [0.0] * 6
    assert rate.take("a") == pytest.approx(10.0)
    now[0] = 10.0
    assert rate.take("a") == 0.0 and rate.take("a") > 0


@pytest.mark.parametrize("policy, api_key, fragment", [
    (DepositPolicy(allowed=True), "k", "needs its own --deposit-key"),
    (DepositPolicy(allowed=True, key="k"), "k", "must differ"),
    (DepositPolicy(key="d"), None, "add --allow-deposits"),
    (DepositPolicy(allowed=True, per_minute=0), None, "must be positive"),
])
def test_deposit_settings_that_cannot_work_are_config_errors(policy, api_key, fragment):
    with pytest.raises(ConfigError, match=fragment):
        policy.check(api_key)


@pytest.mark.parametrize("namespace", ["admin", "team-a"])
def test_a_deposit_key_that_is_a_key_of_the_key_file_is_a_config_error(tmp_path, namespace):
    """One credential would read as an admin (or a namespace) and publish to the base, as
    ``--api-key`` equal to the deposit key would: refused the same way."""
    from skillgraft.gateway.runner import GatewayConfig

    key_file = tmp_path / "keys"
    key_file.write_text(f"{namespace} the-shared-key-00001\nteam-b key-of-team-b-00002\n")
    key_file.chmod(0o600)
    same = GatewayConfig(tmp_path, keys_file=str(key_file), deposits=DepositPolicy(allowed=True, key="the-shared-key-00001"))
    with pytest.raises(ConfigError, match="must differ from every key of the key file"):
        same.keys()
    other = GatewayConfig(tmp_path, keys_file=str(key_file), deposits=DepositPolicy(allowed=True, key="a-deposit-key-00003"))
    assert other.keys()


def test_http_limits_are_checked():
    HttpLimits().check()
    for limits in (HttpLimits(header_timeout_s=0), HttpLimits(max_connections=4, max_client_connections=8)):
        with pytest.raises(ConfigError):
            limits.check()


def test_ambiguous_framing_is_named():
    assert framing_problem([(b"Content-Length", b"4"), (b"Transfer-Encoding", b"chunked")])
    assert framing_problem([(b"content-length", b"4")]) is None
    assert framing_problem([(b"transfer-encoding", b"chunked")]) is None


MESSAGES = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize("field", [
    {"frequency_penalty": 0.5}, {"presence_penalty": 0.5}, {"top_k": 40}, {"min_p": 0.1}, {"repetition_penalty": 1.1},
    {"best_of": 2}, {"echo": True}, {"logprobs": True}, {"functions": [{"name": "f"}]},
])
def test_fields_the_gateway_cannot_honour_are_named(field):
    assert ChatCompletionRequest.model_validate({"model": "m", "messages": MESSAGES, **field}).unsupported() == next(iter(field))


@pytest.mark.parametrize("field", [
    {"frequency_penalty": 0}, {"presence_penalty": 0.0}, {"top_p": 1}, {"user": "u"}, {"logprobs": False},
    {"tool_choice": "auto"}, {"temperature": 0}, {"modalities": ["text"]},
    {"store": False}, {"store": True}, {"metadata": {"team": "docs", "run": "7"}},
])
def test_values_that_ask_for_nothing_are_accepted(field):
    assert ChatCompletionRequest.model_validate({"model": "m", "messages": MESSAGES, **field}).unsupported() is None


@pytest.mark.parametrize("field", [{"max_tokens": "3"}, {"stream": "true"}, {"temperature": "0"}, {"seed": 1.5},
                                   {"n": True}, {"stop": 3}, {"store": "yes"}, {"metadata": {"k": 1}},
                                   {"metadata": {f"k{i}": "v" for i in range(17)}}, {"metadata": {"k" * 65: "v"}}])
def test_types_are_strict(field):
    with pytest.raises(ValidationError) as raised:
        ChatCompletionRequest.model_validate({"model": "m", "messages": MESSAGES, **field})
    assert raised.value.errors()[0]["loc"][0] == next(iter(field))


@pytest.mark.parametrize("arguments", ["[" * 100_000, "{" * 50_000, "not json", "[1, 2]"])
def test_tool_call_arguments_that_are_no_json_object_are_a_format_error(arguments):
    from skillgraft.errors import FormatError

    call = {"id": "c1", "type": "function", "function": {"name": "calc", "arguments": arguments}}
    request = ChatCompletionRequest.model_validate({"model": "m", "messages": [
        {"role": "user", "content": "hi"}, {"role": "assistant", "content": None, "tool_calls": [call]}]})
    with pytest.raises(FormatError) as refused:
        request.chat()
    assert refused.value.field == "messages.1.tool_calls"
