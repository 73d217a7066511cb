"""One suite, every storage backend: the contract of ``storage.base.Storage``, pinned.

River's riverdrivertest: each test here runs against the portable ORM backend
on every database, and against the PostgreSQL backend too when the tests run on
PostgreSQL (there both backends share one database, so the ORM's way is checked
on PostgreSQL's locking as well). What it pins:

- guards: a transition refuses a run whose status it does not allow; the
  worker's steps move only the runs it holds, at the attempt it knows;
- claim order (priority, then due time, then id), filters, and no run handed to
  two workers, also from threads claiming at once;
- attempt numbering through start, hold, record, replay and rescue;
- concurrency and rate limits, and budgets, under contention; the rate limit
  as a sliding window, checked on every span of real starts;
- the record's parts (rollup, ledger, the run's costs) on both;
- that the two implementations of the rules both compute (the health EWMA
  fold, the concurrency cap) agree on generated inputs.
"""
