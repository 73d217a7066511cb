"""Settings for bench_history's procrastinate side: the peer harness's, on DATABASE_URL.

procrastinate as ``../shared/peer-bench`` sets it up (its Django integration, the
no-op task ``benchapp.tasks.noop``), with the database taken from DATABASE_URL.
``PEER_BENCH`` names the harness's directory if it is not ``../shared/peer-bench``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from urllib.parse import urlsplit

PEER_BENCH = os.environ.get("PEER_BENCH", Path(__file__).resolve().parents[2] / "shared/peer-bench")
sys.path.append(str(PEER_BENCH))

from peerbench.settings_procrastinate import *  # noqa: E402, F403
from peerbench.settings_procrastinate import CONN_MAX_AGE  # noqa: E402

_url = urlsplit(os.environ["DATABASE_URL"])
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": _url.path.lstrip("/"),
        "USER": _url.username,
        "HOST": _url.hostname,
        "PORT": _url.port or 5432,
        "CONN_MAX_AGE": CONN_MAX_AGE,
    }
}
