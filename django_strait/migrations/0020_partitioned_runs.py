"""The runs and attempts tables partitioned by status class and by day (PostgreSQL).

A new or small install (below ``layout.IN_ONE_GO`` runs) is partitioned here, in
this migration's transaction. A larger one keeps its plain table, which the code
runs on as well, and is told to move it with ``manage.py strait_partition``,
which copies in batches while the queue runs (docs/operations.md, "Upgrading to
the partitioned layout").
``STRAIT["PARTITION_RUNS"] = False`` keeps the plain table; SQLite always does.

Not reversed: migrating back leaves the layout as it is, which the code before
this migration runs on too (only the foreign keys into runs stay dropped).
"""

import sys

from django.db import migrations

from django_strait.conf import strait_settings
from django_strait.storage.postgres import layout


def partition(apps, schema_editor):
    connection = schema_editor.connection
    if connection.vendor != "postgresql" or not strait_settings.PARTITION_RUNS:
        return
    with connection.cursor() as cursor:
        if layout.partition_if_small(cursor):
            return
    sys.stderr.write(
        f"django_strait: the runs table holds {layout.IN_ONE_GO:,} runs or more, so it stays "
        "plain for now: run `manage.py strait_partition` to move it to the partitioned "
        'layout while the queue runs (docs/operations.md, "Upgrading to the partitioned '
        "layout\"), or set STRAIT['PARTITION_RUNS'] = False to keep it plain.\n"
    )


class Migration(migrations.Migration):
    dependencies = [
        ("django_strait", "0019_ojs_binding"),
    ]

    operations = [
        migrations.RunPython(partition, migrations.RunPython.noop, elidable=False),
    ]
