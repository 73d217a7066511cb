"""A host written as an IP address is judged the same when a job is saved and when it is run.

Finding 2 of the trust-boundaries issue: ``http://0x7f000002:18082/`` (hex),
``0177.0.0.1`` (octal), ``127.1`` (short), ``2130706434`` (one number) and other
spellings of an address passed the check made on save, because Python's
``ipaddress`` does not read them, and were then refused on every dispatch,
because the worker's resolver (``getaddrinfo``, like ``inet_aton``) does. One
parser (``ssrf.host_address``) now reads a host for both checks.

Nothing here connects anywhere but to a server on 127.0.0.1 that the test
started: refusals of other addresses are shown by the checks themselves, and the
end-to-end refusal uses 127.0.0.2 (loopback, outside the allow-list).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket

import pytest
from django.core.cache import cache
from django.core.exceptions import ValidationError
from django.db import connection
from django.test import override_settings
from rest_framework.test import APIClient
from yarl import URL

from django_strait import trigger
from django_strait.api.auth import issue_key
from django_strait.dispatch.http import HttpDispatcher, HttpRequest
from django_strait.dispatch.ssrf import AddressGuard, host_address, url_problem
from django_strait.models import Job
from django_strait.rules.outcome import Kind
from tests.conftest import Reply

ONLY_127_0_0_1 = (ipaddress.ip_network("127.0.0.1/32"),)
STRAIT = {"ALLOWED_PRIVATE_NETWORKS": ["127.0.0.1/32"], "API_THROTTLE_RATE": None}

#: Hosts that denote 127.0.0.2 (loopback, outside ONLY_127_0_0_1) or the metadata address.
REFUSED_SPELLINGS = [
    ("0x7f000002", "127.0.0.2"),
    ("0X7F000002", "127.0.0.2"),
    ("0xa9fea9fe", "169.254.169.254"),
    ("0177.0.0.2", "127.0.0.2"),
    ("0177.0000.0000.0002", "127.0.0.2"),
    ("127.000.000.002", "127.0.0.2"),
    ("127.2", "127.0.0.2"),
    ("127.0.2", "127.0.0.2"),
    ("2130706434", "127.0.0.2"),
    ("0x7f.0x0.0x0.0x2", "127.0.0.2"),
    ("127.0.0.0x2", "127.0.0.2"),
    ("0x7f.2", "127.0.0.2"),
    ("127.0.0.2.", "127.0.0.2"),
    ("0x7f000002.", "127.0.0.2"),
    ("%31%32%37.0.0.2", "127.0.0.2"),
    ("%30x7f000002", "127.0.0.2"),
    # IPv6 hosts are named as the IPv6 address; the reason names the IPv4 one inside.
    ("[::ffff:127.0.0.2]", "::ffff:7f00:2"),
    ("[0:0:0:0:0:FFFF:7f00:2]", "::ffff:7f00:2"),
    ("[::ffff:a9fe:a9fe]", "::ffff:a9fe:a9fe"),
    ("１２７.0.0.2", "127.0.0.2"),
    ("127。0。0。2", "127.0.0.2"),
]


@pytest.mark.parametrize(("host", "address"), REFUSED_SPELLINGS)
def test_url_problem__any_spelling_of_a_refused_address__is_refused_naming_it(host, address):
    problem = url_problem(f"http://{host}:18082/hook", ONLY_127_0_0_1)

    assert problem is not None, host
    # Python 3.13 writes an IPv4-mapped address as ::ffff:127.0.0.2, 3.12 as ::ffff:7f00:2.
    assert problem.startswith(f"{ipaddress.ip_address(address)} (")
    assert "is not a public address" in problem


@pytest.mark.parametrize(("host", "address"), REFUSED_SPELLINGS)
def test_save_and_dispatch__any_spelling__read_as_the_same_address(host, address):
    raw_host = URL(f"http://{host}:18082/").raw_host

    assert host_address(raw_host) == ipaddress.ip_address(address)
    refused = AddressGuard(ONLY_127_0_0_1).check_url(f"http://{host}:18082/hook")
    assert refused is not None and refused.address == str(ipaddress.ip_address(address))


@pytest.mark.parametrize(
    ("host", "address"),
    [("0x7f000001", "127.0.0.1"), ("2130706433", "127.0.0.1"), ("127.1", "127.0.0.1"),
     ("0177.0.0.1", "127.0.0.1"), ("0x08080808", "8.8.8.8"), ("127.0.0.1.", "127.0.0.1")],
)  # fmt: skip
def test_url_problem__allowed_address_spelled_oddly__asks_for_the_plain_spelling(host, address):
    # aiohttp refuses "2130706433" and "127.1" outright, resolves "0x7f000001" through
    # getaddrinfo: refusing every other spelling keeps save and dispatch in step.
    problem = url_problem(f"http://{host}:18082/", ONLY_127_0_0_1)

    assert problem == f"{host} is {address} written another way; write it as {address}"
    assert AddressGuard(ONLY_127_0_0_1).check_url(f"http://{host}:18082/") is not None


@pytest.mark.parametrize(
    ("host", "shown"),
    [("256.1.1.1", "256.1.1.1"), ("1.2.3.4.5", "1.2.3.4.5"), ("08.0.0.1", "08.0.0.1"),
     ("0x100000000", "0x100000000"), ("1..2", "1..2"), ("a.0x", "a.0x"),
     ("[::ffff:0x7f.1]", "::ffff:0x7f.1")],
)  # fmt: skip
def test_url_problem__written_as_an_address_but_none__is_refused(host, shown):
    problem = url_problem(f"http://{host}/")

    assert problem is not None and problem.startswith(f"{shown} is not a valid IP address")
    assert AddressGuard().check_url(f"http://{host}/") is not None


@pytest.mark.parametrize(
    "host", ["hooks.example.com", "localhost", "0x7f000002.example.com", "1e100.net", "0x7f.0xg"]
)
def test_host_address__host_names__are_not_addresses(host):
    assert host_address(host) is None
    assert url_problem(f"http://{host}/") is None


#: Spellings the C library might read as a number: digits, dots, x and hex letters.
_CORPUS = [
    "0x7f000001", "0x7F.1", "0x7f.0x1", "017700000001", "0177.1", "127.1", "127.0.1",
    "2130706433", "4294967295", "4294967296", "0x", "0x0", "0", "00", "08", "0.08", "09.1",
    "1.2.3.4.5", "256.0.0.1", "1.256.0.1", "1.2.65535", "1.2.65536", "1.16777215",
    "1.16777216", "0xffffffff", "0x100000000", "0xff.0xffffff", "000000000000177.1",
    "127.0.0.1.", "127..0.1", ".127.0.0.1", "0x7f000001.", "1.2.3.0x4", "0x1.0x2.0x3.0x4",
    "1.2.3.04", "1.2.3.4x", "0xg", "abc", "a.b.c.d", "0xa.0xb", "ab.0xc", "1.2.3.4 ",
    "::1", "::ffff:127.0.0.1", "::ffff:7f00:1", "fe80::1", "::127.0.0.1", "1::2::3",
]  # fmt: skip


@pytest.mark.parametrize("host", _CORPUS)
def test_host_address__reads_every_number_the_resolver_reads_as_the_same_address(host):
    # AI_NUMERICHOST: the C library parses the text and never asks DNS.
    try:
        infos = socket.getaddrinfo(host, None, flags=socket.AI_NUMERICHOST)
    except (socket.gaierror, UnicodeError):
        return  # the resolver would look it up as a name: its addresses are checked then
    resolved = {ipaddress.ip_address(info[4][0].split("%")[0]) for info in infos}

    assert {host_address(host)} == resolved


# Saving a job, on every surface


@override_settings(STRAIT=STRAIT)
def test_job_clean__hex_fallback_url__refused_naming_the_entry_and_the_address():
    job = Job(
        name="hook",
        endpoint_url="https://hooks.example.com/x",
        fallback_endpoint_urls=["http://0x7f000002:18082/", "http://0xa9fea9fe/"],
    )

    with pytest.raises(ValidationError) as caught:
        job.clean()

    first, second = caught.value.message_dict["fallback_endpoint_urls"]
    assert first.startswith("Entry 0 (http://0x7f000002:18082/): 127.0.0.2 (loopback")
    assert second.startswith("Entry 1 (http://0xa9fea9fe/): 169.254.169.254 (link-local")


@override_settings(STRAIT=STRAIT)
def test_job_clean__hex_endpoint_url__names_the_address():
    with pytest.raises(ValidationError) as caught:
        Job(name="hook", endpoint_url="http://0x7f000002:18082/").clean()

    (message,) = caught.value.message_dict["endpoint_url"]
    assert message.startswith("http://0x7f000002:18082/: 127.0.0.2 (loopback")


@pytest.mark.django_db
@override_settings(STRAIT=STRAIT)
def test_api__hex_fallback_url__is_a_400_naming_the_field():
    cache.clear()
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Api-Key {issue_key('ops', ['jobs:write'])[1]}")
    body = {
        "name": "hook",
        "endpoint_url": "http://127.0.0.1:18082/",
        "fallback_endpoint_urls": ["http://0x7f000002:18082/"],
    }

    response = client.post("/api/strait/jobs/", body, format="json")

    assert response.status_code == 400, response.json()
    (message,) = response.json()["error"]["details"]["fallback_endpoint_urls"]
    assert "127.0.0.2 (loopback" in message
    assert not Job.objects.exists()


# Dispatching a row that was saved before (or around) the check


def test_dispatch__hex_spelling_of_an_allowed_address__refused_without_a_request(http_server):
    port = http_server.httpd.server_address[1]
    url = f"http://0x7f000001:{port}/hook"

    async def scenario():
        async with HttpDispatcher(allowed_networks=ONLY_127_0_0_1) as dispatcher:
            req = HttpRequest(run_id=1, job="hook", attempt=1, payload={}, url=url, timeout=5)
            return await dispatcher.dispatch(req)

    outcome = asyncio.run(scenario())

    assert (outcome.kind, outcome.error_type) == (Kind.NON_RETRYABLE, "ssrf.blocked")
    assert "write it as 127.0.0.1" in outcome.error
    assert http_server.requests == []


@pytest.mark.django_db(transaction=True)
@override_settings(STRAIT=STRAIT)
def test_worker__row_with_a_hex_loopback_fallback__refused_without_a_request(burst, http_server):
    port = http_server.httpd.server_address[1]
    Job.objects.create(name="hook", endpoint_url=http_server.url("/down"), max_attempts=2)
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {Job._meta.db_table} SET fallback_endpoint_urls = %s WHERE name = 'hook'",
            [f'["http://0x7f000002:{port}/hook"]'],
        )
    http_server.routes["/down"] = lambda _r: Reply(404)
    run = trigger("hook", {})

    burst()

    run.refresh_from_db()
    assert (run.status, run.error_type) == ("dead_letter", "ssrf.blocked")
    assert run.last_error == (
        "refused to connect to 127.0.0.2 (loopback) for host 0x7f000002: "
        "not in ALLOWED_PRIVATE_NETWORKS"
    )
    assert [r.path for r in http_server.requests] == ["/down"]
