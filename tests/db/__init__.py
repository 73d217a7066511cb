"""The test suite's database backends: Django's own, with a cheaper flush after a test.

After a ``transaction=True`` test Django empties every table, then its
``post_migrate`` signal writes back every content type and permission (a few
hundred rows, one commit for each app), about three quarters of the flush's time.
Those rows are the same after every flush (the migrations define them; the tests
only read them), so both backends leave these two tables as they are: the signal
then finds every row already there and writes nothing. A flush with
``reset_sequences`` empties them too, as Django's does.
"""

#: The tables the flush after a ``transaction=True`` test leaves as they are.
KEPT_BY_FLUSH = frozenset({"django_content_type", "auth_permission"})


def flushed(tables: list[str]) -> list[str]:
    """The tables the flush empties: all of Django's list but those it keeps."""
    return [table for table in tables if table not in KEPT_BY_FLUSH]
