-- A migration applied, in the same transaction as the migration itself (or, in steps, after its last).
INSERT INTO pod_sweeper.schema_migrations (version, name, checksum, readable_from)
VALUES (%(version)s, %(name)s, %(checksum)s, %(readable_from)s)
