-- Each cluster's arrival and sweep rates over the last minute, in rows a second, for the metrics
-- refresher and `status`: arrived counts the rows enqueued in the minute (the open ones through the
-- claim index, the done ones through the done_at index), swept the rows that ended done in it. When
-- arrived stays above swept the backlog grows (PodSweeperBacklogGrowing). Every cluster's, as
-- cluster_gauges. O(open rows + rows done in the minute), never the done history.
WITH recent AS (
    SELECT cluster, enqueued_at
    FROM pod_sweeper.outbox
    WHERE status = 'done' AND done_at > now() - interval '1 minute'
), open AS (
    SELECT cluster, enqueued_at
    FROM pod_sweeper.outbox
    WHERE status IN ('pending', 'claimed')
), arrived AS (
    SELECT cluster, count(*) AS arrived
    FROM (SELECT * FROM recent UNION ALL SELECT * FROM open) AS r
    WHERE enqueued_at > now() - interval '1 minute'
    GROUP BY cluster
), swept AS (
    SELECT cluster, count(*) AS swept FROM recent GROUP BY cluster
)
SELECT cluster,
       coalesce(a.arrived, 0) / 60.0::float8 AS arrival_rate,
       coalesce(s.swept, 0) / 60.0::float8 AS sweep_rate
FROM arrived AS a
FULL JOIN swept AS s USING (cluster)
ORDER BY cluster
