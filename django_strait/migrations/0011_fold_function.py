"""PostgreSQL: ``django_strait_fold``, the EWMA fold of resilience.health.fold, in SQL.

The record statement folds each endpoint's health in the database; a float product
that underflows to zero is an error in PostgreSQL (not in Python), and a failure
rate decaying through thousands of successes reached one: the fold treats every
factor below 1e-12 as 0 (so no product of nonzero factors is below 1e-24), as the
Python definition does. Other databases fold in Python.
"""

from django.db import migrations

CREATE = """
CREATE OR REPLACE FUNCTION django_strait_fold(old float8, new float8, keep float8)
RETURNS float8 LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN moved < 1e-12 THEN 0 ELSE moved END
    FROM (
        SELECT o * w + n * (CASE WHEN 1 - w < 1e-12 THEN 0 ELSE 1 - w END) AS moved
        FROM (
            SELECT CASE WHEN old < 1e-12 THEN 0 ELSE old END AS o,
                   CASE WHEN new < 1e-12 THEN 0 ELSE new END AS n,
                   CASE WHEN keep < 1e-12 THEN 0 ELSE keep END AS w
        ) AS clipped
    ) AS folded
$$;
"""

DROP = "DROP FUNCTION IF EXISTS django_strait_fold(float8, float8, float8);"


def _on_postgres(sql):
    def run(apps, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(sql)

    return run


class Migration(migrations.Migration):
    dependencies = [("django_strait", "0010_rate_admissions")]

    operations = [migrations.RunPython(_on_postgres(CREATE), _on_postgres(DROP))]
