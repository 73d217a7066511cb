-- django-strait's hand-written PostgreSQL statements, each under "-- name: <name>".
--
-- Loaded once by storage.postgres.queries; run through server-bound cursors (on a worker's
-- direct connections the claim, start and record are prepared: STRAIT["PREPARE_STATEMENTS"]).
-- Parameters are named (%(name)s), so a
-- statement composed of parts (the record) cannot mix them up. Arrays go in whole:
-- one array per column, a constant query text however many rows.


-- name: claim
-- Move up to %(limit)s due queued runs of the queues asked for to dequeued (with
-- %(begin)s, to executing: below), in claim order (priority, then due time, then id).
-- The queue filter is filled in per variant
-- (any queue / one / several) so that each variant plans on its own partial index.
-- The index is read in ranges (storage.floors.Segment: priorities low..high from
-- (after_at, after_id)), in claim order, each range's scan starting at its floor and
-- not at the dead entries of the runs claimed before it; the nested loop over the
-- ranges stops, and locks no more rows, once %(limit)s are found. One range from the
-- bottom of every priority is the whole index: the claim without floors.
-- External-worker jobs' runs (OJS, docs/ojs.md) are left out like a paused job's.
-- With %(begin)s, the runs' attempts begin here (executing, attempt + 1, started_at):
-- the start statement's work without its round trip, and one row version per run
-- fewer. The gate runs after it in the same transaction; a run it holds gets its
-- attempt back (hold, with expected = 'executing'). attempt comes back as it was
-- before the claim, which is what the gate counts. The transaction's commit does not
-- wait for its WAL flush (set_config here rather than a SET LOCAL round trip before):
-- a claim lost in a server crash only means its runs are queued again, which a crash
-- implies anyway (runs are delivered at least once). Unless the server has synchronous
-- standbys: then it waits as every commit does, or a failover would forget claims its
-- workers are executing, and another worker would run them again at once
-- (docs/operations.md, "Failover").
-- Each run comes back with what its process preset is chosen from (docs/process-execution.md):
-- its own preset (after an OOM kill) and its job's recommendation while it lasts, read
-- here rather than in a second round trip (an index probe per run into a table that
-- holds a row per job recently killed for its memory, usually none).
-- The UPDATE finds the runs of due through /*claimed_by_id*/ (queries.claim): joined to
-- due on a plain table. On one partitioned by status class, by "id = ANY" of due's ids
-- and the live statuses (as start, below, names them): without the statuses it probed
-- the primary key of every day of history for each run; joined, with a snapshot held
-- and the live leaf vacuumed when it had few runs (so estimated at one row), the planner
-- read the live leaf's whole primary key (every dead entry) as the join's outer side
-- (claim 0.5 -> 34 ms at 300 runs/s, EXPLAIN by auto_explain in docs/operations.md); as
-- an "= ANY" index condition, the ids can only be looked up.
WITH due AS (
    SELECT d.id
    FROM unnest(%(low)s::smallint[], %(high)s::smallint[], %(after_at)s::timestamptz[],
                %(after_id)s::bigint[]) AS s(low, high, after_at, after_id)
    CROSS JOIN LATERAL (
        SELECT id FROM django_strait_jobrun
        WHERE status = 'queued' AND available_at <= now() /*queue_filter*/
          AND priority BETWEEN s.low AND s.high
          AND (available_at, id) >= (s.after_at, s.after_id)
          AND job_id NOT IN (
              SELECT id FROM django_strait_job WHERE NOT enabled OR execution = 'external')
        ORDER BY priority DESC, available_at, id
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED
    ) AS d
    LIMIT %(limit)s
),
claimed AS (
    UPDATE django_strait_jobrun AS r
    SET status = CASE WHEN %(begin)s THEN 'executing' ELSE 'dequeued' END,
        attempt = r.attempt + CASE WHEN %(begin)s THEN 1 ELSE 0 END,
        started_at = CASE WHEN %(begin)s THEN now() ELSE r.started_at END,
        claimed_by = %(worker)s, dequeued_at = now(), heartbeat_at = now(), updated_at = now()
    /*claimed_by_id*/
    RETURNING r.id, r.job_id, r.payload::text,
              r.attempt - CASE WHEN %(begin)s THEN 1 ELSE 0 END AS attempt,
              r.attempts_before_replay, r.max_attempts, r.retry_overrides::text,
              r.endpoint_used, r.priority, r.available_at, r.workflow_step_run_id, r.started_at,
              r.preset
),
-- Claims of a job with a concurrency or rate limit are serialized on its row, locked
-- here (in id order) and held to the commit: the limit statement that follows sees
-- every claim committed before it.
limited AS (
    SELECT j.id FROM django_strait_job AS j
    WHERE j.id IN (SELECT job_id FROM claimed)
      AND (j.max_concurrency > 0 OR j.rate_limit_max IS NOT NULL)
    ORDER BY j.id
    FOR NO KEY UPDATE
)
SELECT id, job_id, payload, attempt, attempts_before_replay, max_attempts, retry_overrides,
       endpoint_used, workflow_step_run_id, preset,
       (SELECT p.preset FROM django_strait_jobpresetrecommendation AS p
        WHERE p.job_id = claimed.job_id AND p.expires_at > now()) AS recommended,
       started_at, priority, available_at
