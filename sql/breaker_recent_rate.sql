-- The cluster's host retires a second over the last %(seconds)s seconds, read once when a replica starts,
-- as the surge rule's first recent rate (tasks/loops/surge.py follows it from there): the open rows
-- through the claim index and the rows done since through the done_at index. O(rows of that window).
SELECT ((SELECT count(*)
         FROM pod_sweeper.outbox AS o
         WHERE o.cluster = %(cluster)s AND o.status IN ('pending', 'claimed')
           AND o.reason IN ('retired', 'row_deleted')
           AND o.enqueued_at > now() - make_interval(secs => %(seconds)s))
        + (SELECT count(*)
           FROM pod_sweeper.outbox AS o
           WHERE o.status = 'done' AND o.done_at > now() - make_interval(secs => %(seconds)s)
             AND o.cluster = %(cluster)s AND o.reason IN ('retired', 'row_deleted')
             AND o.enqueued_at > now() - make_interval(secs => %(seconds)s)))::float8 / %(seconds)s AS rate
