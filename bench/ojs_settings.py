"""Settings for bench/bench_ojs.py: bench.settings plus DRF and the OJS binding's URLs."""

from __future__ import annotations

from bench.settings import *  # noqa: F403
from bench.settings import DATABASES, INSTALLED_APPS, STRAIT

ALLOWED_HOSTS = ["127.0.0.1"]
INSTALLED_APPS = [*INSTALLED_APPS, "rest_framework"]
ROOT_URLCONF = "bench.ojs_urls"
# The bench talks to 127.0.0.1 only, without keys and without the per-client throttle
# (600 requests a minute by default): the cost measured is the protocol's.
STRAIT = {**STRAIT, "OJS_REQUIRE_AUTH": False, "API_THROTTLE_RATE": None}
# Persistent connections, as a production server keeps them (or a pooler does): without
# them every request opens a PostgreSQL connection, which costs more than the request.
DATABASES = {"default": {**DATABASES["default"], "CONN_MAX_AGE": 60}}
