"""tests.settings for a worker behind PgBouncer in transaction mode (tests/e2e/test_pooler.py).

``DATABASE_URL`` goes through the pooler; ``STRAIT_TEST_DIRECT_DATABASE_URL``, when
set, is a second alias, "direct", that reaches PostgreSQL itself (the one to name in
``STRAIT_LISTEN_DATABASE``).
"""

from __future__ import annotations

import os

from tests.settings import *  # noqa: F403

# Django's advice for transaction pooling: a server-side cursor would outlive its transaction.
DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"] = True  # noqa: F405
if os.environ.get("STRAIT_TEST_DIRECT_DATABASE_URL"):
    DATABASES["direct"] = env.db_url_config(os.environ["STRAIT_TEST_DIRECT_DATABASE_URL"])  # noqa: F405
