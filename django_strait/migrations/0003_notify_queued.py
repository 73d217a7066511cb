"""PostgreSQL: NOTIFY idle workers whenever due runs become queued, by any path.

trigger(), trigger_many(), replay, a shutdown putting runs back, an admin action:
every statement that leaves due ``queued`` runs behind notifies their queues
once (statement-level triggers with transition tables; PostgreSQL also folds
identical notifications within a transaction). SQLite has no NOTIFY; its
workers poll.
"""

from django.db import migrations

CREATE = """
CREATE OR REPLACE FUNCTION django_strait_notify_queued() RETURNS trigger AS $$
BEGIN
    PERFORM pg_notify('django_strait', q.queue)
    FROM (SELECT DISTINCT queue FROM new_runs
          WHERE status = 'queued' AND available_at <= now()) AS q;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER django_strait_notify_insert
    AFTER INSERT ON django_strait_jobrun
    REFERENCING NEW TABLE AS new_runs
    FOR EACH STATEMENT EXECUTE FUNCTION django_strait_notify_queued();

CREATE TRIGGER django_strait_notify_update
    AFTER UPDATE ON django_strait_jobrun
    REFERENCING NEW TABLE AS new_runs
    FOR EACH STATEMENT EXECUTE FUNCTION django_strait_notify_queued();
"""

DROP = """
DROP TRIGGER IF EXISTS django_strait_notify_update ON django_strait_jobrun;
DROP TRIGGER IF EXISTS django_strait_notify_insert ON django_strait_jobrun;
DROP FUNCTION IF EXISTS django_strait_notify_queued();
"""


def _on_postgres(sql):
    def run(apps, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(sql)

    return run


class Migration(migrations.Migration):
    dependencies = [("django_strait", "0002_worker_operations")]

    operations = [migrations.RunPython(_on_postgres(CREATE), _on_postgres(DROP))]