FROM claimed
WHERE (SELECT count(*) FROM limited) >= 0
  AND (SELECT set_config('synchronous_commit', CASE WHEN current_setting(
       'synchronous_standby_names') <> '' THEN current_setting('synchronous_commit') ELSE 'off'
       END, true)) IS NOT NULL
ORDER BY priority DESC, available_at, id;


-- name: start
-- Claimed runs begin an attempt; a run canceled since its claim is left out.
-- The runs are reached by primary key, the status a filter only ("... IS TRUE" is no
-- index condition): through the status index, the planner would walk the dead entry
-- of every run that was ever dequeued while a snapshot holds them (docs/operations.md,
-- "Vacuum and the claim"). Hold and record do the same, and also name their ids with
-- "id = ANY": on a table it thinks small the planner then scans it once, never once
-- per run of the batch (that nested loop cut a 10,000-run drain to a third). They
-- compare status and worker with columns of v, not with constants: as constants, the
-- statistics (few runs ever executing when the table was analyzed) shrank the runs
-- found by id to one, and the planner joined them to v in a nested loop that read all
-- of v once per run (a record of 500 runs: ~100 ms; with these conditions: ~12 ms).
-- On a runs table partitioned by status class, /*live*/ becomes "AND r.status IN" the
-- live leaf's statuses (storage.postgres.layout), which lets PostgreSQL open that leaf
-- only; its estimate is every row of the leaf, so it shrinks nothing. On a plain table
-- it is left out: there it would be the same shrinking constant as above.
UPDATE django_strait_jobrun AS r
SET status = 'executing', attempt = r.attempt + 1, started_at = now(), heartbeat_at = now(),
    updated_at = now()
WHERE r.id = ANY(%(ids)s::bigint[]) AND (r.status = 'dequeued') IS TRUE
  AND r.claimed_by = %(worker)s /*live*/
RETURNING r.id, r.attempt, r.started_at;


-- name: hold
-- Claimed runs go back to queued until their available_at, with the reason on the run;
-- each run's hold period is extended when its latest one has the same reason and
-- follows the same attempt, else a new period begins (one row per period, not per hold).
-- Runs whose attempt the claim began (expected = 'executing') get it back: attempt - 1,
-- and started_at as their last real attempt's row has it (NULL for a run never started).
WITH v AS (
    SELECT *, %(expected)s::varchar AS expected, %(worker)s::varchar AS worker
    FROM unnest(%(ids)s::bigint[], %(available_at)s::timestamptz[],
                %(error_type)s::varchar[], %(error)s::text[], %(endpoint)s::varchar[])
        AS v(id, available_at, error_type, error, endpoint)
),
u AS (
    UPDATE django_strait_jobrun AS r
    SET status = 'queued', available_at = v.available_at, claimed_by = '',
        dequeued_at = NULL, heartbeat_at = NULL, error_type = v.error_type,
        last_error = v.error, updated_at = now(),
        attempt = CASE WHEN v.expected = 'executing' THEN r.attempt - 1 ELSE r.attempt END,
        started_at = CASE WHEN v.expected = 'executing'
            THEN (SELECT a.started_at FROM django_strait_runattempt AS a
                  WHERE a.run_id = r.id AND a.number = r.attempt - 1
                    AND a.outcome <> 'short_circuited')
            ELSE r.started_at END
    FROM v
    WHERE r.id = v.id AND r.id = ANY(%(ids)s::bigint[])
      AND (r.status = v.expected) IS TRUE AND r.claimed_by = v.worker /*live*/
    RETURNING r.id, r.attempt
),
latest AS (
    SELECT DISTINCT ON (h.run_id) h.id, h.run_id, h.reason, h.after_attempt
    FROM django_strait_runhold AS h JOIN u ON u.id = h.run_id
    ORDER BY h.run_id, h.id DESC
),
extended AS (
    UPDATE django_strait_runhold AS h
    SET last_held_at = now(), until = v.available_at, times = h.times + 1, error = v.error,
        endpoint = v.endpoint, worker = %(worker)s
    FROM latest JOIN u ON u.id = latest.run_id JOIN v ON v.id = latest.run_id
    WHERE h.id = latest.id AND latest.reason = v.error_type AND latest.after_attempt = u.attempt
    RETURNING h.run_id
)
INSERT INTO django_strait_runhold (run_id, after_attempt, reason, error, endpoint, started_at,
    last_held_at, until, times, worker)
