"""PostgreSQL: NOTIFY for runs due by the clock at the statement, not at the transaction's start.

``now()`` is the transaction's start. A run queued late in a longer transaction
with ``available_at`` taken from the application's clock (a workflow's next
steps, queued in the transaction that records their parent's result) was "not
yet due" by it, so no worker was woken and the steps waited for the next poll
(``POLL_INTERVAL``, 1 s by default, per DAG level). ``clock_timestamp()`` is the
time the trigger runs, after the statement.
"""

from django.db import migrations

FUNCTION = """
CREATE OR REPLACE FUNCTION django_strait_notify_queued() RETURNS trigger AS $$
BEGIN
    PERFORM pg_notify('django_strait', q.queue)
    FROM (SELECT DISTINCT queue FROM new_runs
          WHERE status = 'queued' AND available_at <= {clock}) AS q;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;
"""


def _on_postgres(sql):
    def run(apps, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(sql)

    return run


class Migration(migrations.Migration):
    dependencies = [("django_strait", "0013_task_policy_formats")]

    operations = [
        migrations.RunPython(
            _on_postgres(FUNCTION.format(clock="clock_timestamp()")),
            _on_postgres(FUNCTION.format(clock="now()")),
        )
    ]
