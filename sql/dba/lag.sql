-- How far behind is pod-sweeper? One row; ages in seconds.
SELECT * FROM pod_sweeper.lag;