SELECT u.id, u.attempt, v.error_type, v.error, v.endpoint, now(), now(), v.available_at, 1,
       %(worker)s
FROM v JOIN u ON u.id = v.id
WHERE u.id NOT IN (SELECT run_id FROM extended);


-- name: record
-- The end of a batch of attempts: each run moves as its record says (canceled instead
-- when cancel was asked meanwhile), only if it is still executing under this worker at
-- that attempt, and its attempt row is appended. The parts of the record (record.*
-- below) follow as more CTEs: each reads v (the records) and u (the runs that moved).
-- A part with rows to return (record.<part>.returned) adds them with UNION ALL, without
-- a run id (id NULL), its row as JSON text in the status column. Each record names the
-- worker that holds its attempt (one worker's batch, or an OJS server's acks of many).
WITH v AS (
    SELECT *, 'executing'::varchar AS expected FROM unnest(
        %(id)s::bigint[], %(attempt)s::integer[], %(status)s::varchar[],
        %(available_at)s::timestamptz[], %(result)s::text[], %(error)s::text[],
        %(error_type)s::varchar[], %(endpoint)s::varchar[], %(started_at)s::timestamptz[],
        %(finished_at)s::timestamptz[], %(duration_ms)s::integer[], %(outcome)s::varchar[],
        %(status_code)s::integer[], %(excerpt)s::text[], %(job_id)s::bigint[],
        %(cost)s::numeric[], %(worker)s::varchar[]
    ) AS v(id, attempt, status, available_at, result, last_error, error_type, endpoint,
           started_at, finished_at, duration_ms, outcome, status_code, response_excerpt,
           job_id, cost, worker)
),
u AS (
    UPDATE django_strait_jobrun AS r SET
        status = CASE WHEN r.cancel_requested THEN 'canceled' ELSE v.status END,
        available_at = COALESCE(v.available_at, r.available_at),
        finished_at = CASE WHEN v.status = 'queued' AND NOT r.cancel_requested
                           THEN NULL ELSE v.finished_at END,
        result = v.result::jsonb, last_error = v.last_error, error_type = v.error_type,
        endpoint_used = v.endpoint, claimed_by = '', heartbeat_at = NULL, updated_at = now(),
        -- Budgets: a cost (budgeted jobs only) ends the attempt's reservation.
        reserved_cost = CASE WHEN v.cost IS NULL THEN r.reserved_cost END,
        actual_cost = CASE WHEN v.cost IS NULL THEN r.actual_cost
                           ELSE COALESCE(r.actual_cost, 0) + v.cost END
    FROM v
    WHERE r.id = v.id AND r.id = ANY(%(id)s::bigint[])
      AND (r.status = v.expected) IS TRUE AND r.claimed_by = v.worker AND r.attempt = v.attempt
      /*live*/
    RETURNING r.id, r.status
),
a AS (
    INSERT INTO django_strait_runattempt (run_id, number, endpoint, started_at, finished_at,
        duration_ms, outcome, status_code, error_type, error, response_excerpt, worker)
    SELECT v.id, v.attempt, v.endpoint, v.started_at, v.finished_at, v.duration_ms,
        v.outcome, v.status_code, v.error_type, v.last_error, v.response_excerpt, v.worker
    FROM v JOIN u ON u.id = v.id
)
/*parts*/
SELECT id, status FROM u
/*returned*/;


