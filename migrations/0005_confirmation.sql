-- 0005: confirmed deletion. A DELETE answered with a grace period leaves the pod terminating; the row
-- records when to look again (confirm_after), when the pod was seen gone (confirmed_at), and when it
-- was first seen still terminating past the configured limit (stuck_at).
ALTER TABLE pod_sweeper.outbox
    ADD COLUMN confirm_after timestamptz,
    ADD COLUMN confirmed_at  timestamptz,
    ADD COLUMN stuck_at      timestamptz;

CREATE INDEX outbox_to_confirm ON pod_sweeper.outbox (confirm_after)
    WHERE confirm_after IS NOT NULL AND confirmed_at IS NULL;
