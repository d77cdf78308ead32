-- A migration applied, in the same transaction as the migration itself.
INSERT INTO pod_sweeper.schema_migrations (version, name, checksum) VALUES (%(version)s, %(name)s, %(checksum)s)