-- name: record.rollup
-- Per-minute counts for dashboards, in the record's statement: counted exactly once.
-- Two workers' records share rollup rows: each inserts or locks its rows in key order
-- (the ORDER BY), so neither holds one the other waits for while waiting for one the
-- other holds. In the order of the GROUP BY (a hash's), they deadlocked.
-- Saturating: a count written at its column's limit (by hand) must not fail the record.
rollup AS (
    INSERT INTO django_strait_runrollup AS t (minute, job_id, status, count, total_duration_ms)
    SELECT date_trunc('minute', v.finished_at), v.job_id, u.status, count(*), sum(v.duration_ms)
    FROM v JOIN u ON u.id = v.id
    GROUP BY 1, 2, 3
    ORDER BY 1, 2, 3
    ON CONFLICT (minute, job_id, status) DO UPDATE
    SET count = LEAST(t.count::bigint + EXCLUDED.count, 2147483647),
        total_duration_ms = LEAST(
            t.total_duration_ms::numeric + EXCLUDED.total_duration_ms, 9223372036854775807
        )
);


-- name: record.health
-- Endpoint health: each EWMA moves by the batch's sample (keep = the old value's weight);
-- django_strait_fold (migration 0011) is resilience.health.fold in SQL. A new endpoint
-- folds from the fresh EWMAs, its latency from the batch's own p95. Score and level are
-- generated columns. Rows are inserted or locked in URL order, as the rollup's in key order.
hv AS (
    SELECT * FROM unnest(%(health_url)s::varchar[], %(health_n)s::integer[],
                         %(health_keep)s::float8[], %(health_success)s::float8[],
                         %(health_failure)s::float8[], %(health_p95)s::float8[],
                         %(health_timeout)s::float8[])
        AS hv(url, n, keep, s, f, p95, timeout)
),
health AS (
    INSERT INTO django_strait_endpointhealth AS t (endpoint_url, success_rate, failure_rate,
        latency_p95_ms, timeout_ms, samples, updated_at)
    SELECT url, django_strait_fold(1.0, s, keep), django_strait_fold(0.0, f, keep),
           django_strait_fold(p95, p95, keep), timeout, n, now()
    FROM hv ORDER BY url
    ON CONFLICT (endpoint_url) DO UPDATE
    SET (success_rate, failure_rate, latency_p95_ms, timeout_ms, samples, updated_at) = (
        SELECT django_strait_fold(t.success_rate, hv.s, hv.keep),
               django_strait_fold(t.failure_rate, hv.f, hv.keep),
               django_strait_fold(t.latency_p95_ms, hv.p95, hv.keep),
               hv.timeout, t.samples + hv.n, now()
        FROM hv WHERE hv.url = t.endpoint_url
    )
);


-- name: record.ledger
-- Budgets: each ledger row releases the attempts' reservations and spends their cost.
-- The rows are locked first, in (project, day) order, as the claim's budget.lock locks
-- them: an UPDATE locks rows in the order its join finds them, which two workers'
-- records (or a record and a claim) need not share.
ledger_rows AS MATERIALIZED (
    SELECT t.id, x.released, x.spent
    FROM django_strait_budgetledger AS t
    JOIN unnest(%(ledger_project)s::bigint[], %(ledger_day)s::date[],
                %(ledger_released)s::numeric[], %(ledger_spent)s::numeric[])
        AS x(project_id, day, released, spent)
        ON t.project_id = x.project_id AND t.day = x.day
    ORDER BY t.project_id, t.day
    FOR NO KEY UPDATE OF t
),
ledger AS (
    UPDATE django_strait_budgetledger AS t
    SET reserved = GREATEST(t.reserved - x.released, 0), spent = t.spent + x.spent,
        updated_at = now()
    FROM ledger_rows AS x
    WHERE t.id = x.id
);


-- name: record.webhooks
-- Completion webhooks (the outbox): one delivery per run the batch ended whose job names a
-- webhook_url and wants the event (storage.webhooks.notify_runs does the same elsewhere).
-- The events by terminal status come in as arrays (dispatch.events, one table for both).
webhooks AS (
    INSERT INTO django_strait_webhookdelivery (delivery_id, run_id, event, url, status, attempt,
        next_attempt_at, last_error, last_response, created_at)
    SELECT gen_random_uuid(), u.id, e.event, j.webhook_url, 'pending', 0, now(), '', '', now()
    FROM u JOIN v ON v.id = u.id
    JOIN unnest(%(webhook_status)s::varchar[], %(webhook_event)s::varchar[]) AS e(status, event)
        ON e.status = u.status
    JOIN django_strait_job AS j ON j.id = v.job_id
    WHERE j.webhook_url <> ''
      AND jsonb_typeof(j.webhook_events) = 'array' AND j.webhook_events @> to_jsonb(e.event)
);


-- name: record.circuits
-- (Circuit states come after ELSE: "THEN '<word>'" names a run's status in this file.)
-- Circuits (resilience.policy.after_results in SQL): each endpoint's results of the batch,
-- as the worker summarized them (parts.Circuits.params): reset (a success came), failed
-- (any failure came) and tail (the failures after the last success, all of them without
-- one). Only endpoints whose results change something come (CircuitBreaker.worth). The
-- existing rows are locked first, in URL order (circuit_was, as record.ledger's), then a
-- failing endpoint without a row gets one; a success never makes a row. A row that
-- cannot be read (a state not a choice, a time not finite) folds as a fresh closed
-- circuit and is written whole, as the ORM's fold does (circuit_rows.readable_or_fresh).
-- Saturating, as record.rollup: a count written at its column's limit must not fail the record.
cv AS (
    SELECT * FROM unnest(%(circuit_url)s::varchar[], %(circuit_reset)s::boolean[],
                         %(circuit_failed)s::boolean[], %(circuit_tail)s::integer[])
        AS cv(url, reset, failed, tail)
),
circuit_was AS MATERIALIZED (
    SELECT t.endpoint_url AS url, t.state,
           t.state IN ('closed', 'open', 'half_open')
           AND COALESCE(isfinite(t.opened_at), true) AND COALESCE(isfinite(t.last_failure_at), true)
           AND COALESCE(isfinite(t.probe_started_at), true) AS ok
    FROM django_strait_endpointcircuit AS t JOIN cv ON cv.url = t.endpoint_url
    ORDER BY t.endpoint_url
    FOR NO KEY UPDATE OF t
),
circuits AS (
    INSERT INTO django_strait_endpointcircuit AS t (endpoint_url, state, failures, opened_at,
        last_failure_at, probe_started_at, updated_at)
    SELECT cv.url,
           COALESCE(CASE WHEN cv.tail < %(circuit_threshold)s THEN NULL ELSE 'open' END, 'closed'),
           cv.tail,
           CASE WHEN cv.tail >= %(circuit_threshold)s THEN %(circuit_now)s::timestamptz END,
           %(circuit_now)s::timestamptz, NULL, %(circuit_now)s::timestamptz
    FROM cv
    WHERE cv.failed OR cv.url IN (SELECT url FROM circuit_was)
    ORDER BY cv.url
    ON CONFLICT (endpoint_url) DO UPDATE
    SET (state, failures, opened_at, last_failure_at, probe_started_at, updated_at) = (
        SELECT CASE WHEN NOT a.opens THEN a.state ELSE 'open' END,
               LEAST(a.failures::bigint + cv.tail, 2147483647),
               CASE WHEN a.opens THEN %(circuit_now)s::timestamptz ELSE a.opened_at END,
               CASE WHEN cv.failed THEN %(circuit_now)s::timestamptz ELSE a.last_failure_at END,
               CASE WHEN a.opens THEN NULL ELSE a.probe_started_at END,
               %(circuit_now)s::timestamptz
        FROM cv CROSS JOIN LATERAL (
            SELECT b.*, cv.tail > 0 AND (b.state = 'half_open' OR (
                       b.state = 'closed' AND b.failures + cv.tail >= %(circuit_threshold)s
                   )) AS opens
            FROM (
                SELECT CASE WHEN NOT f.fresh THEN t.state ELSE 'closed' END AS state,
                       CASE WHEN f.fresh THEN 0 ELSE t.failures END AS failures,
                       CASE WHEN f.fresh THEN NULL ELSE t.opened_at END AS opened_at,
                       CASE WHEN f.ok THEN t.last_failure_at END AS last_failure_at,
                       CASE WHEN f.fresh THEN NULL ELSE t.probe_started_at END AS probe_started_at
                FROM (
                    -- A row made since circuit_was locked the others (another worker's
                    -- first failure) is readable.
                    SELECT o.ok, cv.reset OR NOT o.ok AS fresh FROM (
                        SELECT COALESCE((SELECT w.ok FROM circuit_was AS w
                                         WHERE w.url = t.endpoint_url), true) AS ok
                    ) AS o
                ) AS f
            ) AS b
        ) AS a
        WHERE cv.url = t.endpoint_url
    )
    RETURNING t.endpoint_url, t.state, t.failures, t.opened_at, t.last_failure_at,
              t.probe_started_at
);


-- name: record.circuits.returned
-- Each circuit as written, and the state it left (a row that could not be read: closed).
UNION ALL
SELECT NULL, json_build_array(c.endpoint_url, c.state, c.failures, c.opened_at,
                              c.last_failure_at, c.probe_started_at,
                              CASE WHEN w.ok THEN w.state ELSE 'closed' END)::text
FROM circuits AS c LEFT JOIN circuit_was AS w ON w.url = c.endpoint_url;


-- name: limits
-- Per limited job of a claim: its limits (read here, under the job row lock the claim
-- took, so a raised or removed limit applies at once); its active runs, this batch's
-- included, counted with one equality per status so the (job, status) index never walks
-- a queued backlog; the concurrency cap now (max_concurrency scaled by the endpoint's
-- health share, at least 1; 0 = no limit) and how many of the batch it admits; and the
-- rate limit as a sliding log: the runs admitted in the window's last
-- rate_limit_window_secs, topped up to rate_limit_max by this claim. Admissions are
-- stamped with the transaction's now(), which the started runs carry as started_at: at
-- most rate_limit_max of them in any span of the window. now() is taken before the
-- claim waited for the job's row lock, so an entry is dropped only RATE_LOG_KEPT past the
-- window (resilience.limits, passed as kept), when no claim still waiting can count it.
WITH v AS (
    SELECT * FROM unnest(%(job_id)s::bigint[], %(n)s::integer[], %(share)s::float8[])
        AS v(job_id, n, share)
),
j AS (
    SELECT v.job_id, v.n, v.share, NULLIF(j.max_concurrency, 0) AS mc,
           j.rate_limit_max AS rmax, j.rate_limit_window_secs AS secs
    FROM v JOIN django_strait_job AS j ON j.id = v.job_id
),
act AS (
    SELECT j.job_id,
           (SELECT count(*) FROM django_strait_jobrun AS r
            WHERE r.job_id = j.job_id AND r.status = 'dequeued')
         + (SELECT count(*) FROM django_strait_jobrun AS r
            WHERE r.job_id = j.job_id AND r.status = 'executing') AS c
    FROM j WHERE j.mc IS NOT NULL
),
cap AS (
    SELECT j.*, COALESCE(act.c, 0) - j.n AS others,
           CASE WHEN j.mc IS NULL THEN NULL
                ELSE GREATEST(1, floor(j.mc * j.share))::integer END AS eff
    FROM j LEFT JOIN act ON act.job_id = j.job_id
),
adm AS (
    SELECT cap.*,
           CASE WHEN eff IS NULL THEN n ELSE LEAST(n, GREATEST(0, eff - others)) END AS admitted,
           CASE WHEN rmax IS NULL OR secs IS NULL THEN NULL
                ELSE now() - make_interval(secs => secs) END AS since
    FROM cap
),
used AS (
    SELECT adm.job_id, COALESCE(sum(t.count), 0)::integer AS used, min(t.admitted_at) AS oldest
    FROM adm LEFT JOIN django_strait_jobrateadmission AS t
        ON t.job_id = adm.job_id AND t.admitted_at > adm.since AND isfinite(t.admitted_at)
    WHERE adm.since IS NOT NULL
    GROUP BY adm.job_id
),
granted AS (
    SELECT adm.job_id,
           CASE WHEN adm.since IS NULL THEN adm.admitted
                ELSE LEAST(adm.admitted, GREATEST(0, adm.rmax - used.used)) END AS granted,
           COALESCE(used.oldest, now()) + make_interval(secs => adm.secs) AS frees_at
    FROM adm LEFT JOIN used ON used.job_id = adm.job_id
),
gone AS (
    DELETE FROM django_strait_jobrateadmission AS t USING adm
    WHERE adm.since IS NOT NULL AND t.job_id = adm.job_id
      -- and one no reader can hold ('infinity', written by hand): it is no admission
      AND (t.admitted_at <= adm.since - %(kept)s::interval OR NOT isfinite(t.admitted_at))
),
logged AS (
    INSERT INTO django_strait_jobrateadmission (job_id, admitted_at, count)
    SELECT g.job_id, now(), g.granted
    FROM granted AS g JOIN adm ON adm.job_id = g.job_id
    WHERE adm.since IS NOT NULL AND g.granted > 0
)
SELECT adm.job_id, adm.mc, adm.eff, adm.others, adm.admitted, adm.rmax, adm.secs,
       g.granted, g.frees_at
FROM adm JOIN granted AS g ON g.job_id = adm.job_id;


-- name: budget.lock
-- The ledger rows of a claim's projects for the day, created if missing, locked (ON
-- CONFLICT DO UPDATE locks the row and returns its latest committed version) and read
-- with their project's budget.
INSERT INTO django_strait_budgetledger AS t (project_id, day, reserved, spent, updated_at)
SELECT p, %(day)s::date, 0, 0, now() FROM unnest(%(projects)s::bigint[]) AS p ORDER BY p
ON CONFLICT (project_id, day) DO UPDATE SET updated_at = EXCLUDED.updated_at
RETURNING t.id, t.project_id, t.day, t.reserved, t.spent, t.soft_warning_sent_at,
          (SELECT p.name FROM django_strait_project AS p WHERE p.id = t.project_id),
          (SELECT p.daily_budget FROM django_strait_project AS p WHERE p.id = t.project_id),
          (SELECT p.soft_limit_ratio FROM django_strait_project AS p WHERE p.id = t.project_id);


-- name: budget.reserve
-- The reservations: added to the ledger rows (with the day's soft-limit mark) and noted
-- on the runs (claimed, so live: /*live*/ as in start).
WITH l AS (
    UPDATE django_strait_budgetledger AS t
    SET reserved = t.reserved + v.amount, updated_at = now(),
        soft_warning_sent_at = CASE WHEN v.warn THEN now() ELSE t.soft_warning_sent_at END
    FROM unnest(%(ledger)s::bigint[], %(amount)s::numeric[], %(warn)s::boolean[])
        AS v(id, amount, warn)
    WHERE t.id = v.id
    RETURNING 1
),
r AS (
    UPDATE django_strait_jobrun AS r SET reserved_cost = v.cost
    FROM unnest(%(runs)s::bigint[], %(cost)s::numeric[]) AS v(id, cost)
    WHERE r.id = v.id /*live*/
    RETURNING 1
)
SELECT (SELECT count(*) FROM l), (SELECT count(*) FROM r);


-- name: lead
-- Leadership of one round of a duty: held until the transaction ends, so it needs no
-- session state between transactions (PgBouncer's transaction mode).
SELECT pg_try_advisory_xact_lock(%(namespace)s, %(key)s);


-- name: estimate
-- The planner's row count of a table: what a list shows instead of an exact COUNT(*).
-- Summed over the leaves of a partitioned table (pg_partition_tree lists none for a
-- plain table, which is read itself); -1 while none has been vacuumed or analyzed.
SELECT coalesce(sum(c.reltuples) FILTER (WHERE c.reltuples >= 0), -1)::bigint
FROM pg_class c
WHERE (c.oid = %(table)s::regclass AND c.relkind = 'r')
   OR c.oid IN (SELECT relid FROM pg_partition_tree(%(table)s::regclass) WHERE isleaf);


-- name: dead_rows
-- The dead rows of a table as the statistics count them (the vacuum duty's measure):
-- per leaf of a partitioned table, most first; one row for a plain table.
SELECT s.relid::regclass::text, s.n_dead_tup
FROM pg_stat_user_tables s
WHERE s.relid = %(table)s::regclass
   OR s.relid IN (SELECT relid FROM pg_partition_tree(%(table)s::regclass) WHERE isleaf)
ORDER BY s.n_dead_tup DESC;


-- name: claim_external
-- An OJS fetch's claim (docs/ojs.md): up to %(limit)s due queued runs of one queue whose
-- job is an enabled external-worker job, to dequeued for %(worker)s, in claim order
-- (the caller sorts: RETURNING keeps no order). The ORM's claim of these runs, in one
-- statement; its commit is the claim's (no wait for the WAL flush unless the server has synchronous standbys).
WITH due AS (
    SELECT id FROM django_strait_jobrun
    WHERE status = 'queued' AND available_at <= %(now)s AND queue = %(queue)s
      AND job_id IN (
          SELECT id FROM django_strait_job WHERE enabled AND execution = 'external')
    ORDER BY priority DESC, available_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE django_strait_jobrun AS r
SET status = 'dequeued', claimed_by = %(worker)s, dequeued_at = %(now)s,
    heartbeat_at = %(now)s, updated_at = %(now)s
/*claimed_by_id*/
RETURNING r.id, r.job_id, r.payload::text, r.attempt, r.attempts_before_replay,
          r.max_attempts, r.retry_overrides::text, r.endpoint_used, r.workflow_step_run_id,
          r.priority, r.available_at,
          (SELECT set_config('synchronous_commit', CASE WHEN current_setting(
              'synchronous_standby_names') <> '' THEN current_setting('synchronous_commit')
              ELSE 'off' END, true)) AS asynchronous;


-- name: deadlines
-- Executing runs %(worker)s holds take their visibility deadline (a fetch, a heartbeat),
-- one per run; a run requeued and fetched by another worker meanwhile keeps its own.
UPDATE django_strait_jobrun AS r
SET visible_until = v.until, heartbeat_at = %(now)s, updated_at = %(now)s
FROM unnest(%(ids)s::bigint[], %(until)s::timestamptz[]) AS v(id, until)
WHERE r.id = v.id AND r.id = ANY(%(ids)s::bigint[])
  AND (r.status = 'executing') IS TRUE AND r.claimed_by = %(worker)s /*live*/
RETURNING r.id;


-- name: fetch_external
-- An OJS fetch of plain runs in one statement (docs/ojs.md): up to %(limit)s due queued
-- runs of one queue whose job is an enabled external-worker job go straight to
-- executing (attempt + 1, started now), for one or several fetches at once: the n-th
-- run in claim order goes to slot n, whose worker (%(workers)s[n]) holds it, visible for
-- %(visible_ms)s[n] ms; each row returns its slot first.
-- Only if every run chosen is plain: it has its OJS id, is no workflow's step (its body
-- carries its parents' results), and its envelope names no
-- expires_at, visibility_timeout_ms or timeout_ms (those are read in Python, where an
-- expired run is dropped and a run's own timeouts set its deadline). Otherwise nothing
-- changes and the one row returned says blocked: the caller then fetches the
-- ordinary way (claim_external, start, deadlines). The run columns are what a job body
-- needs (ojs.hot); its commit is the claim's (no flush wait unless there are synchronous standbys).
WITH due AS (
    SELECT id, priority, available_at,
           (ojs_id IS NOT NULL AND workflow_step_run_id IS NULL AND NOT (COALESCE(ojs, '{}'::jsonb)
                ?| ARRAY['expires_at', 'visibility_timeout_ms', 'timeout_ms'])) AS plain
    FROM django_strait_jobrun
    WHERE status = 'queued' AND available_at <= now() AND queue = %(queue)s
      AND job_id IN (
          SELECT id FROM django_strait_job WHERE enabled AND execution = 'external')
    ORDER BY priority DESC, available_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
),
slots AS (
    SELECT id, row_number() OVER (ORDER BY priority DESC, available_at, id)::integer AS n
    FROM due
),
blocked AS (SELECT EXISTS (SELECT FROM due WHERE NOT due.plain) AS blocked),
started AS (
    UPDATE django_strait_jobrun AS r
    SET status = 'executing', attempt = r.attempt + 1, started_at = now(),
        visible_until = now() + (%(visible_ms)s::integer[])[s.n] * interval '1 millisecond',
        claimed_by = (%(workers)s::varchar[])[s.n], dequeued_at = now(), heartbeat_at = now(),
        updated_at = now()
    FROM slots AS s
    WHERE r.id = s.id /*by_id*/ AND NOT (SELECT blocked FROM blocked)
    RETURNING s.n, r.id, r.job_id, r.status, r.queue, r.priority, r.attempt,
              r.attempts_before_replay, r.max_attempts, r.available_at, r.created_at,
              r.started_at, r.finished_at, r.claimed_by, r.last_error, r.error_type, r.ojs_id,
              r.workflow_step_run_id,
              r.payload::text, r.ojs::text, r.retry_overrides::text, r.result::text
)
SELECT s.*, b.blocked, (SELECT set_config('synchronous_commit', CASE WHEN current_setting(
              'synchronous_standby_names') <> '' THEN current_setting('synchronous_commit')
              ELSE 'off' END, true)) AS asynchronous
FROM blocked AS b LEFT JOIN started AS s ON true;


-- name: envelopes
-- The runs an OJS batch enqueue just inserted take their OJS id, envelope and (when the
-- job names one) due time, one row per run from arrays, in the insert's transaction.
UPDATE django_strait_jobrun AS r
SET ojs_id = v.ojs_id, ojs = v.ojs, available_at = COALESCE(v.due, r.available_at)
FROM unnest(%(ojs_id)s::uuid[], %(ojs)s::jsonb[], %(due)s::timestamptz[], %(ids)s::bigint[])
  AS v(ojs_id, ojs, due, id)
WHERE r.id = v.id AND r.id = ANY(%(ids)s::bigint[]);
